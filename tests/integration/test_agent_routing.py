"""The agent owns its host's routing, against real FRR (issue 23, deliverable 1).

A gateway namespace runs a per-namespace FRR the way the emulator runs it (daemons with
`-N NS` and a private `--vty_socket` directory) and peers with a router namespace whose FRR
uses FRR's own per-namespace paths (`-N NS` only: the applier reaches it with `-N`). The
router's configuration goes in through the same applier (a plain config, no agent).

The gateway's agent runs on a SQLite store with a dict sink for maps (the fast path is not
under test here). Through intent changes and a routing-state change it checks that: the router
learns what the gateway announces (IPv4 and IPv6, with BFD up); re-applying changes nothing;
an added VPC changes only its own lines and is learnt; a removed VPC is withdrawn; the maps of
an added VPC are written while FRR does not announce it yet, and those of a removed one after
FRR withdrew it; a prefix removed by hand in FRR is put back at the next check; a
link-bandwidth weight reaches the router; the BGP session never resets (the router's count of
established and dropped connections does not move once the new session has settled); and
/etc/frr/frr.conf is left as it was.

Namespaces `czt23-<pid>-gw` / `-rt`: unique, and never the emulator's `cz-*`/`czemu-*`.
Everything (daemons, namespaces, files) goes in `finally`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from frr_netns import FrrNs, sh

from crosszone.agent.agent import Agent
from crosszone.agent.frr_apply import FrrReloadApplier, FrrTarget
from crosszone.agent.frr_config import RoutingState
from crosszone.agent.routing_owner import RoutingOwner
from crosszone.compile.diff import DictSink, MapOp
from crosszone.intent.cluster import parse_cluster
from crosszone.store.objects import split_cluster
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT

GW_ADDR, RT_ADDR = "10.77.0.2", "10.77.0.1"
VPC_A = {"name": "a", "vni": 1001, "prefixes": ["192.168.0.0/16", "fd00:a::/64"],
         "storage_facing": ["100.64.0.0/16", "fd64:a::/64"], "router_mac": "02:00:00:00:aa:01"}
VPC_B = {"name": "b", "vni": 1002, "prefixes": ["192.168.0.0/16"],
         "storage_facing": ["100.65.0.0/16"], "router_mac": "02:00:00:00:bb:01"}

ROUTER_CONF = f"""frr defaults datacenter
hostname {socket.gethostname()}
!
router bgp 65001
 bgp router-id 10.77.255.1
 neighbor {GW_ADDR} remote-as 65100
 neighbor {GW_ADDR} timers connect 1
 neighbor {GW_ADDR} bfd
 !
 address-family ipv6 unicast
  neighbor {GW_ADDR} activate
 exit-address-family
