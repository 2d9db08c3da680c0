"""The failover bench's arithmetic and parsers: loss episodes over interleaved flows, the
netlink and FRR log timelines, the failure events' operations, the summary line."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from crosszone.linux.netns import Cmd
from crosszone_lab.bench import failover
from crosszone_lab.emulate import deploy, failures, frr, topology
from crosszone_lab.workload import udp_probe
from crosszone_lab.workload.udp_probe import Record, analyse

INTERVAL = 1_000  # ns between datagrams


def _rec(pairs: list[tuple[int, int]]) -> Record:
    r = Record.empty()
    for s, t in pairs:
        r.seq.append(s)
        r.ns.append(t)
    return r


def _sent(n: int) -> Record:
    return _rec([(i, i * INTERVAL) for i in range(n)])


def _received(n: int, lost: set[int]) -> Record:
    return _rec([(i, i * INTERVAL + 77) for i in range(n) if i not in lost])


def test_nothing_lost() -> None:
    a = analyse(_sent(500), _received(500, set()), INTERVAL, 8)
    assert (a.sent, a.received, a.lost, a.longest) == (500, 500, 0, None)


def test_an_outage_of_some_flows_is_one_episode_despite_the_others_arriving() -> None:
    # flows 1 and 3 of 4 are lost from 100 to 299: the surviving flows interleave
    lost = {i for i in range(100, 300) if i % 4 in (1, 3)}
    a = analyse(_sent(1000), _received(1000, lost), INTERVAL, 4)
    assert a.lost == len(lost) == 100
    assert a.longest is not None
    assert a.longest.first == 101
    assert a.longest.window_ms == pytest.approx((299 - 101 + 1) * INTERVAL / 1e6)
    # restored when flow 3's next datagram (303) and flow 1's (301) have both arrived
    assert a.longest.restored_ns == 303 * INTERVAL + 77


def test_separate_episodes_are_not_merged_and_the_longest_wins() -> None:
    lost = {10, 14, 18} | set(range(500, 560))  # flow 2 of 4 briefly, then everything
    a = analyse(_sent(1000), _received(1000, lost), INTERVAL, 4)
    assert a.lost == 63
    assert a.longest is not None and a.longest.first == 500
    assert a.longest.window_ms == pytest.approx(60 * INTERVAL / 1e6)


def test_loss_until_the_end_has_no_restore_time() -> None:
    a = analyse(_sent(100), _received(100, set(range(90, 100))), INTERVAL, 2)
    assert a.longest is not None and a.longest.restored_ns is None


def test_time_slice_counts_only_datagrams_sent_inside_it() -> None:
    lost = set(range(100, 110)) | set(range(700, 720))
    a = analyse(_sent(1000), _received(1000, lost), INTERVAL, 4,
                since_ns=50 * INTERVAL, until_ns=600 * INTERVAL)
    assert (a.sent, a.lost) == (550, 10)


def test_record_round_trips_through_a_file(tmp_path: Path) -> None:
    r = _rec([(5, 123), (7, 2**40)])
    r.save(tmp_path / "x.sent")
    back = Record.load(tmp_path / "x.sent")
    assert list(back.seq) == [5, 7] and list(back.ns) == [123, 2**40]


def test_peers_on_loopback_deliver_every_datagram_with_kernel_timestamps(tmp_path: Path) -> None:
    """Two real peers over 127.0.0.1: both streams arrive whole, timestamps after send times."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    a_out, b_out = tmp_path / "a", tmp_path / "b"
    # each peer sends to the other's address on the same port, as across the gateways
    t = threading.Thread(target=udp_probe.run_peer,
                         args=("127.0.0.1", port, "127.0.0.2", 2000.0, 8, 0.5, b_out, 0.3))
    t.start()
    time.sleep(0.05)
    udp_probe.run_peer("127.0.0.2", port, "127.0.0.1", 2000.0, 8, 0.3, a_out, 0.3)
    t.join()
    sent, got = Record.load(a_out.with_suffix(".sent")), Record.load(b_out.with_suffix(".recv"))
    assert len(sent.seq) > 300
    res = analyse(sent, got, 500_000, 8)
    assert res.lost == 0
    tx = dict(zip(sent.seq, sent.ns, strict=True))
    assert all(rx >= tx[s] for s, rx in zip(got.seq, got.ns, strict=True))


