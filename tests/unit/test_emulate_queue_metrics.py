"""The emulator's queue exporter without root: what it exports from a fake `tc`, that a failed or
stale reading exports nothing, how the emulator starts and stops it (fake processes), how its
command finds the deployment, and how Prometheus and `emulate down` know it."""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from crosszone_lab.emulate import commands, deploy, prometheus, queue_metrics, queues, topology
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.kinds import DeployError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "two-zone-policy.yaml"
NAMES = queues.class_names(46, 10)  # small 1:12e, default 1:200, bulk 1:10a
PORTS = [queue_metrics.Port("hosts", "czemu-cr", "h1"),
         queue_metrics.Port("storage", "czemu-sr", "st1")]
TC_H1 = """class htb 1:1 root rate 40Mbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 5000 bytes 5 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
class htb 1:12e parent 1:1 leaf 8013: prio 0 rate 35600Kbit ceil 40Mbit burst 1593b cburst 1600b
 Sent 1000 bytes 4 pkt (dropped 1, overlimits 0 requeues 0)
 backlog 1514b 1p requeues 0
class htb 1:200 parent 1:1 leaf 8014: prio 1 rate 4Mbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
class htb 1:10a parent 1:1 leaf 8015: prio 2 rate 400Kbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 4000 bytes 1 pkt (dropped 7, overlimits 0 requeues 0)
 backlog 12Kb 8p requeues 0
"""


def _run(answers: dict[str, str | None]) -> Any:
    """A fake `run_command`: the answer for the argv's device (None: tc failed); records argv."""
    def run(argv: Sequence[str]) -> str | None:
        run.asked.append(list(argv))  # type: ignore[attr-defined]
        return answers.get(argv[-1])
    run.asked = []  # type: ignore[attr-defined]
    return run


def _scrape(collector: queue_metrics.QueueCollector) -> str:
    reg = CollectorRegistry()
    reg.register(collector)
    return generate_latest(reg).decode()


# ---- the collector --------------------------------------------------------------------------

def test_the_collector_exports_every_class_of_every_port() -> None:
    run = _run({"h1": TC_H1, "st1": TC_H1})
    c = queue_metrics.QueueCollector(PORTS, NAMES, run=run)
    c.refresh()
    text = _scrape(c)
    h1 = 'group="hosts",port="czemu-cr/h1"'
    assert f'crosszone_queue_bytes_total{{class="small",{h1}}} 1000.0' in text
    assert f'crosszone_queue_packets_total{{class="small",{h1}}} 4.0' in text
    assert f'crosszone_queue_drops_total{{class="bulk",{h1}}} 7.0' in text
    assert f'crosszone_queue_backlog_bytes{{class="bulk",{h1}}} 12288.0' in text
    assert f'crosszone_queue_bytes_total{{class="default",{h1}}} 0.0' in text
    assert 'crosszone_queue_drops_total{class="bulk",group="storage",port="czemu-sr/st1"} 7.0' \
        in text
    assert "# TYPE crosszone_queue_bytes_total counter" in text
    assert "# TYPE crosszone_queue_backlog_bytes gauge" in text
    assert text.count("crosszone_queue_bytes_total{") == 6  # 2 ports x 3 classes, no root
    assert run.asked[0] == ["tc", "-n", "czemu-cr", "-s", "class", "show", "dev", "h1"]


def test_a_failed_tc_exports_nothing_for_its_port() -> None:
    c = queue_metrics.QueueCollector(PORTS, NAMES, run=_run({"h1": TC_H1, "st1": None}))
    c.refresh()
    text = _scrape(c)
    assert "czemu-cr/h1" in text and "czemu-sr/st1" not in text
    nothing = queue_metrics.QueueCollector(PORTS, NAMES, run=_run({}))
    nothing.refresh()
    assert "crosszone_queue" not in _scrape(nothing)  # no made-up zeros, not even a family
    garbage = queue_metrics.QueueCollector(PORTS, NAMES,
                                           run=_run({"h1": "Error: no such device", "st1": ""}))
    garbage.refresh()
    assert "crosszone_queue" not in _scrape(garbage)


def test_a_class_without_a_backlog_line_has_no_backlog_sample() -> None:
    text = TC_H1.replace(" backlog 12Kb 8p requeues 0\n", "")
    c = queue_metrics.QueueCollector(PORTS[:1], NAMES, run=_run({"h1": text}))
    c.refresh()
    out = _scrape(c)
    assert 'crosszone_queue_drops_total{class="bulk"' in out
    assert 'crosszone_queue_backlog_bytes{class="bulk"' not in out
    assert 'crosszone_queue_backlog_bytes{class="small"' in out