exit
!
end
"""


def _intent(*vpcs: dict[str, Any]) -> dict[str, bytes]:
    doc = {
        "version": 2,
        "gateways": [{
            "name": "gw-t", "vtep": "10.0.0.100",
            "interfaces": [
                {"name": "c0", "role": "compute", "mac": "02:00:00:00:10:01",
                 "next_hop_mac": "02:00:00:00:10:fe"},
                {"name": "s0", "role": "storage", "mac": "02:00:00:00:20:01"}],
            "bgp": {"asn": 65100, "router_id": "10.77.255.2",
                    "bfd": {"interval_ms": 100, "multiplier": 5},
                    "peers": [{"address": RT_ADDR, "asn": 65001}]},
        }],
        "vpcs": list(vpcs),
    }
    return split_cluster(parse_cluster(yaml.safe_dump(doc)))


def _wait(what: str, cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Lab:
    """The two namespaces, their link and their FRR."""

    def __init__(self, base: Path) -> None:
        tag = f"czt23-{os.getpid() % 100000}"
        self.gw_ns, self.rt_ns = f"{tag}-gw", f"{tag}-rt"
        self.veth = f"cz23v{os.getpid() % 100000}"
        self.base = base
        self.gw = FrrNs(self.gw_ns, base / "gw")
        self.rt = FrrNs(self.rt_ns, base / "rt", private_sockets=False)
        self.made: list[str] = []

    def up(self) -> None:
        for ns in (self.gw_ns, self.rt_ns):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", self.veth, "type", "veth", "peer", "name", self.veth + "p")
        sh("ip", "link", "set", self.veth, "netns", self.gw_ns, "name", "c0")
        sh("ip", "link", "set", self.veth + "p", "netns", self.rt_ns, "name", "g1")
        for ns, dev, v4, v6 in ((self.gw_ns, "c0", GW_ADDR, "fd77::2"),
                                (self.rt_ns, "g1", RT_ADDR, "fd77::1")):
            sh("ip", "-n", ns, "addr", "add", f"{v4}/30", "dev", dev)
            sh("ip", "-n", ns, "addr", "add", f"{v6}/64", "dev", dev, "nodad")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        # the anycast VTEP is a local address of the gateway: BGP's import check finds it
        sh("ip", "-n", self.gw_ns, "addr", "add", "10.0.0.100/32", "dev", "lo")
        self.gw.start()
        self.rt.start()

    def down(self) -> None:
        for frr in (self.gw, self.rt):
            frr.stop()
        for ns in self.made:
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def lab() -> Iterator[Lab]:
    if os.geteuid() != 0 or not Path("/usr/lib/frr/bgpd").exists():
        pytest.skip("needs root and FRR (network namespaces, bgpd)")
    base = Path(tempfile.mkdtemp(prefix="czt23-"))
    base.chmod(0o755)  # the daemons run as user frr and keep their sockets below
    lab = Lab(base)
    try:
        lab.up()
        yield lab
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)


class WatchingSink(DictSink):
    """A map sink that notes, at every map write, whether the gateway's bgpd announces a
    prefix at that moment (make-before-break, read from FRR itself)."""

    def __init__(self, frr: FrrNs, prefix: str) -> None:
        super().__init__()
        self.frr, self.prefix = frr, prefix
        self.seen: list[tuple[str, str, bool]] = []

    def apply(self, op: MapOp) -> None:
        running = self.frr.vtysh("show running-config bgpd")
        self.seen.append((op.kind, op.map, f"  network {self.prefix}\n" in running))
        super().apply(op)


def _json(frr: FrrNs, command: str) -> Any:
    return json.loads(frr.vtysh(command) or "{}")


def _learnt(lab: Lab) -> set[str]:
    """Prefixes in the router's BGP table, both families."""
    out: set[str] = set()
    for fam in ("ipv4", "ipv6"):
        out |= set(_json(lab.rt, f"show bgp {fam} unicast json").get("routes", {}))
    return out


def _session(lab: Lab) -> dict[str, Any]:
    """The router's view of the session with the gateway."""
    return _json(lab.rt, f"show bgp neighbors {GW_ADDR} json").get(GW_ADDR, {})


#: how long both sides must have been Established, BFD up, before the baseline
SETTLE_S = 5.0


def _settled(lab: Lab) -> bool:
    """Both bgpds see the session Established for SETTLE_S and both bfdds see BFD up."""
    views = (_session(lab), _json(lab.gw, f"show bgp neighbors {RT_ADDR} json").get(RT_ADDR, {}))
    if not all(v.get("bgpState") == "Established"
               and v.get("bgpTimerUpMsec", 0) >= SETTLE_S * 1000 for v in views):
        return False
    return _bfd_up(lab.gw) and _bfd_up(lab.rt)


def _bfd_up(frr: FrrNs) -> bool:
    """Whether this FRR's bfdd has a BFD session up."""
    return any(p.get("status") == "up" for p in json.loads(frr.vtysh("show bfd peers json")
                                                             or "[]"))


def _added_lines_mention_only(changes: tuple[str, ...], needle: str) -> bool:
    """Every changed line is context (a node line) or about `needle`."""
    context = ("router bgp", " address-family", "ip prefix-list", "exit")
    return all(needle in line or line.startswith(context) for line in changes)


