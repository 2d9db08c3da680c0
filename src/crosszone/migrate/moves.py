"""What each migration move asks of every gateway: pure, no I/O.

A migration moves traffic between the crosszone gateways (driven through their agents, by a
routing object each in the store: `store/routing.py`) and the legacy gateways (driven through
an adapter: set weight, drain, withdraw, restore). `plan_move` says, for a move to a weight,
what the legacy side does before the agents change, the routing state of every crosszone
gateway, and what the legacy side does after, in the order that keeps every prefix on at least
one path with a consistent weighting:

- the side that loses traffic changes its weight before the side that gains announces, so the
  routers never see a mix of paths with and without link bandwidth (FRR falls back to plain
  ECMP over all of them for as long as one lacks it);
- at 100 % the source is drained with graceful shutdown (RFC 8326) after the target carries
  its full weight: the routers keep the source's paths as backup;
- at 0 % the source is restored (no weight, announced) before the target withdraws;
- a legacy target is announced by a `restore` of every prefix, named, right after its
  `set_weight`, both in that order: a legacy gateway retired by
  an earlier migration (withdrawn) is announced again, already with its link bandwidth, and one
  that still announces is unchanged by the restore.

Weights are link bandwidth: 200 Mbps per percent, split over a side's gateways (the value is
relative, the routers weigh each path by its share of the total).

The canary moves the canary VPC's storage-facing prefixes to the target side alone: the target
announces them first (the agents' `canary: only`, or the adapter's `restore(gateway,
prefixes)`), then the source stops (`canary: off`, or `withdraw(gateway, prefixes)`). While the
canary is on, the steps move every other prefix; the canary's stay with the target.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

#: Link bandwidth per percent of traffic (Mbps), split over a side's gateways.
BW_PER_PERCENT = 200
MAX_BANDWIDTH = 25600


def link_bandwidth(percent: float, gateways: int) -> int:
    """The link-bandwidth value (Mbps) each of `gateways` gateways announces to carry
    `percent` of the traffic between both sides."""
    return max(1, min(MAX_BANDWIDTH, round(percent * BW_PER_PERCENT / max(1, gateways))))


@dataclass(frozen=True)
class LegacyAction:
    """One adapter call: verb (set_weight, drain, withdraw, restore), gateway, value."""

    verb: str
    gateway: str
    value: int | None = None
    #: withdraw/restore only these prefixes (the canary's); empty: the whole gateway
    prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentState:
    """A crosszone gateway's routing for a move (store/routing.GatewayRouting without its
    revision)."""

    canary: str = "on"
    canary_vpcs: tuple[str, ...] = ()
    bandwidth_mbps: int | None = None
    graceful_shutdown: bool = False
    withdraw: bool = False


@dataclass(frozen=True)
class Move:
    """A move: legacy actions first, then every crosszone gateway's state, then legacy."""

    before: tuple[LegacyAction, ...] = ()
    states: dict[str, AgentState] = field(default_factory=dict)
    after: tuple[LegacyAction, ...] = ()


@dataclass(frozen=True)
class Sides:
    """Who is who in a migration: the crosszone gateways (agents), the legacy gateways
    (adapter), and whether crosszone is the target."""

    agents: tuple[str, ...]
    legacy: tuple[str, ...]
    agents_are_target: bool
    canary_vpcs: tuple[str, ...] = ()
    #: the canary VPCs' storage-facing prefixes (what the legacy side withdraws and restores)
    canary_prefixes: tuple[str, ...] = ()
    #: every other prefix the gateways announce (anycast VTEPs, the other VPCs' storage-facing
    #: prefixes): what a legacy target restores with its weight; empty: not restored
    production_prefixes: tuple[str, ...] = ()


