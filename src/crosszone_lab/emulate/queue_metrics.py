"""Prometheus counters of the emulator's shaped queues, per port and traffic class.

The queues (queues.py) are where the traffic classes compete at the emulation's bottleneck, so
their counters say which class pays: what each class sent, what its FIFO dropped, what it holds
now. Exported per shaped port and class, labels {group, port, class} (group: the link set that
shapes the port, hosts | storage | gateways; port: namespace/device; class: small | default |
bulk):

    crosszone_queue_bytes_total, crosszone_queue_packets_total, crosszone_queue_drops_total
    crosszone_queue_backlog_bytes   (gauge: what the class's FIFO holds at the reading)

The product reads these names without knowing where they come from (a switch's telemetry may
export the same), so the exporter lives in the lab and the product never imports it.

Why a thread: each reading is one `tc -s class show` process per port, which takes a while on a
loaded box, and a scrape must answer at once. As the agent's RoutingCollector does, a thread
reads every `every` seconds, a scrape serves the last reading, and none once it is older than
`max_age`. A port whose `tc` fails has no samples in that reading: nothing is made up.

`crosszone emulate up` starts the exporter (`crosszone emulate queue-metrics`) when the topology
has `queues:`, on 127.0.0.1 at the instance's block of ports, with its pidfile and log under the
run dir; the emulator's Prometheus scrapes it; `emulate down` stops it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from crosszone.agent.periodic import PeriodicReader
from crosszone.agent.routing import run_command
from crosszone.linux import pids
from crosszone_lab.emulate import control_plane, queues
from crosszone_lab.emulate.kinds import DeployError
from crosszone_lab.emulate.topology import RUN_DIR, Plan

#: after the agents (port_base() + k, k <= 16), before Prometheus (prometheus.PORT_OFFSET)
PORT_OFFSET = 18
READ_EVERY_S = 2.0
#: (group, port, class) -> {"bytes", "packets", "drops"[, "backlog_bytes"]}
Reading = dict[tuple[str, str, str], dict[str, int]]
Run = Callable[[Sequence[str]], str | None]


@dataclass(frozen=True)
class Port:
    """A shaped port: the link set that shapes it, its namespace and device."""

    group: str
    ns: str
    dev: str

    @property
    def name(self) -> str:
        """The `port` label: namespace/device."""
        return f"{self.ns}/{self.dev}"


def shaped_ports(p: Plan) -> list[Port]:
    """Every port the plan's `queues:` shapes (none without it)."""
    return [Port(group, ns, dev) for group, ns, dev in queues.port_groups(p)]


def tc_argv(port: Port) -> list[str]:
    """The command that prints the port's classes with their counters."""
    return ["tc", "-n", port.ns, "-s", "class", "show", "dev", port.dev]


def read(ports: Sequence[Port], names: dict[str, str], run: Run) -> Reading:
    """One reading of every port's named classes (handle -> class name, queues.class_names);
    a port whose tc fails, or a class tc does not list, is left out."""
    out: Reading = {}
    for port in ports:
        stats = queues.class_stats(run(tc_argv(port)) or "")
        for handle, cls in names.items():
            if handle in stats:
                out[(port.group, port.name, cls)] = stats[handle]
    return out


class QueueCollector(PeriodicReader[Reading], Collector):
    """Serves the last reading of the ports' classes (see the module's docstring)."""

    def __init__(self, ports: Sequence[Port], names: dict[str, str], run: Run = run_command,
                 every: float = READ_EVERY_S, now: Callable[[], float] = time.monotonic,
                 max_age: float | None = None) -> None:
        super().__init__(every, 3 * every if max_age is None else max_age, "queue-reader", now)
        self.ports, self.names, self.run = list(ports), dict(names), run

    def take(self) -> Reading:
        return read(self.ports, self.names, self.run)

    def reading(self) -> Reading:
        """The last reading, or {} when there is none or it is older than `max_age`."""
        return self.last() or {}

    def collect(self) -> Iterator[Metric]:
        """Yield the families that have samples."""
        labels = ["group", "port", "class"]
        counters = {key: CounterMetricFamily(f"crosszone_queue_{key}", what, labels=labels)
                    for key, what in (("bytes", "Bytes a queue class sent"),
                                      ("packets", "Packets a queue class sent"),
                                      ("drops", "Packets a queue class's FIFO dropped"))}
        backlog = GaugeMetricFamily("crosszone_queue_backlog_bytes",
                                    "Bytes a queue class's FIFO holds", labels=labels)
        for key, c in sorted(self.reading().items()):
            for name, family in counters.items():
                family.add_metric(list(key), c[name])
            if "backlog_bytes" in c:
                backlog.add_metric(list(key), c["backlog_bytes"])
        yield from (f for f in (*counters.values(), backlog) if f.samples)