def test_agent_applies_intent_changes_to_frr_without_resetting_sessions(lab: Lab,
                                                                        tmp_path: Path) -> None:
    # The router: FRR's own per-namespace paths, reached with -N through the same applier.
    system_conf = Path("/etc/frr/frr.conf")
    system_before = system_conf.read_bytes() if system_conf.exists() else None
    router = FrrReloadApplier(FrrTarget(pathspace=lab.rt_ns,
                                        config_file=lab.rt.dir / "frr.conf",
                                        rundir=lab.base / "run"))
    router.apply(ROUTER_CONF)

    target = FrrTarget(vty_socket=lab.gw.dir, config_file=lab.gw.dir / "frr.conf",
                       rundir=lab.base / "run")
    owner = RoutingOwner("gw-t", FrrReloadApplier(target), hostname=socket.gethostname(),
                         check_every=3600)
    store = SqliteStore(str(tmp_path / "s.db"))
    try:
        sink = WatchingSink(lab.gw, "100.65.0.0/16")
        agent = Agent("gw-t", store, sink, lambda name: 5, routing=owner)
        store.put_many({INTENT + k: v for k, v in _intent(VPC_A).items()})
        res = agent.step(0)
        assert res is not None and res.mode == "full"
        assert owner.mode == "managed", owner.message

        first = {"10.0.0.100/32", "100.64.0.0/16", "fd64:a::/64", "fd64:a::/65",
                 "fd64:a:0:0:8000::/65"}
        assert set(owner.status()["announced"]) == first
        _wait("the session", lambda: _session(lab).get("bgpState") == "Established")
        _wait("the router to learn the prefixes", lambda: _learnt(lab) >= first)
        _wait("BFD up", lambda: _bfd_up(lab.rt))
        # the IPv4 routes reach the router's kernel through the gateway
        kernel = sh("ip", "-n", lab.rt_ns, "route", "show", "100.64.0.0/16").stdout
        assert "via 10.77.0.2" in kernel
        # The baseline. A new neighbour's session is born with some churn in FRR 8.4, not from
        # an apply (docs/routing.md): each side's bgpd re-registers its BFD session with the
        # local address and interface once its first connection is up, bfdd starts that
        # session Down, and a bgpd whose first session was Up resets BGP ("Cease/BFD Down");
        # a connection collision can add a short-lived establishment. All of it follows the
        # first establishment on each side within milliseconds, so the baseline is taken once
        # both sides have been Established for SETTLE_S with BFD up at both ends; from there on
        # no apply may touch the session.
        _wait("the session to settle", lambda: _settled(lab), timeout=90)
        up = _session(lab)
        # the same intent again: nothing to apply
        assert owner.applier.apply(owner.applied.config).empty  # type: ignore[union-attr]

        # a VPC added: only its lines change, the router learns it, the session stays
        sink.seen.clear()
        store.put_many({INTENT + k: v for k, v in _intent(VPC_A, VPC_B).items()})
        agent.step(0)
        # its maps were written while FRR did not announce it yet
        assert sink.seen and not any(on for _, _, on in sink.seen), sink.seen
        assert "  network 100.65.0.0/16\n" in lab.gw.vtysh("show running-config bgpd")
        ch = owner.last_changes
        assert ch.deleted == () and ch.added, ch
        assert _added_lines_mention_only(ch.added, "100.65.0.0/16"), ch.added
        _wait("the router to learn VPC b", lambda: "100.65.0.0/16" in _learnt(lab))

        # the VPC removed: withdrawn
        sink.seen.clear()
        store.put_many({INTENT + k: v for k, v in _intent(VPC_A).items()})
        agent.step(0)
        # FRR had withdrawn it before the first map write of the removal
        assert any(kind == "delete" for kind, _, _ in sink.seen), sink.seen
        assert not any(on for _, _, on in sink.seen), sink.seen
        assert "100.65.0.0/16" not in owner.status()["announced"]
        _wait("the router to drop VPC b", lambda: "100.65.0.0/16" not in _learnt(lab))
        assert _learnt(lab) >= first

        # FRR changed behind the agent's back: the next check puts the intent back
        lab.gw.vtysh("configure terminal", "router bgp 65100", "address-family ipv4 unicast",
                     "no network 100.64.0.0/16")
        _wait("the router to lose 100.64.0.0/16", lambda: "100.64.0.0/16" not in _learnt(lab))
        owner._checked_at -= owner.check_every  # the check is due
        agent.step(0)
        assert owner.drift_corrections == 1
        _wait("the router to learn it again", lambda: "100.64.0.0/16" in _learnt(lab))

        # a migration weight: the link-bandwidth community reaches the router
        owner.set_state(RoutingState(bandwidth_mbps=400))
        agent.step(0)
        assert owner.status()["bandwidth_mbps"] == 400

        def weighted() -> bool:
            route = _json(lab.rt, "show bgp ipv4 unicast 100.64.0.0/16 json")
            return any("400" in str(p.get("extendedCommunity", {}).get("string", ""))
                       for p in route.get("paths", []))
        _wait("the weight at the router", weighted)

        # everything withdrawn (sessions stay)
        owner.set_state(RoutingState(withdraw=True))
        agent.step(0)
        _wait("the router to drop everything", lambda: not (_learnt(lab) & first))

        after = _session(lab)
        assert after["bgpState"] == "Established"
        for key in ("connectionsEstablished", "connectionsDropped"):
            assert after[key] == up[key], (key, after.get("lastResetDueTo"))
        assert after["bgpTimerUpMsec"] >= up["bgpTimerUpMsec"]
        assert owner.errors == 0
        # per-namespace instances never write the system's configuration
        assert (system_conf.read_bytes() if system_conf.exists() else None) == system_before
    finally:
        store.close()