def test_no_reading_yet_or_a_stale_one_exports_nothing() -> None:
    clock = [100.0]
    c = queue_metrics.QueueCollector(PORTS, NAMES, run=_run({"h1": TC_H1, "st1": TC_H1}),
                                     every=2.0, now=lambda: clock[0])
    assert c.max_age == 6.0
    assert "crosszone_queue" not in _scrape(c)  # a scrape never reads itself
    c.refresh()
    clock[0] = 106.0
    assert "crosszone_queue_bytes_total" in _scrape(c)
    clock[0] = 106.1
    assert "crosszone_queue" not in _scrape(c), "a reading older than max_age was served"


def test_the_reading_thread_reads_and_stops() -> None:
    run = _run({"h1": TC_H1})
    c = queue_metrics.QueueCollector(PORTS[:1], NAMES, run=run, every=0.02)
    c.start()
    try:
        deadline = time.monotonic() + 5
        while len(run.asked) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(run.asked) >= 3, "the thread did not read again"
        assert "crosszone_queue_bytes_total" in _scrape(c)
    finally:
        c.stop()
    assert c._thread is not None and not c._thread.is_alive()


# ---- start, stop, pidfile -------------------------------------------------------------------

class FakeProc:
    def __init__(self, pid: int, exits_with: int | None = None) -> None:
        self.pid, self.returncode, self._exit = pid, None, exits_with

    def poll(self) -> int | None:
        self.returncode = self._exit
        return self._exit


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_start_writes_the_pidfile_and_waits_until_it_answers(tmp_path: Path) -> None:
    spawned: list[list[str]] = []
    answers = iter([False, False, True])
    clock = Clock()

    def spawn(argv: list[str], log: Any) -> FakeProc:
        spawned.append(argv)
        return FakeProc(4242)

    url = queue_metrics.start(tmp_path, listen_port=18488, spawn=spawn,
                              ready=lambda u: next(answers), sleep=clock.sleep, clock=clock)
    assert url == "http://127.0.0.1:18488/metrics"
    assert queue_metrics.pidfile(tmp_path).read_text() == "4242\n"
    assert spawned == [[*spawned[0][:1], "emulate", "queue-metrics", "--listen",
                        "127.0.0.1:18488"]]
    assert (queue_metrics.directory(tmp_path) / "exporter.log").exists()
    assert clock.t == pytest.approx(0.4)  # two polls of 0.2 s before it answered


def test_start_fails_clearly_when_the_exporter_exits(tmp_path: Path) -> None:
    clock = Clock()
    with pytest.raises(DeployError, match=r"queue exporter exited \(2\); see .*exporter.log"):
        queue_metrics.start(tmp_path, listen_port=1, spawn=lambda a, log: FakeProc(7, 2),
                            ready=lambda u: False, sleep=clock.sleep, clock=clock)
    assert not queue_metrics.pidfile(tmp_path).exists()


def test_start_gives_up_and_stops_it_when_it_never_answers(tmp_path: Path) -> None:
    clock = Clock()
    with pytest.raises(DeployError, match=r"did not answer http://127.0.0.1:1/metrics within 3"):
        queue_metrics.start(tmp_path, listen_port=1, timeout=3,
                            spawn=lambda a, log: FakeProc(999_999_999), ready=lambda u: False,
                            sleep=clock.sleep, clock=clock)
    assert not queue_metrics.pidfile(tmp_path).exists()


def test_stop_terms_then_kills_ours_and_removes_the_pidfile(tmp_path: Path) -> None:
    queue_metrics.directory(tmp_path).mkdir(parents=True)
    queue_metrics.pidfile(tmp_path).write_text("4242\n")
    sent: list[tuple[int, int]] = []
    alive = {4242: 3}  # answers "ours" three more times after TERM

    def is_ours(pid: int) -> bool:
        alive[pid] = alive.get(pid, 0) - 1
        return alive[pid] >= 0

    queue_metrics.stop(tmp_path, sleep=lambda s: None, kill=lambda p, s: sent.append((p, s)),
                       is_ours=is_ours)
    assert sent == [(4242, signal.SIGTERM)]
    assert not queue_metrics.pidfile(tmp_path).exists()
    queue_metrics.pidfile(tmp_path).write_text("4242\n")
    sent.clear()
    queue_metrics.stop(tmp_path, sleep=lambda s: None, kill=lambda p, s: sent.append((p, s)),
                       is_ours=lambda p: True)  # never goes: KILL after the wait
    assert sent == [(4242, signal.SIGTERM), (4242, signal.SIGKILL)]


def test_stop_never_signals_a_process_that_is_not_ours(tmp_path: Path) -> None:
    queue_metrics.directory(tmp_path).mkdir(parents=True)
    queue_metrics.pidfile(tmp_path).write_text("1\n")  # reused by something else
    sent: list[tuple[int, int]] = []
    queue_metrics.stop(tmp_path, kill=lambda p, s: sent.append((p, s)),
                       is_ours=lambda p: False)
    assert sent == [] and not queue_metrics.pidfile(tmp_path).exists()
    assert not queue_metrics.ours(1)  # init is no queue exporter
    queue_metrics.stop(tmp_path / "never-started")  # no pidfile: nothing to do