def _peer(bind: str, to: str, port: int, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "crosszone_lab.workload.udp_probe", "--bind", bind, "--to", to,
         "--port", str(port), "--rate", "2000", "--flows", "8", "--duration", "30",
         "--out", str(out), "--wait-go", *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_peers_started_apart_send_nothing_before_both_can_receive(tmp_path: Path) -> None:
    """The first peer is up a second before the second: held at `ready`, it loses nothing."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    first = _peer("127.0.0.1", "127.0.0.2", port, tmp_path / "a")
    time.sleep(1.0)
    second = _peer("127.0.0.2", "127.0.0.1", port, tmp_path / "b")
    probe = failover.Probe([first, second], {
        "ab": (tmp_path / "a.sent", tmp_path / "b.recv"),
        "ba": (tmp_path / "b.sent", tmp_path / "a.recv")}, 2000.0)
    probe.go()
    time.sleep(1.0)
    records = probe.stop()
    for sent, got in records.values():
        # 2,000 a second for a second; a loaded box's scheduler may hold the sender back (383
        # in 0.5 s once, beside an emulation): what matters is that none was lost
        assert len(sent.seq) > 200
        assert analyse(sent, got, 500_000, 8).lost == 0


def test_a_peer_that_never_gets_ready_is_an_error_and_nothing_is_left_running(
        tmp_path: Path) -> None:
    # bound to an address this box does not have: the peer dies before `ready`
    bad = _peer("192.0.2.1", "127.0.0.1", 9, tmp_path / "x")
    probe = failover.Probe([bad], {}, 2000.0)
    with pytest.raises(RuntimeError, match="did not start"):
        probe.go(timeout=20)
    assert bad.poll() is not None


def test_peer_cli_rejects_bad_arguments() -> None:
    with pytest.raises(SystemExit):
        udp_probe.main(["--bind", "127.0.0.1", "--to", "127.0.0.1", "--duration", "0",
                        "--out", "/nonexistent/x"])
    with pytest.raises(SystemExit):
        udp_probe.main(["--bind", "127.0.0.1", "--duration", "1", "--out", "/tmp/x"])


MONITOR = """\
[2026-12-02T08:24:42.100000] 10.0.0.100 proto bgp metric 20
\tnexthop via 10.10.4.2 dev g4 weight 1
[2026-12-02T08:24:42.200000] Deleted 100.64.0.0/16 proto bgp metric 20
[2026-12-02T08:24:42.300000] 172.16.0.0/24 via 10.20.1.1 dev s0 proto bgp metric 20
[2026-12-02T08:24:42.400000] fd64:a::/64 proto bgp metric 20 pref medium
garbage line
"""


def test_route_events_keep_only_the_watched_prefixes_with_their_times() -> None:
    ev = failover.route_events(MONITOR, ["10.0.0.100/32", "100.64.0.0/16", "fd64:a::/64"])
    assert [line.split()[0] for _t, line in ev] == ["10.0.0.100", "Deleted", "fd64:a::/64"]
    assert ev[1][0] - ev[0][0] == 100_000_000


LOG = """\
2026/12/02 08:24:42.049070 BGP: [HZN6M-XRM1G] %NOTIFICATION(Hard Reset): received from neighbor
2026/12/02 08:24:42.049079 BGP: [PXVXG-TFNNT] %ADJCHANGE: neighbor 10.10.3.2(czemux-xgw1) in vrf default Down BGP Notification received
2026/12/02 08:24:42.131889 BGP: [N9HHH-F8H1M] %ADJCHANGE: neighbor 10.10.1.2(czemux-lgw1) in vrf default Up
2026/12/02 08:24:42.167232 BGP: [PXVXG-TFNNT] %ADJCHANGE: neighbor 10.10.3.2(czemux-xgw1) in vrf default Down BFD down received
"""  # noqa: E501


def test_session_downs_parse_neighbour_reason_and_microseconds() -> None:
    downs = failover.session_downs(LOG)
    assert [(n, r) for _t, n, r in downs] == [("10.10.3.2", "BGP Notification received"),
                                              ("10.10.3.2", "BFD down received")]
    assert downs[1][0] - downs[0][0] == 118_153_000


VPC = {"name": "a", "vni": 1001, "prefix": "192.168.0.0/16", "storage_facing": "100.64.0.0/16",
       "prefix6": "fd00:a::/64", "storage_facing6": "fd64:a::/64"}


def _plan() -> topology.Plan:
    return topology.plan(topology.parse({"hosts": 2, "vpcs": [VPC],
                                         "gateways": {"legacy": 1, "crosszone": 1},
                                         "active": "legacy"}))


@pytest.mark.parametrize("name", failures.EVENTS)
def test_every_event_injects_and_repairs_on_its_gateway_only(name: str) -> None:
    p = _plan()
    for gw in p.gateways:
        ev = failures.event(p, gw, name, Path("/x/drop.o"))
        ops = ev.inject + ev.repair
        assert ev.inject and ev.repair
        text = " ".join(" ".join(op.argv) for op in ops if isinstance(op, Cmd))
        # a crosszone gateway's planned withdraw is the routers' (they refuse its routes)
        routers_side = name == "withdraw" and deploy.routing_by_agent(gw)
        assert (f"neighbor {gw.compute_addr} " in text) if routers_side else gw.ns in text
        assert all(other.ns not in text and f"neighbor {other.compute_addr} " not in text
                   for other in p.gateways if other is not gw)


def test_link_events_take_the_named_side_down_and_up() -> None:
    p = _plan()
    gw = p.gateways[0]
    ev = failures.event(p, gw, "storage_link_down", Path("/x"))
    assert [op.argv[-2:] for op in ev.inject if isinstance(op, Cmd)] == [("s0", "down")]
    assert [op.argv[-2:] for op in ev.repair if isinstance(op, Cmd)] == [("s0", "up")]


def test_silent_repair_reattaches_the_fast_path_on_crosszone_and_removes_xdp_on_legacy() -> None:
    p = _plan()
    by_kind = {gw.kind: failures.event(p, gw, "silent", Path("/x/drop.o")) for gw in p.gateways}
    assert any("--reattach" in op.argv for op in by_kind["crosszone"].repair if isinstance(op, Cmd))
    assert all("off" in op.argv for op in by_kind["legacy"].repair if isinstance(op, Cmd))


def test_restarted_bgpd_announces_again_only_when_the_gateway_carried_traffic() -> None:
    p = _plan()
    gw = p.gateways[0]
    on = failures.event(p, gw, "bgpd_killed", Path("/x"), announcing=True)
    off = failures.event(p, gw, "bgpd_killed", Path("/x"), announcing=False)
    assert len(on.repair) > len(off.repair) == 1


def test_a_crosszone_gateways_restarted_bgpd_reads_its_agents_configuration() -> None:
    """Its agent keeps the whole configuration in the file bgpd starts from: the repair is the
    restart alone, logging by command line as `up` started it."""
    p = _plan()
    gw = p.gateways_of("crosszone")[0]
    for daemon in ("bgpd", "bfdd"):
        ev = failures.event(p, gw, f"{daemon}_killed", Path("/x"), announcing=True)
        assert [op.argv for op in ev.repair if isinstance(op, Cmd)] == [
            frr.daemon_start_op(gw.ns, daemon, log_arg=True).argv]


def test_unknown_event_is_an_error_naming_the_choices() -> None:
    p = _plan()
    with pytest.raises(ValueError, match="compute_link_down"):
        failures.event(p, p.gateways[0], "meteor", Path("/x"))


def test_summary_line_has_exactly_the_documented_keys() -> None:
    trials = [failover.Trial("crosszone", "silent", "failure", lost=n, window_ms=w,
                             detect_ms=d, fib_ms=f)
              for n, w, d, f in [(10, 20.0, 30.0, 40.0), (30, 60.0, None, 50.0),
                                 (20, 40.0, 35.0, None)]]
    line = failover.summarise("crosszone", "silent", trials)
    assert list(line) == ["kind", "event", "trials", "lost_median", "loss_window_ms_median",
                          "loss_window_ms_worst", "detect_ms_median", "fib_ms_median"]
    assert line["lost_median"] == 20 and line["loss_window_ms_median"] == 40.0
    assert line["loss_window_ms_worst"] == 60.0
    assert line["detect_ms_median"] == 32.5 and line["fib_ms_median"] == 45.0


def test_facing_address_maps_the_endpoint_into_its_vpc_facing_prefix() -> None:
    spec = topology.parse({"hosts": 2, "vpcs": [VPC]})
    ep = topology.plan(spec).endpoints[1]
    assert failover.facing_address(ep, 4) == "100.64" + ep.addr.removeprefix("192.168")
    assert failover.facing_address(ep, 6).startswith("fd64:a::")
    assert failover.facing_address(ep, 6).split("::")[1] == ep.addr6.split("::")[1]


def test_peers_left_running_by_a_failing_block_are_killed() -> None:
    """Probe peers run outside the caller's process group (Ctrl-C must not kill them before
    their records are saved), so a block that raises before `stop` must end them itself."""
    procs = [subprocess.Popen(["sleep", "60"], text=True, start_new_session=True)
             for _ in range(2)]
    with pytest.raises(RuntimeError, match="a switch failed"), \
            failover.Probe(procs, {}, 1.0) as probe:
        assert all(p.poll() is None for p in probe.procs)
        raise RuntimeError("a switch failed")
    assert all(p.poll() is not None for p in procs)

