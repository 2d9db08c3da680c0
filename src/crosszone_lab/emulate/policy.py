"""Turn the traffic policy of a running emulation on or off, on every gateway at once.

The policy's values live in the topology (`policy:`, the intent's `policy` block); this module
flips `enabled` and pushes the result where each kind reads it: for the crosszone gateways the
cluster intent goes to the controller (its API, as `crosszone apply` does) and every agent
applies the new revision to its gateway's maps (a diff, without a moment unprogrammed); a
legacy gateway reloads its nftables ruleset (`legacy_gateway.policy_ops`: conntrack byte
counters and DSCP marks, or `notrack` and no marks).
The queues need nothing: without marks every packet is in their default class, one FIFO.
"""

from __future__ import annotations

from crosszone.linux.netns import Executor, Op
from crosszone_lab.emulate import control_plane, legacy_gateway
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.topology import Plan, plan


def with_policy(p: Plan, enabled: bool) -> Plan:
    """The same deployment with the policy on or off."""
    spec = p.spec.model_copy(update={"policy": p.spec.policy.model_copy(
        update={"enabled": enabled})})
    return plan(spec)


def legacy_ops(p: Plan) -> list[Op]:
    """What the legacy gateways need to apply `p.spec.policy`: their rulesets, reloaded."""
    return [op for gw in p.gateways_of(legacy_gateway.KIND.name)
            for op in legacy_gateway.policy_ops(p, gw)]


def set_policy(ex: Executor, p: Plan, enabled: bool) -> Plan:
    """Apply the policy on or off to a running deployment, and wait until every crosszone
    agent has applied it; returns the deployment's new plan."""
    return apply(ex, with_policy(p, enabled))


def with_vpc_rates(p: Plan, rates_mbps: dict[str, int | None]) -> Plan:
    """The same deployment with these VPCs' rates (per-tenant fairness; None: no limit)."""
    vpcs = tuple(v.model_copy(update={"rate_mbps": rates_mbps[v.name]})
                 if v.name in rates_mbps else v for v in p.spec.vpcs)
    return plan(p.spec.model_copy(update={"vpcs": vpcs}))


def apply(ex: Executor, new: Plan) -> Plan:
    """Push a changed policy or tenant rates to every gateway of the running deployment: the
    legacy rulesets, and the cluster intent through the controller, waiting until every
    attached crosszone gateway's agent has applied it. Returns `new`."""
    state = st.load()
    ex.apply(legacy_ops(new))
    attached = [g for g in control_plane.gateways(new) if state and state.fastpath.get(g.name)]
    if attached:
        revision = control_plane.start_controller(new)
        for gw in attached:
            control_plane.wait_applied(gw, revision)
    if state is not None:
        state.spec = new.spec.model_dump(mode="json")
        st.save(state)
    return new
