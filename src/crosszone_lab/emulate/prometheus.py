"""A real Prometheus server (Debian `prometheus`) beside the emulation: it scrapes every agent,
the controller and (with `queues:`) the queue exporter each second and evaluates the
recording rules of `crosszone/agent/recording_rules.yml`, so the dashboard, `crosszone top`
and Grafana read the same figures an operator's Prometheus would hold.

It listens on 127.0.0.1 at a port of its own per emulator instance (`port()`), keeps its data
under the instance's run dir (removed by `stop`) and keeps one hour of samples.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx
import yaml

from crosszone.agent.metrics import RECORDING_RULES
from crosszone.linux import pids
from crosszone_lab.emulate import control_plane
from crosszone_lab.emulate.topology import RUN_DIR

BINARY = "prometheus"
#: the controller is at port_base(), agent k at port_base() + k (k <= 16: 8 gateways per kind)
PORT_OFFSET = 19
SCRAPE_SECONDS = 1


def port() -> int:
    """The server's port: the last of the instance's block of loopback ports (the controller
    has the first, agent k the k-th; control_plane.port_base), so instances never collide."""
    return control_plane.port_base() + PORT_OFFSET


def url() -> str:
    """The server's base URL."""
    return f"http://127.0.0.1:{port()}"


def directory(run_dir: Path = RUN_DIR) -> Path:
    """Configuration, pidfile, log and data of the server."""
    return run_dir / "prometheus"


def config(agents: Mapping[str, str], controller: str | None, rules: Path = RECORDING_RULES,
           interval: int = SCRAPE_SECONDS, queues: str | None = None) -> str:
    """prometheus.yml: job `agent` (one target per gateway, labelled `gateway`), job
    `controller`, job `queues` (the queue exporter, queue_metrics.py). agents: gateway ->
    metrics URL or host:port; controller: its base URL; queues: the exporter's host:port."""
    def target(u: str) -> tuple[str, str, str]:
        parsed = httpx.URL(u if "://" in u else f"http://{u}")
        return parsed.scheme, f"{parsed.host}:{parsed.port}", parsed.path or "/metrics"

    scrape = []
    for gw, u in sorted(agents.items()):
        scheme, hostport, path = target(u)
        scrape.append({"job_name": f"agent-{gw}", "scheme": scheme,
                       "metrics_path": path if path != "/" else "/metrics",
                       "static_configs": [{"targets": [hostport],
                                           "labels": {"gateway": gw, "role": "agent"}}]})
    if controller:
        scheme, hostport, _ = target(controller)
        scrape.append({"job_name": "controller", "scheme": scheme, "metrics_path": "/metrics",
                       "static_configs": [{"targets": [hostport],
                                           "labels": {"role": "controller"}}]})
    if queues:
        scheme, hostport, path = target(queues)
        scrape.append({"job_name": "queues", "scheme": scheme,
                       "metrics_path": path if path != "/" else "/metrics",
                       "static_configs": [{"targets": [hostport],
                                           "labels": {"role": "queues"}}]})
    doc = {"global": {"scrape_interval": f"{interval}s", "evaluation_interval": f"{interval}s",
                      "scrape_timeout": f"{interval}s"},
           "rule_files": [str(rules)], "scrape_configs": scrape}
    return yaml.safe_dump(doc, sort_keys=False)


def command(cfg: Path, data: Path, listen_port: int) -> list[str]:
    """The server's command line (loopback only, one hour of samples, no admin API)."""
    return [BINARY, f"--config.file={cfg}", f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{listen_port}",
            "--storage.tsdb.retention.time=1h", "--log.level=warn"]


def start(agents: Mapping[str, str], controller: str | None, run_dir: Path = RUN_DIR,
          listen_port: int | None = None, timeout: float = 30.0,
          sleep: Callable[[float], None] = time.sleep, queues: str | None = None) -> str:
    """Write the configuration, start the server (replacing one of ours already running),
    wait until it answers /-/ready; returns its URL. queues: the queue exporter's host:port,
    when the deployment runs one."""
    stop(run_dir)
    d = directory(run_dir)
    (d / "data").mkdir(parents=True, exist_ok=True)
    cfg = d / "prometheus.yml"
    cfg.write_text(config(agents, controller, queues=queues))
    lport = listen_port or port()
    with open(d / "prometheus.log", "ab") as logf:
        proc = subprocess.Popen(command(cfg, d / "data", lport), stdout=logf, stderr=logf,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    (d / "prometheus.pid").write_text(f"{proc.pid}\n")
    base = f"http://127.0.0.1:{lport}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited ({proc.returncode}); see {d}/prometheus.log")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/-/ready", timeout=1.0).status_code == 200:
                return base
        sleep(0.2)
    stop(run_dir)
    raise RuntimeError(f"prometheus not ready within {timeout:.0f} s; see {d}/prometheus.log")


def pidfiles(wanted: bool, run_dir: Path = RUN_DIR) -> list[Path]:
    """The server's pidfile when the deployment runs one (it does with a control plane)."""
    return [directory(run_dir) / "prometheus.pid"] if wanted else []


def describe(wanted: bool, run_dir: Path = RUN_DIR) -> dict[str, object]:
    """`emulate status --json`'s "prometheus" entry (empty when the deployment has none)."""
    return {"prometheus": {"url": url(), "running": pid(run_dir) is not None}} if wanted else {}


def pid(run_dir: Path = RUN_DIR) -> int | None:
    """The running server's pid, or None."""
    try:
        p = int((directory(run_dir) / "prometheus.pid").read_text().split()[0])
        os.kill(p, 0)
    except (OSError, ValueError, IndexError):
        return None
    return p


def stop(run_dir: Path = RUN_DIR, sleep: Callable[[float], None] = time.sleep) -> None:
    """Stop the server (TERM, then KILL after 5 s) and remove its directory and data."""
    p = pid(run_dir)
    if p is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGTERM)
        for _ in range(50):
            if not pids.pid_alive(p):
                break
            sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    shutil.rmtree(directory(run_dir), ignore_errors=True)


