"""Turn the traffic policy of a running emulation on or off, on every gateway at once.

The policy's values live in the topology (`policy:`, the intent's `policy` block); this module
flips `enabled` and pushes the result where each kind reads it: a crosszone gateway gets a new
intent file and a re-attach (`fastpath attach` diffs the pinned maps and writes only what
changed, without a moment unprogrammed), a legacy gateway reloads its nftables ruleset
(`legacy_gateway.policy_ops`: conntrack byte counters and DSCP marks, or `notrack` and no marks).
The queues need nothing: without marks every packet is in their default class, one FIFO.
"""

from __future__ import annotations

from crosszone.emulate import crosszone_gateway, legacy_gateway
from crosszone.emulate import state as st
from crosszone.emulate.topology import Plan, plan
from crosszone.linux.netns import Executor, Op


def with_policy(p: Plan, enabled: bool) -> Plan:
    """The same deployment with the policy on or off."""
    spec = p.spec.model_copy(update={"policy": p.spec.policy.model_copy(
        update={"enabled": enabled})})
    return plan(spec)


def policy_ops(p: Plan, attached: dict[str, bool]) -> list[Op]:
    """What every gateway needs to apply `p.spec.policy` (crosszone ones only when attached)."""
    ops: list[Op] = []
    for gw in p.gateways:
        if gw.kind == legacy_gateway.KIND.name:
            ops += legacy_gateway.policy_ops(p, gw)
        elif gw.kind == crosszone_gateway.KIND.name and attached.get(gw.name):
            ops += crosszone_gateway.intent_ops(p, gw) + crosszone_gateway.attach_ops(gw)
    return ops


def set_policy(ex: Executor, p: Plan, enabled: bool) -> Plan:
    """Apply the policy on or off to a running deployment; returns its new plan."""
    new = with_policy(p, enabled)
    state = st.load()
    ex.apply(policy_ops(new, state.fastpath if state else {}))
    if state is not None:
        state.spec = new.spec.model_dump(mode="json")
        st.save(state)
    return new
