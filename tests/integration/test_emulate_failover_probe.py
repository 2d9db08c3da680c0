"""Failover measured to the packet (the `bench failover` machinery, one trial per event).

A sequence-numbered UDP probe (both directions, IPv4 and IPv6, 64 flows each) crosses the
gateways while one gateway of the active kind fails and is repaired. Loose bounds only (the
bench carries the figures): a failure costs a bounded loss window and the traffic comes back;
a planned withdraw and the gateway's return lose nothing; a killed routing daemon on a crosszone
gateway loses nothing (its fast path keeps forwarding while the routers move traffic away); no
BGP session goes down during planned switches under the probe unless bfdd's CPU was frozen for
longer than the BFD detection time (measured in the same run)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from emulate_helpers import busy_cpus, require

from crosszone.abi.objects import object_path
from crosszone_lab.bench import failover
from crosszone_lab.emulate import deploy
from crosszone_lab.emulate.vty import Vty

pytestmark = pytest.mark.integration

# Loss window bound for unplanned failures on a busy CI box: the routers' fast reroute moves
# traffic in about 25 ms (bench failover); without it BFD (100 ms x 5) and FRR would take
# 550 ms or more, which this bound catches. The target (50 ms median) is the bench's business.
MAX_WINDOW_MS = 300.0
# The legacy baseline's returns can lose up to a second (announced before it has its own
# routes, docs/emulate.md).
MAX_LEGACY_WINDOW_MS = 2500.0


@pytest.fixture(scope="module")
def bench(deployment: deploy.Deployment) -> Iterator[failover.Bench]:
    drop = object_path("xdp_drop")
    assert Path(drop).exists(), f"{drop} missing: run `make build`"
    yield failover.Bench(deployment, Path(drop), rate=3000.0, hold_s=1.0, settle_s=0.5)
    deployment.switch("legacy")


def _trial(b: failover.Bench, kind: str, event: str) -> tuple[failover.Trial, failover.Trial]:
    require(b.dep, kind)
    b.dep.switch(kind, log=lambda _m: None)
    fail, rec = b.trial(kind, event)
    print(f"{kind} {event}: failure lost {fail.lost} window {fail.window_ms:.1f} ms "
          f"detect {fail.detect_ms} fib {fail.fib_ms}; recovery lost {rec.lost}; "
          f"timeline {fail.timeline}")
    return fail, rec


@pytest.mark.parametrize("event", ["silent", "compute_link_down", "storage_link_down"])
def test_crosszone_failure_and_return_have_bounded_windows(
        bench: failover.Bench, event: str) -> None:
    """Loose bounds only (the bench carries the figures): on a loaded CI box a return has lost
    a few datagrams in some runs (`bench failover` measured 0 of 15), and the FRR-log timeline
    can miss a step, so neither is asserted exactly here."""
    fail, rec = _trial(bench, "crosszone", event)
    assert fail.window_ms < MAX_WINDOW_MS
    assert rec.window_ms < MAX_WINDOW_MS


@pytest.mark.parametrize("kind", ["crosszone", "legacy"])
def test_planned_withdraw_and_return_lose_nothing(bench: failover.Bench, kind: str) -> None:
    # Before the daemon kills: once, a withdraw trial run right after a bfdd restart lost 110 ms
    # of IPv6 toward compute starting 1 ms after the command, before any route moved (see
    # docs/emulate.md); the bench's withdraw trials, after link failures, lost nothing.
    fail, rec = _trial(bench, kind, "withdraw")
    print(f"{kind} planned withdraw: lost {fail.lost} (window {fail.window_ms} ms), "
          f"return lost {rec.lost}")
    assert fail.fib_ms is not None
    if kind == "crosszone":
        # Planned: no failover-sized gap. One clean-clone CI run lost 2 datagrams in 0.3 ms on
        # the withdraw (open: docs/emulate.md); most runs lose none.
        assert fail.window_ms < 50 and rec.window_ms < 50
    else:
        # The legacy baseline as configured loses part of a planned withdraw in some trials (up
        # to ~110 ms of one direction, cause not found, docs/emulate.md); bounded, not zero.
        assert fail.window_ms < MAX_LEGACY_WINDOW_MS


@pytest.mark.parametrize("event", ["bgpd_killed", "bfdd_killed"])
def test_crosszone_routing_daemon_killed_fails_over_within_bounds(bench: failover.Bench,
                                                                  event: str) -> None:
    """The fast path needs neither daemon: the routers see the sessions go and move traffic to
    the other gateway, which usually costs nothing, at most a bounded window (one run lost
    65 datagrams in 15 ms when bgpd was killed); the return loses nothing."""
    fail, rec = _trial(bench, "crosszone", event)
    print(f"crosszone {event}: lost {fail.lost} (window {fail.window_ms} ms)")
    assert fail.window_ms < MAX_WINDOW_MS
    assert rec.window_ms < MAX_WINDOW_MS


def test_no_session_goes_down_over_planned_switches(bench: failover.Bench) -> None:
    lines: list[str] = []
    with busy_cpus():  # on a loaded box, not an idle one
        res = failover.run_switches(bench, 6, ("crosszone", "legacy"), emit=lines.append,
                                    cli=[str(Path(sys.executable).parent / "crosszone")])
    print(res)
    # A session may go down only next to a CPU stall of bfdd's CPU longer than the detection
    # time (measured by the real-time sentinel in the same run: the VM or one long system call
    # froze that CPU, and no user-space BFD survives that); any other flap is the emulation's.
    assert res["sessions_down_unexplained"] == 0, res
    if res["sessions_down"] == 0:
        # One clean-clone CI run lost 2 datagrams over 6 switches (open); a flap costs thousands.
        assert res["lost"] <= 100, res


def _ip_route(ns: str, *argv: str) -> str:
    return subprocess.run(["ip", "-n", ns, "route", "show", *argv], check=True,
                          capture_output=True, text=True).stdout


def _zebra_static(ns: str) -> str:
    v = Vty(ns, "zebra")
    try:
        return v.command("show ip route static")
    finally:
        v.close()


def test_careful_legacy_floating_routes_come_and_go_and_bgp_routes_stay(
        bench: failover.Bench) -> None:
    """The careful operator's legacy gateway (`bench failover --kinds legacy-careful`): the
    floating static routes reach every legacy gateway's kernel only while BGP has no better
    route (none while it has), a link failure and return stay bounded, and removing them leaves
    BGP's routes in place (a first try with kernel routes left the gateways without any)."""
    require(bench.dep, "legacy")
    p = bench.dep.plan
    gws = p.gateways_of("legacy")
    subnet = str(p.spec.storage.subnet)
    with failover.configured(bench.dep, failover.LEGACY_CAREFUL) as kind:
        assert kind == "legacy"
        for gw in gws:
            # staticd hands the routes to zebra after vtysh returns: wait a little for them
            deadline = time.monotonic() + 10
            while (subnet not in (rib := _zebra_static(gw.ns))
                   and time.monotonic() < deadline):
                time.sleep(0.2)
            assert subnet in rib and "[250/0]" in rib, rib  # in zebra, at distance 250
            assert "proto bgp" in _ip_route(gw.ns, subnet)  # BGP's route wins while it is there
        fail, rec = _trial(bench, "legacy", "compute_link_down")
        assert fail.window_ms < MAX_LEGACY_WINDOW_MS and rec.window_ms < MAX_LEGACY_WINDOW_MS
    for gw in gws:
        out = _ip_route(gw.ns, subnet)
        assert "proto bgp" in out, f"{gw.name} lost BGP's route to {subnet}: {out!r}"
        deadline = time.monotonic() + 10
        while subnet in _zebra_static(gw.ns) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert subnet not in _zebra_static(gw.ns)