# ---- the exporter process -------------------------------------------------------------------

def port() -> int:
    """The exporter's port in the instance's block of loopback ports (control_plane.port_base)."""
    return control_plane.port_base() + PORT_OFFSET


def target() -> str:
    """host:port Prometheus scrapes."""
    return f"127.0.0.1:{port()}"


def directory(run_dir: Path = RUN_DIR) -> Path:
    """The exporter's pidfile and log."""
    return run_dir / "queue-metrics"


def pidfile(run_dir: Path = RUN_DIR) -> Path:
    """The running exporter's pid."""
    return directory(run_dir) / "exporter.pid"


def pidfiles(p: Plan, run_dir: Path = RUN_DIR) -> list[Path]:
    """The exporter's pidfile when the deployment runs one (it does with queues)."""
    return [pidfile(run_dir)] if p.spec.queues is not None else []


def describe(p: Plan, run_dir: Path = RUN_DIR) -> dict[str, object]:
    """`emulate status --json`'s "queue_metrics" entry (empty without queues)."""
    if p.spec.queues is None:
        return {}
    return {"queue_metrics": {"url": f"http://{target()}/metrics",
                              "running": running(run_dir) is not None}}


def command(listen_port: int) -> list[str]:
    """The exporter's command line (it reads the deployment from the emulator's state)."""
    return [control_plane.crosszone_bin(), "emulate", "queue-metrics",
            "--listen", f"127.0.0.1:{listen_port}"]


class Process(Protocol):
    """What `start` needs of a started process (subprocess.Popen has it)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...


def _spawn(argv: list[str], log: IO[bytes]) -> Process:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start(run_dir: Path = RUN_DIR, listen_port: int | None = None, timeout: float = 15.0,
          spawn: Callable[[list[str], IO[bytes]], Process] = _spawn,
          ready: Callable[[str], bool] = _answers, sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> str:
    """Start the exporter (replacing one of ours already running), write its pidfile, wait
    until it answers; returns its metrics URL (DeployError when it exits or never answers)."""
    stop(run_dir, sleep=sleep)
    d = directory(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    lport = listen_port or port()
    log = d / "exporter.log"
    with open(log, "ab") as logf:
        proc = spawn(command(lport), logf)
    pidfile(run_dir).write_text(f"{proc.pid}\n")
    url = f"http://127.0.0.1:{lport}/metrics"
    deadline = clock() + timeout
    while clock() < deadline:
        if proc.poll() is not None:
            pidfile(run_dir).unlink(missing_ok=True)
            raise DeployError(f"the queue exporter exited ({proc.returncode}); see {log}")
        if ready(url):
            return url
        sleep(0.2)
    stop(run_dir, sleep=sleep)
    raise DeployError(f"the queue exporter did not answer {url} within {timeout:.0f} s; "
                      f"see {log}")


def ours(pid: int) -> bool:
    """Whether `pid` runs and is a queue exporter (a pid reused by another process is not)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return pids.pid_alive(pid) and b"queue-metrics" in argv


def running(run_dir: Path = RUN_DIR, is_ours: Callable[[int], bool] = ours) -> int | None:
    """The running exporter's pid, or None."""
    p = pids.read_pid(pidfile(run_dir))
    return p if p is not None and p > 0 and is_ours(p) else None


def stop(run_dir: Path = RUN_DIR, sleep: Callable[[float], None] = time.sleep,
         kill: Callable[[int, int], None] = os.kill,
         is_ours: Callable[[int], bool] = ours) -> None:
    """Stop the exporter (TERM, then KILL after 5 s) and remove its pidfile; its log stays
    (with the run dir, which `emulate down` removes)."""
    p = running(run_dir, is_ours)
    if p is not None:
        with contextlib.suppress(ProcessLookupError):
            kill(p, signal.SIGTERM)
        for _ in range(50):
            if not is_ours(p):
                break
            sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                kill(p, signal.SIGKILL)
    pidfile(run_dir).unlink(missing_ok=True)


def serve(ports: Sequence[Port], names: dict[str, str], listen_port: int,
          halt: threading.Event) -> None:
    """Serve the ports' counters on 127.0.0.1:`listen_port` until `halt` is set."""
    registry = CollectorRegistry()
    collector = QueueCollector(ports, names)
    registry.register(collector)
    collector.start()
    server, _thread = start_http_server(listen_port, addr="127.0.0.1", registry=registry)
    try:
        halt.wait()
    finally:
        server.shutdown()
        collector.stop()
