"""The control plane of the emulation: a controller over a SQLite store, one agent per gateway.

A real crosszone deployment programs its gateways from one cluster intent: the controller keeps
it in the store, and an agent beside each gateway attaches the fast path and keeps its maps equal
to the intent's current revision. The emulator runs exactly that, in the root namespace on
loopback (the agents reach their gateway's interfaces with `--netns`):

- the cluster intent (`cluster_intent`, format version 2) lists every crosszone gateway of the
  plan with its `bgp:` (AS, router id, the two routers as peers with their roles, the
  topology's BFD timers); the storage router answers on one MAC on all its gateway-facing ports,
  as routers do, so one storage next hop serves every gateway;
- `crosszone controller` over `store.db` in the run directory, with a token file beside it;
- the intent is applied through the controller's API (`crosszone apply` does the same);
- `crosszone agent` per gateway, metrics on 127.0.0.1 (Prometheus can scrape them): it attaches
  the fast path, programs its maps and owns the gateway's FRR (`--frr-vty`: the namespace's
  daemons, started empty by the emulator), rendering and applying its configuration from the
  intent (docs/routing.md), as on a real gateway host;
- `wait_applied` returns once every agent has reported the intent's revision, in its maps and in
  its FRR.

Ports follow the emulator instance (CROSSZONE_EMULATE_INSTANCE), so two instances do not collide.
Every process has a pidfile in the run directory; `emulate down` stops them with the rest.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from crosszone.intent.schema import Policy
from crosszone.linux import pids
from crosszone_lab.emulate import frr
from crosszone_lab.emulate.kinds import DeployError
from crosszone_lab.emulate.topology import (
    COMPUTE_ROUTER_AS,
    GATEWAY_AS,
    INSTANCE,
    RUN_DIR,
    STORAGE_ROUTER_AS,
    Gateway,
    Plan,
    router_mac,
)

POOL = "storage"
CONTROL_DIR = RUN_DIR / "control"


def port_base() -> int:
    """First loopback port of this instance: the controller's; agent k listens on base + k."""
    if not INSTANCE:
        return 18470
    return 18500 + 20 * (zlib.crc32(INSTANCE.encode()) % 1000)


def controller_url() -> str:
    """Where the emulation's controller listens."""
    return f"http://127.0.0.1:{port_base()}"


def agent_metrics(gw: Gateway) -> str:
    """host:port of `gw`'s agent's Prometheus endpoint."""
    return f"127.0.0.1:{port_base() + gw.index}"


def store_url() -> str:
    """The SQLite store the controller and the agents share."""
    return f"sqlite://{CONTROL_DIR / 'store.db'}"


def token_file() -> Path:
    """The controller's API token (0600), for `crosszone apply --token-file` and the tests."""
    return CONTROL_DIR / "token"


def controller_pidfile() -> Path:
    """Pidfile of the controller."""
    return CONTROL_DIR / "controller.pid"


def agent_pidfile(gw: Gateway) -> Path:
    """Pidfile of `gw`'s agent."""
    return CONTROL_DIR / f"agent-{gw.name}.pid"


def agent_state_file(gw: Gateway) -> Path:
    """The agent's stable ids and last revision (kept in the run dir, removed by `down`)."""
    return CONTROL_DIR / f"agent-{gw.name}.json"


def log_file(name: str) -> Path:
    """Where a control-plane process writes its output."""
    return CONTROL_DIR / f"{name}.log"


def gateways(p: Plan) -> list[Gateway]:
    """The gateways the control plane programs: those of the kind that attaches a fast path."""
    from crosszone_lab.emulate import kinds

    return [g for g in p.gateways if kinds.get(g.kind).attaches]


def pidfiles(p: Plan) -> list[Path]:
    """Every pidfile of the control plane of plan `p` (none without crosszone gateways)."""
    gws = gateways(p)
    return [controller_pidfile()] + [agent_pidfile(g) for g in gws] if gws else []