def plan_move(sides: Sides, weight_new: int, canary_on: bool) -> Move:
    """The actions that put `weight_new` percent of the traffic on the target side (the
    canary's prefixes staying with the target while `canary_on`)."""
    a, lg = sides.agents, sides.legacy
    canary = sides.canary_vpcs if canary_on else ()

    def agents(**kw: object) -> dict[str, AgentState]:
        if not sides.agents_are_target and canary and weight_new > 0:
            kw.setdefault("canary", "off")  # the canary VPC stays with the legacy target
        return {g: AgentState(canary_vpcs=canary, **kw) for g in a}  # type: ignore[arg-type]

    def legacy(verb: str, value: int | None = None) -> tuple[LegacyAction, ...]:
        return tuple(LegacyAction(verb, g, value) for g in lg)

    def legacy_announced(percent: int) -> tuple[LegacyAction, ...]:
        # per gateway: its weight, then its announcement (the driver keeps a gateway's
        # actions in order), so a withdrawn gateway comes back with its link bandwidth
        out: list[LegacyAction] = []
        for g in lg:
            out.append(LegacyAction("set_weight", g, link_bandwidth(percent, len(lg))))
            if sides.production_prefixes:  # the canary's too: they are the target's as well
                out.append(LegacyAction("restore", g, prefixes=sides.production_prefixes
                                        + sides.canary_prefixes))
        return tuple(out)

    if sides.agents_are_target:
        if weight_new <= 0:
            # the canary alone carries a weight: routers that skip paths without link
            # bandwidth (`bgp bestpath bandwidth skip-missing`) then send the canary's replies
            # to the new gateways only, the legacy gateways still announcing it unweighted
            idle = agents(canary="only", bandwidth_mbps=link_bandwidth(100, len(a))) \
                if canary else agents(withdraw=True)
            return Move(before=legacy("restore"), states=idle)
        if weight_new < 100:
            return Move(before=legacy("set_weight", link_bandwidth(100 - weight_new, len(lg))),
                        states=agents(bandwidth_mbps=link_bandwidth(weight_new, len(a))))
        return Move(states=agents(bandwidth_mbps=link_bandwidth(100, len(a))),
                    after=legacy("drain"))
    # crosszone is the source, legacy the target
    if weight_new <= 0:
        return Move(states=agents(), after=legacy("withdraw"))
    if weight_new < 100:
        return Move(states=agents(bandwidth_mbps=link_bandwidth(100 - weight_new, len(a))),
                    after=legacy_announced(weight_new))
    return Move(before=legacy_announced(100), states=agents(graceful_shutdown=True))


def plan_canary(sides: Sides, weight_new: int, on: bool) -> Move:
    """The canary on (the target announces the canary's prefixes, then the source stops) or
    off (the source announces them again, then the target follows the weights), at the
    weight the network is at."""
    if not sides.canary_vpcs:
        return Move()
    states = plan_move(sides, weight_new, on).states
    some = tuple(sides.canary_prefixes)

    def legacy(verb: str) -> tuple[LegacyAction, ...]:
        return tuple(LegacyAction(verb, g, prefixes=some) for g in sides.legacy) if some \
            else ()

    if sides.agents_are_target:
        return Move(states=states, after=legacy("withdraw")) if on else \
            Move(before=legacy("restore"), states=states)
    if on:  # the canary VPC goes to the legacy target alone, at any weight
        return Move(before=legacy("restore"),
                    states={g: replace(st, canary="off") for g, st in states.items()})
    # off on the way back happens after a rollback to 0 %: the legacy side is withdrawn
    # already but for the canary, which goes back to the crosszone gateways first
    return Move(states=states, after=legacy("withdraw") if weight_new <= 0 else ())


def plan_retire(sides: Sides) -> Move:
    """After a finished drain: the source withdrawn, the target without weights."""
    if sides.agents_are_target:
        return Move(before=tuple(LegacyAction("withdraw", g) for g in sides.legacy),
                    states={g: AgentState() for g in sides.agents})
    return Move(states={g: AgentState(withdraw=True) for g in sides.agents},
                after=tuple(LegacyAction("restore", g) for g in sides.legacy))
