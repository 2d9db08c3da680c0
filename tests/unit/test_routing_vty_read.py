"""The agent reads its BGP and BFD sessions straight from bgpd's and bfdd's vty sockets
(routing.vty_asker), not through vtysh: a vtysh call took up to 2 s on a loaded box and the
migration's parity check then read "no BGP session" for its whole wait. Each daemon here is a
small server speaking vtysh's protocol on a Unix socket (a NUL-terminated command in; the
output, three NUL bytes and a status byte out)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from crosszone.agent.routing import RoutingCollector, vty_asker

BGP = {"ipv4Unicast": {"peers": {"10.2.1.1": {"state": "Established"},
                                 "10.3.1.1": {"state": "Connect"}}},
       "ipv6Unicast": {"peers": {"fd00:2::1": {"state": "Established"}}}}
BFD = [{"peer": "10.2.1.1", "status": "up"}, {"peer": "fd00:2::1", "status": "down"}]
LINKS = json.dumps([{"ifname": "c0", "xdp": {"mode": 1}}, {"ifname": "s0"}])

Answer = Callable[[str], tuple[int, str] | None]


@contextmanager
def daemon(path: Path, answer: Answer) -> Iterator[list[str]]:
    """A vty socket at `path` whose daemon answers each command with answer(cmd) ->
    (status, text), or never (None). Yields the commands it received."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)
    srv.settimeout(0.1)
    seen: list[str] = []
    halt = threading.Event()

    def serve(conn: socket.socket) -> None:
        buf = b""
        with conn:
            while not halt.is_set():
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while b"\0" in buf:
                    raw, buf = buf.split(b"\0", 1)
                    cmd = raw.decode()
                    seen.append(cmd)
                    got = (0, "") if cmd == "enable" else answer(cmd)
                    if got is None:
                        halt.wait(30)
                        return
                    conn.sendall(got[1].encode() + b"\0\0\0" + bytes([got[0]]))

    def accept() -> None:
        while not halt.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield seen
    finally:
        halt.set()
        t.join()
        srv.close()


def _frr(tmp_path: Path, bgp: Answer, bfd: Answer):
    return daemon(tmp_path / "bgpd.vty", bgp), daemon(tmp_path / "bfdd.vty", bfd)


def _links(argv) -> str | None:
    assert list(argv)[:3] == ["ip", "-n", "czemu-gw"], argv  # only `ip` is still a process
    return LINKS


def test_sessions_are_read_from_the_daemons_sockets(tmp_path: Path) -> None:
    bgp_d, bfd_d = _frr(tmp_path, lambda c: (0, json.dumps(BGP)), lambda c: (0, json.dumps(BFD)))
    with bgp_d as to_bgpd, bfd_d as to_bfdd:
        reg = CollectorRegistry()
        reg.register(RoutingCollector("czemu-gw", ask=vty_asker(tmp_path), run=_links))
        text = generate_latest(reg).decode()
    assert to_bgpd == ["enable", "show bgp summary json"]
    assert to_bfdd == ["enable", "show bfd peers json"]
    assert 'crosszone_bgp_session_up{peer="10.2.1.1",state="Established"} 1.0' in text
    assert 'crosszone_bgp_session_up{peer="10.3.1.1",state="Connect"} 0.0' in text
    assert 'crosszone_bgp_session_up{peer="fd00:2::1",state="Established"} 1.0' in text
    assert 'crosszone_bfd_session_up{peer="10.2.1.1"} 1.0' in text
    assert 'crosszone_bfd_session_up{peer="fd00:2::1"} 0.0' in text
    assert 'crosszone_fastpath_attached{device="c0"} 1.0' in text


def test_a_daemon_that_cannot_be_asked_yields_no_family_not_a_made_up_one(tmp_path: Path) -> None:
    """bgpd refuses the command, bfdd has no socket at all: neither family is exported, the
    links still are."""
    with daemon(tmp_path / "bgpd.vty", lambda c: (1, "% Unknown command")):
        reg = CollectorRegistry()
        reg.register(RoutingCollector("czemu-gw", ask=vty_asker(tmp_path), run=_links))
        text = generate_latest(reg).decode()
    assert "crosszone_bgp_session_up" not in text
    assert "crosszone_bfd_session_up" not in text
    assert 'crosszone_fastpath_attached{device="s0"} 0.0' in text


def test_a_daemon_that_never_answers_costs_the_timeout_not_the_reader(tmp_path: Path) -> None:
    ask = vty_asker(tmp_path, timeout=0.3)
    with daemon(tmp_path / "bgpd.vty", lambda c: None):
        t0 = time.monotonic()
        assert ask("bgpd", "show bgp summary json") is None
        assert time.monotonic() - t0 < 2.0


def test_repeated_reads_each_get_the_whole_answer(tmp_path: Path) -> None:
    """Many reads in a row each open a connection and get the whole answer back, even one
    larger than a socket buffer (a router with many peers)."""
    big = {"ipv4Unicast": {"peers": {f"10.{i // 250}.{i % 250}.1": {"state": "Established"}
                                     for i in range(3000)}}}
    with daemon(tmp_path / "bgpd.vty", lambda c: (0, json.dumps(big))) as seen:
        ask = vty_asker(tmp_path)
        answers = [ask("bgpd", "show bgp summary json") for _ in range(20)]
    assert seen.count("enable") == 20
    assert all(a is not None and len(json.loads(a)["ipv4Unicast"]["peers"]) == 3000
               for a in answers)
