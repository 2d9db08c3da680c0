"""A gray failure fails closed, against the real kernel and real FRR (issue 25 point 1).

The gateway namespace of test_agent_routing's lab (its FRR applied by the agent's RoutingOwner,
peering with a router namespace) gets the real gateway program (build/xdp_gateway.o) pinned
and attached in native mode to its two ports (c0, the link to the router, and s0, a veth of
its own). The agent's watchdog runs in its thread inside the gateway's namespace. Then:

1. `ip link set dev c0 xdp off`: the agent fails closed within 1 s (status `failed-closed`,
   naming c0, nothing attached, the expected id), and the router's kernel loses the gateway's
   routes (its BGP neighbour is shut);
2. the program attached again: health ok, the router learns the routes again;
3. c0's program replaced by a drop-all (build/xdp_drop.o): the same, naming its id;
4. the program back again: ok.

Detection and withdrawal times are printed (pytest -s) as JSON. Names: `cz25a-<pid>-*`;
everything goes in `finally`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from frr_netns import sh
from pyroute2 import IPRoute
from test_agent_routing import ROUTER_CONF, VPC_A, Lab, _intent

from crosszone.abi.objects import BUILD_DIR
from crosszone.agent.agent import Agent, fastpath_guard
from crosszone.agent.fastpath_guard import PortForwarding
from crosszone.agent.frr_apply import FrrReloadApplier, FrrTarget
from crosszone.agent.frr_vty import run_commands
from crosszone.agent.routing_owner import RoutingOwner
from crosszone.compile.diff import DictSink
from crosszone.fastpath.libbpf import BpfObject, xdp_attach, xdp_query_prog_id
from crosszone.linux.netns import in_netns
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT, STATUS

ROUTES = {"10.0.0.100/32", "100.64.0.0/16"}  # the gateway's IPv4 announcements


@pytest.fixture
def lab() -> Iterator[Lab]:
    if os.geteuid() != 0 or not Path("/usr/lib/frr/bgpd").exists():
        pytest.skip("needs root and FRR (network namespaces, bgpd)")
    if not (BUILD_DIR / "xdp_gateway.o").exists() or not (BUILD_DIR / "xdp_drop.o").exists():
        pytest.skip("needs build/xdp_gateway.o and build/xdp_drop.o (make)")
    base = Path(tempfile.mkdtemp(prefix="cz25a-"))
    base.chmod(0o755)
    lab = Lab(base)
    tag = f"cz25a-{os.getpid() % 100000}"
    lab.gw_ns, lab.rt_ns = f"{tag}-gw", f"{tag}-rt"
    lab.gw.ns, lab.rt.ns = lab.gw_ns, lab.rt_ns
    lab.veth = f"cz25a{os.getpid() % 100000}"
    try:
        lab.up()
        sh("ip", "-n", lab.gw_ns, "link", "add", "s0", "type", "veth", "peer", "name", "s0p")
        for dev in ("s0", "s0p"):
            sh("ip", "-n", lab.gw_ns, "link", "set", dev, "up")
        yield lab
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)


def _router_routes(ipr: IPRoute) -> set[str]:
    out = set()
    for r in ipr.get_routes(family=socket.AF_INET):
        dst = r.get_attr("RTA_DST")
        if dst and f"{dst}/{r['dst_len']}" in ROUTES:
            out.add(f"{dst}/{r['dst_len']}")
    return out


def _until(what: str, cond, timeout: float, step: float = 0.001) -> float:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)
    return time.monotonic()


def test_a_detached_or_replaced_fast_path_fails_closed_and_recovers(lab: Lab,
                                                                     tmp_path: Path) -> None:
    pin = Path(f"/sys/fs/bpf/cz25a-{os.getpid()}")
    store = SqliteStore(str(tmp_path / "s.db"))
    obj = drop = None
    guard = None
    ipr = None
    try:
        FrrReloadApplier(FrrTarget(pathspace=lab.rt_ns, config_file=lab.rt.dir / "frr.conf",
                                   rundir=lab.base / "run")).apply(ROUTER_CONF)
        target = FrrTarget(vty_socket=lab.gw.dir, config_file=lab.gw.dir / "frr.conf",
                           rundir=lab.base / "run")
        sock = lab.gw.dir / "bgpd.vty"
        owner = RoutingOwner("gw-t", FrrReloadApplier(target), hostname=socket.gethostname(),
                             check_every=3600, fast=lambda cmds: run_commands(sock, cmds))
        agent = Agent("gw-t", store, DictSink(), lambda name: 5, routing=owner)
        store.put_many({INTENT + k: v for k, v in _intent(VPC_A).items()})
        agent.step(0)
        assert owner.mode == "managed", owner.message
        with in_netns(lab.rt_ns):
            ipr = IPRoute()
        _until("the router to learn the routes", lambda: _router_routes(ipr) == ROUTES, 60,
               0.05)

        # the real program, pinned as ensure_attached pins it, on both ports
        pin.mkdir()
        obj = BpfObject.open(BUILD_DIR / "xdp_gateway.o", pin_maps_dir=pin / "maps")
        prog = obj.program("cz_gateway")
        prog.pin(pin / "prog")
        drop = BpfObject.open(BUILD_DIR / "xdp_drop.o")
        drop_prog = drop.program("cz_drop")
        with in_netns(lab.gw_ns):
            ports = {n: socket.if_nametoindex(n) for n in ("c0", "s0")}
            for ifindex in ports.values():
                xdp_attach(ifindex, prog.fd)
        guard = fastpath_guard(agent, pin, lab.gw_ns)
        agent.port_forwarding = PortForwarding()  # as `crosszone agent` has it

        def forwarding() -> dict[str, str]:  # each port's, read inside the gateway's namespace
            return {n: sh("ip", "netns", "exec", lab.gw_ns, "cat",
                          f"/proc/sys/net/ipv4/conf/{n}/forwarding").stdout.strip()
                    for n in ("c0", "s0")}
        sh("ip", "netns", "exec", lab.gw_ns, "sysctl", "-qw", "net.ipv4.conf.c0.forwarding=1",
           "net.ipv4.conf.s0.forwarding=1")
        agent.watch_fastpath(guard)
        _until("the first check", lambda: agent.fastpath is not None, 5)
        assert agent.fastpath is not None and agent.fastpath.ok, agent.message
        assert agent.health == "ok"
        time.sleep(1)  # past a new session's first reset (docs/routing.md)
        _until("the routes", lambda: _router_routes(ipr) == ROUTES, 60, 0.05)

        figures = {}
        for fault in ("detached", "drop-all"):
            t0 = time.monotonic()
            if fault == "detached":
                sh("ip", "-n", lab.gw_ns, "link", "set", "dev", "c0", "xdp", "off")
                says = "c0 has nothing attached"
            else:
                with in_netns(lab.gw_ns):
                    xdp_attach(ports["c0"], drop_prog.fd)  # replaces ours
                says = f"c0 has program id {drop_prog.id}"
            detected = _until("failed-closed", lambda: agent.health == "failed-closed", 1.0)
            gone = _until("the router to drop the routes", lambda: not _router_routes(ipr), 10)
            figures[fault] = {"detect_ms": round((detected - t0) * 1000, 1),
                              "routes_gone_ms": round((gone - t0) * 1000, 1)}
            assert says in agent.message, agent.message
            assert f"expected program id {prog.id}" in agent.message
            st = json.loads(store.get(STATUS + "gw-t") or b"{}")
            assert st["health"] == "failed-closed", st
            assert st["fastpath"]["ok"] is False and st["fastpath"]["expected"] == prog.id
            assert st["fastpath"]["attached"]["s0"] == prog.id
            assert f" neighbor {'10.77.0.1'} shutdown" in lab.gw.vtysh(
                "show running-config bgpd")
            # the ports forward nothing through the kernel either (in the gateway's namespace,
            # written from the guard's thread there), and forward again once the program is back
            assert forwarding() == {"c0": "0", "s0": "0"}, forwarding()
            assert "kernel forwarding off on c0, s0" in agent.message
            # the program back: announced again
            t1 = time.monotonic()
            with in_netns(lab.gw_ns):
                xdp_attach(ports["c0"], prog.fd)
            _until("health ok", lambda: agent.health == "ok", 5)
            back = _until("the router to learn the routes again",
                          lambda: _router_routes(ipr) == ROUTES, 60, 0.01)
            figures[fault]["routes_back_ms"] = round((back - t1) * 1000, 1)
            st = json.loads(store.get(STATUS + "gw-t") or b"{}")
            assert st["health"] == "ok" and st["fastpath"]["ok"] is True, st
            assert forwarding() == {"c0": "1", "s0": "1"}, forwarding()
        assert agent.metrics.fail_closed._value.get() == 2
        assert agent.metrics.fail_closed_recoveries._value.get() == 2
        print(json.dumps({"fail_closed": figures, "period_ms": guard.period * 1000}))
    finally:
        if guard is not None:
            guard.stop()
        if ipr is not None:
            ipr.close()
        with in_netns(lab.gw_ns):
            for name in ("c0", "s0"):
                try:
                    ifindex = socket.if_nametoindex(name)
                    if xdp_query_prog_id(ifindex):
                        sh("ip", "-n", lab.gw_ns, "link", "set", "dev", name, "xdp", "off")
                except OSError:
                    pass
        for o in (obj, drop):
            if o is not None:
                o.close()
        shutil.rmtree(pin, ignore_errors=True)
        store.close()
