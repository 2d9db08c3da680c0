"""A fake deployment for the migration driver's unit tests: fake agents, legacy gateways, routers.

Fake agents read their gateway's routing object from the store and report it applied (unless
killed: then no status and no metrics; or failed closed: `health: "failed-closed"`, as an agent
whose fast path is not its own program reports), a fake legacy adapter, and a router model that
splits forwarded packets between the gateways by the link bandwidth each announces (graceful
shutdown and withdrawal take a gateway out; paths without link bandwidth make plain ECMP). Every
sleep of the driver or the engine advances the clock and the world.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from crosszone.agent.frr_config import facing_prefixes, with_halves
from crosszone.intent.cluster import load_cluster
from crosszone.migrate.agent_driver import AgentDriver, ProbeRound, ScrapeError, standby
from crosszone.store import routing
from crosszone.store.objects import split_cluster
from crosszone.store.routing import GatewayRouting
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT, STATUS

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(ROOT / "examples" / "cluster.yaml")
CANARY = "tenant-b"

AGENTS = ["xgw1", "xgw2"]
LEGACY = ["lgw1", "lgw2"]
PPS = 10_000  # packets per second through all gateways together
FRAME = 1200  # bytes per frame


class World:
    """Clock, fake agents, fake legacy gateways and the routers' split of the traffic."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.t = 1000.0
        self.killed: set[str] = set()
        #: agents failed closed: gateway -> the interface whose fast path is not theirs
        self.failed_closed: dict[str, str] = {}
        self.applied: dict[str, GatewayRouting | None] = dict.fromkeys(AGENTS)
        self.legacy: dict[str, dict[str, object]] = {
            g: {"bw": None, "drain": False, "withdrawn": False} for g in LEGACY}
        self.fwd: dict[str, float] = dict.fromkeys(AGENTS + LEGACY, 0.0)
        self.calls: list[tuple[str, str, int | None]] = []
        self.bgp_down: set[str] = set()
        #: agents whose reader has no answer from FRR (their metrics carry no session)
        self.no_reading: set[str] = set()
        self.drops: dict[str, int] = dict.fromkeys(AGENTS, 0)
        self.slow: set[str] = set()
        self.ecmp_only = False
        self.gro = 1  # frames per packet a legacy gateway counts
        self.legacy_bytes = False  # whether the legacy side has a bytes counter
        self.canary_withdrawn: dict[str, tuple[str, ...]] = {}
        #: the canary VPC's prefixes (a restore of only these leaves production withdrawn)
        self.canary_prefixes = [str(n) for v in CLUSTER.vpcs if v.name == CANARY
                                for n in with_halves(facing_prefixes(v))]
        store.put_many({INTENT + k: v for k, v in split_cluster(CLUSTER).items()})
        standby(store, AGENTS)  # the new gateways wait beside the legacy ones
        self.report_all()

    # the clock
    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.advance(max(s, 0.001))

    def advance(self, s: float) -> None:
        shares = self.shares()
        for g, x in shares.items():
            self.fwd[g] += PPS * s * x
        self.t += s
        self.report_all()

    # the agents
    def report_all(self) -> None:
        for gw in AGENTS:
            if gw in self.killed:
                continue
            raw = self.store.get(routing.key(gw))
            obj = GatewayRouting.from_bytes(raw) if raw else None
            self.applied[gw] = obj
            doc = {"revision": 1, "health": "ok", "message": "", "updated": self.t,
                   "metrics": f"{gw}:9470",
                   "routing": {"mode": "managed",
                               "state_revision": obj.revision if obj else None,
                               "bandwidth_mbps": obj.bandwidth_mbps if obj else None}}
            if gw in self.failed_closed:
                dev = self.failed_closed[gw]
                doc.update(health="failed-closed", message=f"{dev}: the attached XDP program "
                           "is not the agent's; announcements withdrawn",
                           fastpath={"ok": False, "interface": dev})
            self.store.put(STATUS + gw, json.dumps(doc).encode())

    def scrape(self, address: str) -> str:
        gw = address.split(":")[0]
        if gw in self.killed:
            raise ScrapeError(f"{address}: connection refused")
        if gw in self.slow:
            raise ScrapeError(f"{address}: timed out", slow=True)
        state = "Idle" if gw in self.bgp_down else "Established"
        sessions = "" if gw in self.no_reading else (
            f'crosszone_bgp_session_up{{peer="10.9.0.1",state="{state}"}} '
            f'{0 if gw in self.bgp_down else 1}\n'
            'crosszone_bfd_session_up{peer="10.9.0.1"} 1\n')
        return (f'crosszone_verdicts_total{{reason="fwd_to_storage",verdict="forward"}} '
                f'{int(self.fwd[gw])}\n'
                f'crosszone_verdict_bytes_total{{reason="fwd_to_storage",verdict="forward"}} '
                f'{int(self.fwd[gw] * FRAME)}\n'
                f'crosszone_verdicts_total{{reason="drop_no_route",verdict="drop"}} '
                f'{self.drops[gw]}\n' + sessions)

    # the routers: each gateway's share of the traffic
    def paths(self) -> dict[str, float | None]:
        """Gateways the routers use, with their link bandwidth (None: none)."""
        out: dict[str, float | None] = {}
        for gw, obj in self.applied.items():
            if obj is None:
                out[gw] = None  # no object: the default, everything announced, no weight
                continue
            if obj.withdraw or obj.graceful_shutdown or obj.canary == "only" \
                    or gw in self.failed_closed:  # it withdrew itself
                continue
            out[gw] = obj.bandwidth_mbps
        for gw, st in self.legacy.items():
            if st["withdrawn"] or st["drain"]:
                continue
            out[gw] = st["bw"]  # type: ignore[assignment]
        if not out:  # graceful shutdown: backup paths still carry when nothing else does
            out = {gw: None for gw, st in self.legacy.items() if not st["withdrawn"]}
        return out

    def shares(self) -> dict[str, float]:
        p = self.paths()
        if not p:
            return {}
        if self.ecmp_only or any(v is None for v in p.values()):
            return {g: 1 / len(p) for g in p}  # FRR: plain ECMP when one lacks the community
        total = sum(v for v in p.values() if v is not None)
        return {g: (v or 0) / total for g, v in p.items()}