def cluster_intent(p: Plan) -> dict[str, Any]:
    """The cluster intent (version 2) for every crosszone gateway of the deployment.

    The compute interface's next hop is the compute router's MAC on that gateway's link; the
    storage pool's one next hop is the storage router (one MAC on every gateway-facing port);
    the host table has one entry per workload endpoint (host VTEP, inner address, inner MAC);
    the traffic policy is the topology's (`policy:`, docs/policy.md); `bgp:` is what the
    gateway's agent renders its FRR configuration from (`bgp`).
    """
    gws = gateways(p)
    if not gws:
        raise DeployError("the topology has no crosszone gateway: no cluster intent to write")
    storage_mac = {g.storage_peer_mac for g in gws}
    if len(storage_mac) != 1:
        raise DeployError(f"the storage router answers on several MACs {sorted(storage_mac)}: "
                          "one storage next hop cannot serve every gateway")
    return {
        "version": 2,
        "gateways": [
            {
                "name": gw.name,
                "vtep": str(p.spec.anycast_vtep),
                "interfaces": [
                    {"name": "c0", "role": "compute", "mac": gw.compute_mac,
                     "next_hop_mac": gw.compute_peer_mac},
                    {"name": "s0", "role": "storage", "mac": gw.storage_mac},
                ],
                "bgp": bgp(p, gw),
            }
            for gw in gws
        ],
        "vpcs": [
            {
                "name": f"vpc-{vpc.name}",
                "vni": vpc.vni,
                "prefixes": [str(vpc.prefix)] + ([str(vpc.prefix6)] if vpc.prefix6 else []),
                "storage_facing": [str(vpc.storage_facing)]
                + ([str(vpc.storage_facing6)] if vpc.storage_facing6 else []),
                "router_mac": router_mac(v),
                "storage_pools": [POOL],
            } | {k: getattr(vpc, k) for k in ("rate_mbps", "burst_kib")
                 if getattr(vpc, k) is not None}
            for v, vpc in enumerate(p.spec.vpcs, start=1)
        ],
        "hosts": [
            {
                "name": ep.name,
                "vpc": f"vpc-{ep.vpc.name}",
                "vtep": p.hosts[ep.host - 1].vtep,
                "addresses": [ep.addr] + ([ep.addr6] if ep.addr6 else []),
                "mac": ep.mac,
            }
            for ep in p.endpoints
        ],
        "storage_pools": [
            {
                "name": POOL,
                "prefixes": [str(p.spec.storage.subnet)]
                + ([str(p.spec.storage.subnet6)] if p.ipv6 else []),
                "next_hops": [{"name": "storage-router", "interface": "s0",
                               "mac": storage_mac.pop()}],
            }
        ],
        "policy": p.spec.policy.model_dump(include=set(Policy.model_fields)),
    }


def bgp(p: Plan, gw: Gateway) -> dict[str, Any]:
    """The gateway's `bgp:` entry: the gateways' shared AS (so the routers' paths tie and their
    multipath spreads over them), its router id, the compute router as the peer that gets the
    anycast VTEP and the storage router as the one that gets the storage-facing prefixes, and
    the topology's BFD timers (the routers' profile has the same)."""
    return {
        "asn": GATEWAY_AS,
        "router_id": gw.router_id,
        "peers": [{"address": gw.compute_peer, "asn": COMPUTE_ROUTER_AS, "role": "compute"},
                  {"address": gw.storage_peer, "asn": STORAGE_ROUTER_AS, "role": "storage"}],
        "bfd": {"interval_ms": p.spec.bfd.interval_ms, "multiplier": p.spec.bfd.multiplier},
    }


def charts_dir() -> Path:
    """Where the dashboard finds plan and simulation charts (`crosszone plan --chart DIR/x`)."""
    return CONTROL_DIR / "charts"


def intent_file() -> Path:
    """The cluster intent as applied at `up` (a copy; the store holds the live one)."""
    return CONTROL_DIR / "cluster.yaml"


def crosszone_bin() -> str:
    """The `crosszone` entry point of the running interpreter's environment."""
    return str(Path(sys.executable).parent / "crosszone")


