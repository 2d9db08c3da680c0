"""What an operator asks of a gateway beside its maps: are its BGP and BFD sessions up, and is
the fast path attached to its interfaces. Read at scrape time, exported as Prometheus gauges:

    crosszone_bgp_session_up{peer,state}   1 when Established, else 0 (state: FRR's word)
    crosszone_bfd_session_up{peer}         1 when the BFD session is up
    crosszone_fastpath_attached{device}    1 when an XDP program is attached to the device

BGP and BFD come from FRR's `show bgp summary json` and `show bfd peers json`, asked straight
through bgpd's and bfdd's vty sockets (`vty_asker`, frr_vty.py); the attachment from
`ip -j link show` in the gateway's namespace. A command that
fails or answers nonsense yields no samples for its family, never a stale or made-up one.

Why the sockets and not vtysh: vtysh starts a process, reads vtysh.conf and connects to every
daemon before it sends the command. Measured on the 2-core test box during `bench migrate`
(load average 12 to 18): 0.27 to 2.0 s per vtysh call, against 1 to 38 ms for the same command
on the socket. With a 2 s limit, a CI box at load 27 to 31 read no session for the whole 15 s
that the migration's parity check waits ("its agent reports no BGP session") while the
routers' sessions with the gateways were Established.

The agent reads them in a thread of their own (`RoutingCollector.start`), never in a scrape:
three commands, each waiting for a process to start and for bgpd or bfdd to answer, took
seconds on a loaded box (py-spy on an agent whose /metrics missed a 3 s deadline during
`bench migrate`: every sample in `subprocess.run` under `RoutingCollector.collect`), and the
metrics endpoint must answer at once: it is how the migration guard and Prometheus know the
agent lives. A scrape serves the last reading while it is younger than `max_age`, and exports
its age (`crosszone_routing_read_age_seconds`).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from crosszone.agent.frr_vty import VtyError, run_commands
from crosszone.agent.periodic import PeriodicReader

Run = Callable[[Sequence[str]], str | None]
#: (daemon, command) -> the daemon's answer, or None when it could not be asked
Ask = Callable[[str, str], str | None]


def run_command(argv: Sequence[str], timeout: float = 10.0) -> str | None:
    """Standard output of a command, or None when it cannot run or fails. The limit only
    bounds a wedged command: the reads run in their own thread (a process start alone took
    seconds on a loaded box), and `max_age` says when a reading is too old to serve."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def vty_asker(sockets: Path, timeout: float = 5.0) -> Ask:
    """Ask FRR's daemons through their vty sockets in `sockets` (DAEMON.vty)."""
    def ask(daemon: str, command: str) -> str | None:
        try:
            return run_commands(sockets / f"{daemon}.vty", [command], timeout=timeout)[0]
        except VtyError:
            return None
    return ask


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def bgp_sessions(summary_json: str | None) -> dict[str, str] | None:
    """peer -> BGP state from `show bgp summary json` (IPv4 and IPv6 unicast), or None."""
    data = _json(summary_json)
    if not isinstance(data, dict):
        return None
    out: dict[str, str] = {}
    for family in ("ipv4Unicast", "ipv6Unicast"):
        peers = data.get(family, {})
        peers = peers.get("peers", {}) if isinstance(peers, dict) else {}
        for addr, info in (peers.items() if isinstance(peers, dict) else []):
            if isinstance(info, dict):
                out[str(addr)] = str(info.get("state", "unknown"))
    return out


def bfd_sessions(peers_json: str | None) -> dict[str, str] | None:
    """peer -> BFD status (up, down, init) from `show bfd peers json`, or None."""
    data = _json(peers_json)
    if not isinstance(data, list):
        return None
    return {str(p["peer"]): str(p.get("status", "unknown"))
            for p in data if isinstance(p, dict) and "peer" in p}


def xdp_devices(links_json: str | None) -> dict[str, bool] | None:
    """device -> whether an XDP program is attached, from `ip -j link show` (lo left out)."""
    data = _json(links_json)
    if not isinstance(data, list):
        return None
    return {str(link["ifname"]): bool(link.get("xdp"))
            for link in data if isinstance(link, dict) and link.get("ifname") not in (None, "lo")}


Snapshot = dict[str, dict[str, Any] | None]


class RoutingCollector(PeriodicReader[Snapshot], Collector):
    """Reads FRR and the links at most once per `every` seconds. netns: the gateway's namespace
    (None: this one); ask: how to reach the gateway's FRR daemons (`vty_asker`; None: no FRR to
    ask, so no BGP or BFD family); run: how to run the `ip` command.

    Started (`start`), a thread reads every `every` seconds and a scrape only serves the last
    reading, none once it is older than `max_age` (periodic.py). Not started (tests, one-shot
    use), a scrape reads when the last reading is `every` seconds old.

    Why `every`: the `ip` call is a process start (and each FRR answer a JSON document), and
    Prometheus scrapes every second; reading at most every 3 s keeps an agent's share of a core
    low while a session going down still shows within a few seconds."""

    def __init__(self, netns: str | None, ask: Ask | None = None,
                 run: Run = run_command, every: float = 3.0,
                 now: Callable[[], float] = time.monotonic,
                 max_age: float | None = None) -> None:
        super().__init__(every, 4 * every if max_age is None else max_age, "routing-reader", now)
        self.ask, self.netns, self.run = ask, netns, run

    def snapshot(self) -> Snapshot:
        """{"bgp": peer -> state, "bfd": peer -> status, "xdp": device -> attached}."""
        if not self.started:
            age = self.age()
            if age is None or age >= self.every:
                self.refresh()
        last = self.last()
        return last if last is not None else {"bgp": None, "bfd": None, "xdp": None}

    def take(self) -> Snapshot:
        bgp = bfd = None
        if self.ask is not None:
            bgp = bgp_sessions(self.ask("bgpd", "show bgp summary json"))
            bfd = bfd_sessions(self.ask("bfdd", "show bfd peers json"))
        ip = ["ip", "-n", self.netns] if self.netns else ["ip"]
        return {"bgp": bgp, "bfd": bfd, "xdp": xdp_devices(self.run([*ip, "-j", "link", "show"]))}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the gauges of the families that could be read."""
        snap = self.snapshot()
        if snap["bgp"] is not None:
            g = GaugeMetricFamily("crosszone_bgp_session_up", "1 if the BGP session is "
                                  "Established", labels=["peer", "state"])
            for peer, state in sorted(snap["bgp"].items()):
                g.add_metric([peer, state], 1.0 if state == "Established" else 0.0)
            yield g
        if snap["bfd"] is not None:
            g = GaugeMetricFamily("crosszone_bfd_session_up", "1 if the BFD session is up",
                                  labels=["peer"])
            for peer, status in sorted(snap["bfd"].items()):
                g.add_metric([peer], 1.0 if status == "up" else 0.0)
            yield g
        if snap["xdp"] is not None:
            g = GaugeMetricFamily("crosszone_fastpath_attached", "1 if an XDP program is "
                                  "attached to the device", labels=["device"])
            for dev, on in sorted(snap["xdp"].items()):
                g.add_metric([dev], 1.0 if on else 0.0)
            yield g
        age = self.age()
        if age is not None and any(v is not None for v in snap.values()):
            g = GaugeMetricFamily("crosszone_routing_read_age_seconds", "Seconds since BGP, "
                                  "BFD and the XDP attachment were last read")
            g.add_metric([], round(age, 3))
            yield g
