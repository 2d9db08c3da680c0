"""Recording rules, the emulator's Prometheus configuration, the Grafana dashboard and the
agents' routing gauges: every name a query reads is one that a rule records or a component
really exports (checked against real scrapes of the agent's and the controller's collectors),
and promtool accepts the rules and the configuration."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from crosszone.abi import layout
from crosszone.abi.reasons import Reason
from crosszone.agent.metrics import RECORDING_RULES, AgentMetrics, FastPathCollector
from crosszone.agent.routing import RoutingCollector, bfd_sessions, bgp_sessions, xdp_devices
from crosszone.control import dashboard
from crosszone.control.metrics import ControllerCollector, exposition
from crosszone_lab.emulate import prometheus
from crosszone_lab.emulate.queue_metrics import Port, QueueCollector

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "docs" / "grafana" / "crosszone.json"
BGP = json.dumps({"ipv4Unicast": {"peers": {"10.2.1.1": {"state": "Established"},
                                            "10.3.1.1": {"state": "Active"}}},
                  "ipv6Unicast": {"peers": {"fd00::1": {"state": "Established"}}}})
BFD = json.dumps([{"peer": "10.2.1.1", "status": "up"}, {"peer": "10.3.1.1", "status": "down"}])
LINKS = json.dumps([{"ifname": "lo"}, {"ifname": "c0", "xdp": {"mode": 1, "prog": {"id": 9}}},
                    {"ifname": "s0"}])
TC_CLASS = """class htb 1:12e parent 1:1 leaf 8013: prio 0 rate 35600Kbit ceil 40Mbit
 Sent 1000 bytes 4 pkt (dropped 1, overlimits 0 requeues 0)
 backlog 1514b 1p requeues 0
"""
PROMQL_WORDS = {"sum", "rate", "by", "without", "on", "ignoring", "and", "or", "unless", "bool",
                "avg", "max", "min", "count", "irate", "increase", "topk"}


def _fake_run(argv):
    return LINKS if "link" in " ".join(argv) else None


def _fake_ask(daemon: str, command: str) -> str | None:
    """FRR's answers as bgpd's and bfdd's vty sockets give them (agent.routing.vty_asker)."""
    return {("bgpd", "show bgp summary json"): BGP,
            ("bfdd", "show bfd peers json"): BFD}.get((daemon, command))


def _names(text: str) -> set[str]:
    """Metric names in a text exposition."""
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def exported_names() -> set[str]:
    """Every metric name an agent and the controller export, from real scrapes."""
    agent = AgentMetrics()
    agent.add_fastpath(FastPathCollector(lambda: {"v": (1, 2, 3, 4)},
                                         lambda: dict.fromkeys(Reason, (1, 64)),
                                         lambda: {"routes4": 3},
                                         lambda: {"v": layout.CzPolicyCounter()}))
    agent.reconcile_seconds.labels("full").observe(0.1)
    agent.entries_written.labels("put").inc()
    agent.registry.register(RoutingCollector("ns", ask=_fake_ask, run=_fake_run))
    names = _names(generate_latest(agent.registry).decode())
    mig = {"state": "shifting", "step": 1, "weight_new": 0.1,
           "guards": [{"name": "loss", "ok": True}]}
    names |= _names(exposition(ControllerCollector(
        lambda: {"desired_revision": 1, "gateways": {"g": {"revision": 1, "health": "ok"}}},
        lambda: mig)).decode())
    return names | queue_names()


def queue_names() -> set[str]:
    """What the emulator's queue exporter exports (crosszone_queue_*: the product reads these
    names from whatever exports them), from a real scrape over a fake `tc`."""
    queues = QueueCollector([Port("hosts", "ns", "h1")], {"1:12e": "small"},
                            run=lambda argv: TC_CLASS)
    queues.refresh()
    reg = CollectorRegistry()
    reg.register(queues)
    return _names(generate_latest(reg).decode())


