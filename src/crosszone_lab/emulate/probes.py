"""The emulator's canary and production probes: the product's `crosszone probe` daemons.

A migration's guards read the probes' verdicts from the store (migrate/probe_verdicts.py), as
on real gateways. Here the daemons run in the emulated hosts' namespaces: one in the first
endpoint of the canary VPC (role `canary`) and one in the first endpoint of another VPC (role
`production`). Each reads, every second, the known metadata document of every storage node
over IPv4 and IPv6 (its size and SHA-256 are computed from the document the storage node
serves, `storage.meta_document`), and reports to the emulation's controller store.

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
ROLES = ("canary", "production")
#: How long `ensure` waits for a started probe's first report.
START_TIMEOUT_S = 30.0


def probe_name(role: str) -> str:
    """The probe's name (its store key is probe/<name>)."""
    return f"emulate-{role}"


def config_file(role: str) -> Path:
    """Where the probe of `role` keeps its configuration."""
    return control_plane.CONTROL_DIR / f"probe-{role}.yaml"


def pidfile(role: str) -> Path:
    """The pidfile of the probe of `role`."""
    return control_plane.CONTROL_DIR / f"probe-{role}.pid"


def endpoints(p: Plan, canary: str | None) -> dict[str, Endpoint]:
    """role -> the endpoint its probe runs in: the first of the canary VPC, the first of
    another VPC (no canary role without a canary)."""
    out: dict[str, Endpoint] = {}
    for ep in p.endpoints:
        role = "canary" if ep.vpc.name == canary else "production"
        out.setdefault(role, ep)
    return out


def probe_config(p: Plan, role: str, ep: Endpoint) -> dict[str, Any]:
    """The probe configuration (probe/config.py) of `role` reading from endpoint `ep`."""
    targets = []
    for node in p.storage_nodes:
        doc = storage.meta_document(p, node, 0).encode()
        addresses = [node.addr] + ([node.addr6] if ep.addr6 and node.addr6 else [])
        targets.append({"name": node.name, "addresses": addresses, "path": PROBE_PATH,
                        "size": len(doc), "sha256": hashlib.sha256(doc).hexdigest()})
    cfg: dict[str, Any] = {"name": probe_name(role), "role": role, "interval_s": 1,
                           "targets": targets}
    if p.spec.priority_dscp:
        cfg["dscp"] = p.spec.priority_dscp  # the queues' first class, as the UDP probe's
    return cfg


def _report(st: Store, role: str) -> dict[str, Any] | None:
    raw = st.get(PROBE + probe_name(role))
    try:
        doc = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def stop(role: str) -> None:
    """Stop the probe of `role` (SIGTERM: it finishes its round and reports `stopped`)."""
    pid = pids.read_pid(pidfile(role))
    if pid is not None and pids.pidfile_alive(pidfile(role)):
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not pids.pidfile_alive(pidfile(role)):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    pidfile(role).unlink(missing_ok=True)


def ensure(p: Plan, st: Store, canary: str | None) -> list[str]:
    """Run the probes a migration with canary VPC `canary` reads (module doc); the roles
    (re)started. DeployError when a started probe does not report in START_TIMEOUT_S."""
    wanted = endpoints(p, canary)
    started: dict[str, float] = {}
    for role in ROLES:
        ep = wanted.get(role)
        if ep is None:
            stop(role)
            continue
        # the namespace too: every VPC's endpoints may have the same addresses
        text = f"# runs in {ep.ns}\n" + yaml.safe_dump(probe_config(p, role, ep), sort_keys=True)
        cfg = config_file(role)
        if pids.pidfile_alive(pidfile(role)) and cfg.exists() and cfg.read_text() == text:
            continue
        stop(role)
        control_plane.CONTROL_DIR.mkdir(parents=True, exist_ok=True)
        cfg.write_text(text)
        started[role] = time.time()
        with open(control_plane.log_file(f"probe-{role}"), "ab") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ep.ns, control_plane.crosszone_bin(), "probe",
                 "--config", str(cfg), "--store", control_plane.store_url()],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        pidfile(role).write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT_S
    for role, t0 in started.items():
        while True:
            doc = _report(st, role)
            if doc is not None and not doc.get("stopped") and \
                    float(doc.get("updated", 0)) >= t0:
                break
            if not pids.pidfile_alive(pidfile(role)):
                raise DeployError(f"the {role} probe died: see "
                                  f"{control_plane.log_file(f'probe-{role}')}")
            if time.monotonic() > deadline:
                raise DeployError(f"the {role} probe did not report within "
                                  f"{START_TIMEOUT_S:g} s")
            time.sleep(0.1)
    return sorted(started)