class FakeLegacy:
    def __init__(self, world: World) -> None:
        self.w = world

    def set_weight(self, gateway: str, bandwidth_mbps: int) -> None:
        # as a router's route-map: the weight of what it announces, a withdrawn gateway
        # stays withdrawn
        self.w.calls.append(("set_weight", gateway, bandwidth_mbps))
        self.w.legacy[gateway].update(bw=bandwidth_mbps, drain=False)

    def drain(self, gateway: str) -> None:
        self.w.calls.append(("drain", gateway, None))
        self.w.legacy[gateway]["drain"] = True

    def withdraw(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        self.w.calls.append(("withdraw", gateway, None))
        if prefixes:  # the canary's: production traffic (the model's) is not affected
            self.w.canary_withdrawn[gateway] = tuple(prefixes)
            return
        self.w.legacy[gateway]["withdrawn"] = True

    def restore(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        self.w.calls.append(("restore", gateway, None))
        self.w.canary_withdrawn.pop(gateway, None)
        if not prefixes:
            self.w.legacy[gateway].update(bw=None, drain=False, withdrawn=False)
        elif set(prefixes) - set(self.w.canary_prefixes):
            self.w.legacy[gateway]["withdrawn"] = False  # production, with its weight

    def forwarded_packets(self, gateway: str) -> int:
        # a kernel gateway forwards GRO-merged packets: `gro` frames count once
        return int(self.w.fwd[gateway] / self.w.gro)

    def forwarded_bytes(self, gateway: str) -> int | None:
        return int(self.w.fwd[gateway] * FRAME) if self.w.legacy_bytes else None


class FakeProbes:
    def __init__(self) -> None:
        self.rounds = {"production": ProbeRound(32, 0, 20.0), "canary": ProbeRound(8, 0, 25.0)}

    def read(self, role: str) -> ProbeRound | None:
        return self.rounds.get(role)


def make_driver(world: World, **kw: object) -> AgentDriver:
    """The product's driver over the fake deployment, on the world's clock."""
    return AgentDriver(world.store, FakeLegacy(world), list(LEGACY), list(AGENTS), FakeProbes(),
                       scrape=world.scrape, clock=world.now, wall=world.now,
                       sleep=world.sleep, **kw)  # type: ignore[arg-type]