def _spawn(name: str, argv: list[str], pidfile: Path, env: dict[str, str] | None = None) -> int:
    """Start a daemon in its own session, output to its log file; write its pidfile."""
    CONTROL_DIR.mkdir(parents=True, exist_ok=True)
    with open(log_file(name), "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, env={**os.environ, **(env or {})})
    pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


def controller_alive() -> bool:
    """Whether the controller's process (by its pidfile) is running."""
    return pids.pidfile_alive(controller_pidfile())


def token() -> str:
    """The API token (created at `start_controller`)."""
    return token_file().read_text().strip()


def _wait(what: str, test: Callable[[], bool], timeout: float,
          why: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise DeployError(f"timed out after {timeout:.0f} s waiting for {what}"
                              + (f": {why()}" if why() else ""))
        time.sleep(0.1)


def _tail(name: str, lines: int = 5) -> str:
    try:
        return " | ".join(log_file(name).read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def _healthz() -> bool:
    try:
        with urllib.request.urlopen(controller_url() + "/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_controller(p: Plan) -> int:
    """Start the controller (unless running), apply the cluster intent; return its revision."""
    from crosszone.control.client import Client, ControllerError
    from crosszone_lab.emulate import prometheus  # it numbers its port after ours

    CONTROL_DIR.mkdir(parents=True, exist_ok=True)
    if not token_file().exists():
        fd = os.open(token_file(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(24) + "\n")
    if not pids.pidfile_alive(controller_pidfile()):
        charts_dir().mkdir(parents=True, exist_ok=True)
        _spawn("controller", [crosszone_bin(), "controller", "--store", store_url(),
                              "--listen", controller_url().removeprefix("http://"),
                              "--token-file", str(token_file()),
                              "--prometheus", prometheus.url(), "--charts", str(charts_dir())],
               controller_pidfile())
        _wait("the controller's /healthz", _healthz, 30,
              lambda: "dead, log: " + _tail("controller")
              if not pids.pidfile_alive(controller_pidfile()) else "")
    text = yaml.safe_dump(cluster_intent(p), sort_keys=False)
    intent_file().write_text(text)
    client = Client(controller_url(), token())
    try:
        client.apply(text)  # its revision is None when the store holds this intent already
        revision = int(client.intent()["revision"])
    except ControllerError as exc:
        raise DeployError(f"the controller refused the emulation's intent: {exc}") from exc
    finally:
        client.close()
    return revision


def start_agent(p: Plan, gw: Gateway) -> None:
    """Start `gw`'s agent (unless running): it attaches the fast path, programs it, and owns
    the FRR of `gw`'s namespace (`--frr-vty`: the daemons' socket directory, whose frr.conf they
    start from and the agent keeps)."""
    if pids.pidfile_alive(agent_pidfile(gw)):
        return
    # The agent attaches the fast path (its map allocation holds a CPU for up to a second):
    # off the CPU bfdd runs on (frr.control_cpus).
    _spawn(f"agent-{gw.name}", [
        *frr.loader_pin(), crosszone_bin(), "agent", "--gateway", gw.name, "--store", store_url(),
        "--pin-dir", str(gw.pin_dir), "--netns", gw.ns, "--metrics", agent_metrics(gw),
        "--state-file", str(agent_state_file(gw)), "--frr-vty", str(frr.frr_dir(gw.ns))],
        agent_pidfile(gw))


def agent_status(gw: Gateway) -> dict[str, Any]:
    """What `gw`'s agent last reported through the store ({} if nothing yet)."""
    from crosszone.store.store import STATUS, StoreUnavailable, open_store

    try:
        store = open_store(store_url())
        try:
            raw = store.get(STATUS + gw.name)
        finally:
            store.close()
    except (StoreUnavailable, OSError):
        return {}
    try:
        value = json.loads(raw) if raw else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def routing_managed(status: dict[str, Any]) -> bool:
    """Whether an agent's status says it has applied the intent's routing to its FRR and has
    no routing error since. (Its routing revision moves only with the intent's core object: a
    change of hosts or routes alone leaves the rendered configuration as it is.)"""
    routing = status.get("routing")
    return (isinstance(routing, dict) and routing.get("mode") == "managed"
            and routing.get("revision") is not None)


def wait_applied(gw: Gateway, revision: int, timeout: float = 60.0) -> None:
    """Until `gw`'s agent reports `revision` (or later) applied and healthy, and its FRR holds
    the routing it renders from the intent's `bgp:` (`routing_managed`)."""
    def done() -> bool:
        s = agent_status(gw)
        return (int(s.get("revision") or 0) >= revision and s.get("health") == "ok"
                and routing_managed(s))

    def why() -> str:
        if not pids.pidfile_alive(agent_pidfile(gw)):
            return "the agent died, log: " + _tail(f"agent-{gw.name}")
        s = agent_status(gw)
        if not s:
            return "no status yet"
        got = s.get("routing")
        routing: dict[str, Any] = got if isinstance(got, dict) else {}
        return (f"last status {s.get('health')} at revision {s.get('revision')}: "
                f"{s.get('message')}; routing {routing.get('mode')} at revision "
                f"{routing.get('revision')}: {routing.get('message')}")

    _wait(f"{gw.name}'s agent to apply revision {revision}", done, timeout, why)


def describe(p: Plan) -> dict[str, Any]:
    """The control plane's addresses for `emulate status --json` (empty without one)."""
    gws = gateways(p)
    if not gws:
        return {}
    return {
        "controller": {"url": controller_url(), "token_file": str(token_file()),
                       "store": store_url(), "running": pids.pidfile_alive(controller_pidfile())},
        "agents": {g.name: {"metrics": f"http://{agent_metrics(g)}/metrics",
                            "running": pids.pidfile_alive(agent_pidfile(g)),
                            "pidfile": str(agent_pidfile(g))} for g in gws},
    }
