"""The emulator's canary and production probes: the product's `crosszone probe` daemons.

A migration's guards read the probes' verdicts from the store (migrate/probe_verdicts.py), as
on real gateways. Here the daemons run in the emulated hosts' namespaces: one in the first
endpoint of the canary VPC (role `canary`) and one in the first endpoint of every other VPC
(role `production`: a fault that hits one VPC only is seen). Each reads, every second, the
known metadata document of every storage node over IPv4 and IPv6 (its size and SHA-256 are
computed from the document the storage node serves, `storage.meta_document`), and reports to
the emulation's controller store.

Which VPC is the canary is known only when a migration starts, so `ensure` is called with it
(by the emulator's driver, at parity and when a runner attaches): daemons whose configuration
is already the wanted one are kept, others are started again, and `ensure` returns once each
has reported a round, so that no guard reads a probe that has not started yet (or the
`stopped` report of the one it replaced). `emulate down` stops them with everything else that
runs in the emulated namespaces.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from crosszone.linux import pids
from crosszone.migrate.probe_verdicts import PROBE
from crosszone.store.store import Store
from crosszone_lab.emulate import control_plane, storage
from crosszone_lab.emulate.kinds import DeployError
from crosszone_lab.emulate.topology import Endpoint, Plan

#: The document each probe reads from every storage node (one of the storage nodes' own).
PROBE_PATH = "/meta/shard-00000.json"
#: How long `ensure` waits for a started probe's first report. A probe's start is a Python
#: start (0.4 s of CPU) and one round of reads (each bounded by the probe's own deadlines, 6 s);
#: on a box saturated by the workload the start alone took 10 s (and 18 s while the CLI still
#: imported the lab), so the wait is generous: it only bounds a probe that is wedged.
START_TIMEOUT_S = 60.0


def probe_name(vpc: str) -> str:
    """The name of the probe in VPC `vpc` (its store key is probe/<name>)."""
    return f"emulate-{vpc}"


def config_file(vpc: str) -> Path:
    """Where the probe in VPC `vpc` keeps its configuration."""
    return control_plane.CONTROL_DIR / f"probe-{vpc}.yaml"


def pidfile(vpc: str) -> Path:
    """The pidfile of the probe in VPC `vpc`."""
    return control_plane.CONTROL_DIR / f"probe-{vpc}.pid"


def endpoints(p: Plan, canary: str | None) -> dict[str, tuple[str, Endpoint]]:
    """VPC -> (role, the endpoint its probe runs in): the first endpoint of each VPC, the
    canary VPC's with role canary."""
    out: dict[str, tuple[str, Endpoint]] = {}
    for ep in p.endpoints:
        if ep.vpc.name not in out:
            out[ep.vpc.name] = ("canary" if ep.vpc.name == canary else "production", ep)
    return out


def probe_config(p: Plan, role: str, ep: Endpoint) -> dict[str, Any]:
    """The probe configuration (probe/config.py) of `role` reading from endpoint `ep`."""
    targets = []
    for node in p.storage_nodes:
        doc = storage.meta_document(p, node, 0).encode()
        addresses = [node.addr] + ([node.addr6] if ep.addr6 and node.addr6 else [])
        targets.append({"name": node.name, "addresses": addresses, "path": PROBE_PATH,
                        "size": len(doc), "sha256": hashlib.sha256(doc).hexdigest()})
    cfg: dict[str, Any] = {"name": probe_name(ep.vpc.name), "role": role, "interval_s": 1,
                           "targets": targets}
    if p.spec.priority_dscp:
        cfg["dscp"] = p.spec.priority_dscp  # the queues' first class, as the UDP probe's
    return cfg


def _report(st: Store, vpc: str) -> dict[str, Any] | None:
    raw = st.get(PROBE + probe_name(vpc))
    try:
        doc = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _log_tail(vpc: str, lines: int = 5) -> str:
    """The end of the probe's log for an error message (it is gone after `emulate down`)."""
    path = control_plane.log_file(f"probe-{vpc}")
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f" (no log at {path})"
    return (f"; the end of {path}: " + " | ".join(tail)) if tail else f" ({path} is empty)"


def stop(vpc: str) -> None:
    """Stop the probe in VPC `vpc` (SIGTERM: it finishes its round and reports `stopped`)."""
    pid = pids.read_pid(pidfile(vpc))
    if pid is not None and pids.pidfile_alive(pidfile(vpc)):
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not pids.pidfile_alive(pidfile(vpc)):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    pidfile(vpc).unlink(missing_ok=True)


def ensure(p: Plan, st: Store, canary: str | None) -> list[str]:
    """Run the probes a migration with canary VPC `canary` reads (module doc); the VPCs whose
    probe was (re)started. DeployError when one does not report in START_TIMEOUT_S."""
    started: dict[str, float] = {}
    for vpc, (role, ep) in endpoints(p, canary).items():
        # the namespace too: every VPC's endpoints may have the same addresses
        text = f"# runs in {ep.ns}\n" + yaml.safe_dump(probe_config(p, role, ep), sort_keys=True)
        cfg = config_file(vpc)
        if pids.pidfile_alive(pidfile(vpc)) and cfg.exists() and cfg.read_text() == text:
            continue
        stop(vpc)
        control_plane.CONTROL_DIR.mkdir(parents=True, exist_ok=True)
        cfg.write_text(text)
        started[vpc] = time.time()
        with open(control_plane.log_file(f"probe-{vpc}"), "ab") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ep.ns, control_plane.crosszone_bin(), "probe",
                 "--config", str(cfg), "--store", control_plane.store_url()],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        pidfile(vpc).write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT_S
    for vpc, t0 in started.items():
        while True:
            doc = _report(st, vpc)
            if doc is not None and not doc.get("stopped") and \
                    float(doc.get("updated", 0)) >= t0:
                break
            if not pids.pidfile_alive(pidfile(vpc)):
                raise DeployError(f"the probe in VPC {vpc} died{_log_tail(vpc)}")
            if time.monotonic() > deadline:
                raise DeployError(f"the probe in VPC {vpc} did not report within "
                                  f"{START_TIMEOUT_S:g} s{_log_tail(vpc)}")
            time.sleep(0.1)
    return sorted(started)
