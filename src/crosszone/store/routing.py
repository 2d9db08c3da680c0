"""A gateway's routing for a migration step, as a store object: `routing/<gateway>`.

The migration's runner writes one object per crosszone gateway it moves (`migrate/
agent_driver.py`); the gateway's agent reads its own, renders it into its FRR configuration
(`agent/frr_config.RoutingState`) and reports the object's `revision` once FRR holds it
(status `routing.state_revision`). The runner moves on when every agent reported the revision
it wrote. Because the state lives here and in the configuration file the agent renders from
it, a restarted bgpd (or agent) comes back with the step's weight, not with plain ECMP.

No object means the default: everything the intent allows announced, no weight, no graceful
shutdown. The object is JSON:

    {"revision": 7, "canary": "on", "canary_vpcs": ["c"], "bandwidth_mbps": 1000,
     "graceful_shutdown": false, "withdraw": false, "by": "migration"}

`revision` is the writer's own counter (each write takes the highest revision of every
gateway's object plus one, so it keeps growing across runners), not the store's revision: a
status that names it says exactly which write FRR holds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from crosszone.store.store import Store

ROUTING = "routing/"
CANARY_MODES = ("on", "off", "only")
#: FRR accepts 1..25600 Mbps of link bandwidth per path (frr_config.MAX_BANDWIDTH).
MAX_BANDWIDTH = 25600


class RoutingObjectError(ValueError):
    """A stored routing object that is not one (the message says what is wrong)."""


@dataclass(frozen=True)
class GatewayRouting:
    """One gateway's routing state for a migration step (see the module doc).

    canary: "on" announces the canary VPCs like the others, "off" leaves them out, "only"
    announces just them (no anycast VTEP, no other VPC). bandwidth_mbps: the BGP
    link-bandwidth extended community on every announced route (None: none).
    graceful_shutdown: RFC 8326's community on every route. withdraw: announce nothing
    (sessions and BFD stay up)."""

    revision: int
    canary: str = "on"
    canary_vpcs: tuple[str, ...] = ()
    bandwidth_mbps: int | None = None
    graceful_shutdown: bool = False
    withdraw: bool = False
    by: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.revision, bool) or not isinstance(self.revision, int) \
                or self.revision < 1:
            raise RoutingObjectError(f"revision: an integer >= 1, got {self.revision!r}")
        if self.canary not in CANARY_MODES:
            raise RoutingObjectError(f"canary: one of {', '.join(CANARY_MODES)}, "
                                     f"got {self.canary!r}")
        if not isinstance(self.canary_vpcs, tuple) or not all(
                isinstance(v, str) and v for v in self.canary_vpcs):
            raise RoutingObjectError("canary_vpcs: a list of VPC names")
        if self.canary == "only" and not self.canary_vpcs:
            raise RoutingObjectError("canary 'only' needs at least one canary VPC")
        bw = self.bandwidth_mbps
        if bw is not None and (isinstance(bw, bool) or not isinstance(bw, int)
                               or not 1 <= bw <= MAX_BANDWIDTH):
            raise RoutingObjectError(f"bandwidth_mbps: null or an integer in "
                                     f"1..{MAX_BANDWIDTH}, got {bw!r}")
        for name in ("graceful_shutdown", "withdraw"):
            if not isinstance(getattr(self, name), bool):
                raise RoutingObjectError(f"{name}: true or false")

    def to_json(self) -> dict[str, Any]:
        """The stored document."""
        d = asdict(self)
        d["canary_vpcs"] = list(self.canary_vpcs)
        return d

    def to_bytes(self) -> bytes:
        """The stored value."""
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> GatewayRouting:
        """A stored value (RoutingObjectError when it is not a routing object)."""
        try:
            d = json.loads(raw)
        except (ValueError, RecursionError):
            raise RoutingObjectError("not JSON") from None
        if not isinstance(d, dict):
            raise RoutingObjectError("not a JSON object")
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise RoutingObjectError(f"unknown fields {', '.join(map(str, unknown))}")
        if "revision" not in d:
            raise RoutingObjectError("no revision")
        vpcs = d.get("canary_vpcs", [])
        if not isinstance(vpcs, list):
            raise RoutingObjectError("canary_vpcs: a list of VPC names")
        try:
            return cls(**{**d, "canary_vpcs": tuple(vpcs)})
        except TypeError as exc:
            raise RoutingObjectError(str(exc)) from None

    def same_routing(self, other: GatewayRouting | None) -> bool:
        """Whether `other` asks FRR for the same thing (revision and author aside)."""
        if other is None:
            return False
        a, b = self.to_json(), other.to_json()
        for k in ("revision", "by"):
            a.pop(k)
            b.pop(k)
        return a == b


def key(gateway: str) -> str:
    """The store key of a gateway's routing object."""
    return ROUTING + gateway


def read_all(store: Store) -> dict[str, GatewayRouting]:
    """Every gateway's readable routing object (unreadable ones are left out: the agent
    that reads its own reports what is wrong with it)."""
    items, _ = store.get_prefix(ROUTING)
    out = {}
    for k, v in items.items():
        try:
            out[k[len(ROUTING):]] = GatewayRouting.from_bytes(v)
        except RoutingObjectError:
            continue
    return out


def next_revision(store: Store) -> int:
    """A revision above every routing object's (unreadable objects count as 0)."""
    return max((r.revision for r in read_all(store).values()), default=0) + 1