# ---- the command, the deployment, Prometheus ------------------------------------------------

def _spec(**changes: Any) -> topology.TopologySpec:
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw.update(changes)
    return topology.parse(raw)


def _save_state(path: Path, spec: topology.TopologySpec) -> None:
    st.save(st.State(topology=str(EXAMPLE), spec=spec.model_dump(mode="json")), path)


def test_the_command_reads_the_deployment_from_the_state(tmp_path: Path, monkeypatch) -> None:
    state_file = tmp_path / "state.json"
    load = st.load
    monkeypatch.setattr(st, "STATE_FILE", state_file)
    monkeypatch.setattr(st, "load", lambda: load(state_file))
    with pytest.raises(ValueError, match="no deployment"):
        commands._deployment_queues()
    spec = _spec()
    _save_state(state_file, spec)
    ports, names = commands._deployment_queues()
    p = topology.plan(spec)
    assert names == queues.class_names(p.spec.policy.small_dscp, p.spec.policy.bulk_dscp)
    assert [(x.group, x.ns, x.dev) for x in ports] == queues.port_groups(p) != []
    _save_state(state_file, _spec(queues=None))
    with pytest.raises(ValueError, match="no `queues:`"):
        commands._deployment_queues()


@pytest.mark.parametrize("listen", ["0.0.0.0:18488", "127.0.0.1", "127.0.0.1:x",
                                    "127.0.0.1:0", "127.0.0.1:70000", "[::1]:18488"])
def test_the_command_listens_on_loopback_only(listen: str) -> None:
    with pytest.raises(ValueError, match="loopback only"):
        commands._loopback_port(listen)
    assert commands._loopback_port("127.0.0.1:18488") == 18488


def test_the_deployment_records_and_prometheus_scrapes_the_exporter(tmp_path: Path) -> None:
    with_queues, without = topology.plan(_spec()), topology.plan(_spec(queues=None))
    assert queue_metrics.pidfile() in deploy.pidfiles(with_queues)
    assert queue_metrics.pidfile() not in deploy.pidfiles(without)
    assert queue_metrics.describe(without) == {}
    # a run dir of its own: an emulation running beside the tests has an exporter running
    assert queue_metrics.describe(with_queues, tmp_path)["queue_metrics"] == {
        "url": f"http://{queue_metrics.target()}/metrics", "running": False}
    doc = yaml.safe_load(prometheus.config({"gw": "127.0.0.1:9470"}, None,
                                           queues=queue_metrics.target()))
    job = next(j for j in doc["scrape_configs"] if j["job_name"] == "queues")
    assert job["static_configs"] == [{"targets": [queue_metrics.target()],
                                      "labels": {"role": "queues"}}]
    assert job["metrics_path"] == "/metrics"
    plain = yaml.safe_load(prometheus.config({"gw": "127.0.0.1:9470"}, None))
    assert "queues" not in [j["job_name"] for j in plain["scrape_configs"]]


def test_the_exporters_port_is_free_in_the_instances_block() -> None:
    from crosszone_lab.emulate import control_plane

    base = control_plane.port_base()
    p = topology.plan(topology.load(topology.DEFAULT_TOPOLOGY))
    agents = {int(control_plane.agent_metrics(g).rsplit(":", 1)[1]) for g in p.gateways}
    assert queue_metrics.port() not in agents | {base, prometheus.port()}
    assert base + 16 < queue_metrics.port() < prometheus.port()  # agents go up to base + 16


def test_the_cli_command_is_registered_and_refuses_a_public_address() -> None:
    from typer.testing import CliRunner

    from crosszone import cli

    runner = CliRunner()
    res = runner.invoke(cli.app, ["emulate", "queue-metrics", "--help"])
    assert res.exit_code == 0 and "--listen" in res.output, res.output
    # the address is checked first, root or not (and before the state is read)
    res = runner.invoke(cli.app, ["emulate", "queue-metrics", "--listen", "0.0.0.0:18488"])
    assert res.exit_code == 2 and "loopback only" in " ".join(res.output.split()), res.output
    res = runner.invoke(cli.app, ["emulate", "queue-metrics", "--listen", "[red]x:1"])
    assert res.exit_code == 2 and "'[red]x:1'" in res.output, res.output  # shown, not markup


def test_serve_answers_at_once_and_a_real_failing_tc_exports_nothing() -> None:
    """The real reader against a namespace that does not exist: tc fails, /metrics answers
    200 without a queue family, and setting `halt` ends the server."""
    import socket
    import threading
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    halt = threading.Event()
    ports = [queue_metrics.Port("hosts", "czq-unit-no-such-ns", "h1")]
    t = threading.Thread(target=queue_metrics.serve, args=(ports, NAMES, port, halt))
    t.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    status, body = r.status, r.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline, "the exporter never answered"
                time.sleep(0.05)
        assert status == 200 and "crosszone_queue" not in body
    finally:
        halt.set()
        t.join(10)
    assert not t.is_alive()