def rules() -> dict[str, str]:
    """record name -> expression."""
    doc = yaml.safe_load(RECORDING_RULES.read_text())
    return {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"]}


def names_in(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (labels, ranges, grouping and functions out)."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\b(by|without)\s*\([^)]*\)", " ", expr)
    return {m.group(1) for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?", bare)
            if not m.group(2) and m.group(1) not in PROMQL_WORDS}


def test_rules_pass_promtool() -> None:
    out = subprocess.run(["promtool", "check", "rules", str(RECORDING_RULES)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules())} rules found" in out.stdout


def test_rules_read_exported_metrics_and_cover_what_the_dashboard_draws() -> None:
    exported = exported_names()
    assert {"crosszone_queue_bytes_total", "crosszone_queue_packets_total",
            "crosszone_queue_drops_total", "crosszone_queue_backlog_bytes"} <= queue_names()
    for record, expr in rules().items():
        assert names_in(expr) and names_in(expr) <= exported, (record, names_in(expr))
    # the dashboard draws recorded rates and reads exported gauges
    for expr, _labels in dashboard.SERIES.values():
        assert expr in rules()
    for expr in dashboard.GAUGES.values():
        assert names_in(expr) <= exported | {"up"}


def test_names_in_ignores_labels_and_functions() -> None:
    assert names_in('sum by (vpc) (rate(x_total{a="b c"}[5s])) * 8') == {"x_total"}
    assert names_in("crosszone:vpc_bits:rate5s") == {"crosszone:vpc_bits:rate5s"}


def test_grafana_queries_read_recorded_or_exported_names() -> None:
    doc = json.loads(GRAFANA.read_text())
    known = set(rules()) | exported_names()
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    for expr in exprs:
        assert names_in(expr) and names_in(expr) <= known, (expr, names_in(expr) - known)
    used = set().union(*(names_in(e) for e in exprs))
    assert set(rules()) <= used, "every recorded rate has a panel"
    for panel in doc["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]


def test_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    text = prometheus.config({"gw-b": "127.0.0.1:9471", "gw-a": "http://127.0.0.1:9470/metrics"},
                             "http://127.0.0.1:8470", queues="127.0.0.1:8488")
    doc = yaml.safe_load(text)
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert list(jobs) == ["agent-gw-a", "agent-gw-b", "controller", "queues"]
    assert jobs["queues"]["static_configs"] == [
        {"targets": ["127.0.0.1:8488"], "labels": {"role": "queues"}}]
    assert jobs["agent-gw-a"]["static_configs"] == [
        {"targets": ["127.0.0.1:9470"], "labels": {"gateway": "gw-a", "role": "agent"}}]
    assert jobs["controller"]["metrics_path"] == "/metrics"
    assert doc["rule_files"] == [str(RECORDING_RULES)]
    assert doc["global"]["scrape_interval"] == "1s"
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(text)
    out = subprocess.run(["promtool", "check", "config", str(cfg)], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_port_is_in_the_instances_block_after_every_agent() -> None:
    from crosszone_lab.emulate import control_plane, topology

    base = control_plane.port_base()
    agents = {int(control_plane.agent_metrics(g).rsplit(":", 1)[1])
              for g in topology.plan(topology.load(topology.DEFAULT_TOPOLOGY)).gateways}
    assert prometheus.port() == base + prometheus.PORT_OFFSET
    assert prometheus.port() not in agents | {base} and max(agents) < prometheus.port()
    assert prometheus.url() == f"http://127.0.0.1:{prometheus.port()}"


def test_stop_without_a_server_removes_the_directory(tmp_path: Path) -> None:
    d = prometheus.directory(tmp_path)
    (d / "data").mkdir(parents=True)
    (d / "prometheus.pid").write_text("999999999\n")  # no such process
    prometheus.stop(tmp_path)
    assert not d.exists()


# ---- the agents' routing gauges -------------------------------------------------------------

def test_routing_parsers() -> None:
    assert bgp_sessions(BGP) == {"10.2.1.1": "Established", "10.3.1.1": "Active",
                                 "fd00::1": "Established"}
    assert bfd_sessions(BFD) == {"10.2.1.1": "up", "10.3.1.1": "down"}
    assert xdp_devices(LINKS) == {"c0": True, "s0": False}


@pytest.mark.parametrize("bad", [None, "", "{", "[]", "null", '{"ipv4Unicast": []}', "1e999",
                                 '{"ipv4Unicast": {"peers": {"x": 3}}}', "[" * 5000])
def test_routing_parsers_never_raise(bad) -> None:
    assert bgp_sessions(bad) in (None, {})
    assert bfd_sessions(bad) in (None, [], {})
    assert xdp_devices(bad) in (None, {})


def test_routing_collector_exports_what_it_can_read() -> None:
    reg = CollectorRegistry()
    reg.register(RoutingCollector("czemu-gw", ask=_fake_ask, run=_fake_run))
    text = generate_latest(reg).decode()
    assert 'crosszone_bgp_session_up{peer="10.2.1.1",state="Established"} 1.0' in text
    assert 'crosszone_bgp_session_up{peer="10.3.1.1",state="Active"} 0.0' in text
    assert 'crosszone_bfd_session_up{peer="10.3.1.1"} 0.0' in text
    assert 'crosszone_fastpath_attached{device="c0"} 1.0' in text
    assert 'crosszone_fastpath_attached{device="s0"} 0.0' in text
    asked: list[list[str]] = []
    clock = [0.0]
    counting = RoutingCollector(None, ask=lambda d, c: asked.append([d, c]) or None,
                                run=lambda a: asked.append(list(a)) or None,
                                every=3.0, now=lambda: clock[0])
    for t in (0.0, 1.0, 2.9):  # one read serves the scrapes within `every` seconds
        clock[0] = t
        counting.snapshot()
    assert sorted(map(tuple, asked)) == [("bfdd", "show bfd peers json"),
                                         ("bgpd", "show bgp summary json"),
                                         ("ip", "-j", "link", "show")]  # once each
    clock[0] = 3.0
    counting.snapshot()
    assert len(asked) == 6
    asked.clear()
    quiet = CollectorRegistry()
    quiet.register(RoutingCollector(None, run=lambda a: asked.append(list(a)) or None))
    assert "crosszone_" not in generate_latest(quiet).decode()  # nothing read: nothing made up
    assert asked == [["ip", "-j", "link", "show"]]  # no FRR to ask: only the links are read


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_real_prometheus_records_the_rates(tmp_path: Path) -> None:
    """Prometheus as the emulator starts it, over an exporter whose byte counter grows by
    1 MB/s: the per-VPC and per-gateway rules give 8 Mbit/s; stop() ends it and removes its
    data."""
    import time

    import httpx
    from prometheus_client import start_http_server
    from prometheus_client.core import CounterMetricFamily

    t0 = time.monotonic()

    class Growing:
        def collect(self):
            b = CounterMetricFamily("crosszone_vpc_bytes", "b", labels=["vpc", "direction"])
            b.add_metric(["blue", "to_storage"], 1e6 * (time.monotonic() - t0))
            yield b

    reg = CollectorRegistry()
    reg.register(Growing())
    agent_port = _free_port()
    server, _thread = start_http_server(agent_port, addr="127.0.0.1", registry=reg)
    try:
        url = prometheus.start({"gw-x": f"127.0.0.1:{agent_port}"}, None, run_dir=tmp_path,
                               listen_port=_free_port())
        pid = prometheus.pid(tmp_path)
        assert pid is not None

        def value(expr: str) -> float | None:
            res = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=2).json()
            got = res["data"]["result"]
            return float(got[0]["value"][1]) if got else None

        # The first windows hold the start of the series (a rate over less than 5 s): wait
        # for a full window.
        deadline = time.monotonic() + 20
        while not 7e6 < (v := value('crosszone:vpc_bits:rate5s{vpc="blue"}') or 0) < 9e6:
            assert time.monotonic() < deadline, f"recorded rate {v}, not 8 Mbit/s, after 20 s"
            time.sleep(0.5)
        g = value('crosszone:gateway_bits:rate5s{gateway="gw-x",direction="to_storage"}')
        assert g is not None and 7e6 < g < 9e6, g
    finally:
        prometheus.stop(tmp_path)
        server.shutdown()
    assert not prometheus.directory(tmp_path).exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_started_routing_collector_never_makes_a_scrape_wait() -> None:
    """Started, the collector reads in its own thread: a scrape while bgpd hangs answers at
    once with the last reading (and its age); once that is older than max_age, the families go
    missing instead of going stale."""
    gate = threading.Event()
    calls: list[float] = []

    def ask(daemon: str, command: str) -> str | None:
        calls.append(time.monotonic())
        if len(calls) > 2:  # the second reading hangs, as a daemon may under load
            gate.wait(10)
        return _fake_ask(daemon, command)

    c = RoutingCollector("czemu-gw", ask=ask, run=_fake_run, every=0.05, max_age=0.6)
    reg = CollectorRegistry()
    reg.register(c)
    c.start()
    try:
        deadline = time.monotonic() + 5
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 3, "the reader did not come back for a second reading"
        t0 = time.monotonic()
        text = generate_latest(reg).decode()
        assert time.monotonic() - t0 < 0.2  # served from the first reading, not waited for
        assert 'crosszone_bgp_session_up{peer="10.2.1.1",state="Established"} 1.0' in text
        assert "crosszone_routing_read_age_seconds" in text
        time.sleep(0.8)  # the hung reading outlives max_age
        text = generate_latest(reg).decode()
        assert "crosszone_bgp_session_up" not in text, "a stale reading was served"
        assert "crosszone_fastpath_attached" not in text
    finally:
        gate.set()
        c.stop()
    assert c._thread is not None and not c._thread.is_alive()
