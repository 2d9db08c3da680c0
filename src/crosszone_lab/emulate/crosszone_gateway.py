"""The crosszone gateway in the emulation: programmed by the control plane, inspected by the CLI.

The namespace itself is plumbed like every gateway (links, the anycast VTEP on its storage link,
FRR's daemons); what makes it a crosszone gateway is the product. `attach` starts the emulation's
control plane (control_plane.py: a controller with the cluster intent, one agent per gateway);
the agent attaches the program, keeps its maps equal to the intent and owns the gateway's FRR:
its daemons start with no configuration (frr.AGENT_START_CONFIG) and the agent renders and
applies the gateway's BGP, BFD and anchors from the intent's `bgp:`, announcing a VPC only once
its maps are programmed, as on a real gateway host. Nothing here writes the gateway's routing.
Counters are read with `crosszone fastpath stats`, so the emulator needs no fast-path
internals.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from crosszone.linux.netns import Cmd, Executor, Op
from crosszone_lab.emulate import control_plane, frr
from crosszone_lab.emulate.control_plane import crosszone_bin
from crosszone_lab.emulate.kinds import DeployError
from crosszone_lab.emulate.topology import Gateway, Plan


def fastpath_available() -> bool:
    """True once `crosszone fastpath attach` exists (its --help exits 0)."""
    try:
        res = subprocess.run([crosszone_bin(), "fastpath", "attach", "--help"],
                             capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def intent(p: Plan, gw: Gateway) -> dict[str, Any]:
    """The emulation's cluster intent narrowed to `gw` (a file `fastpath attach` takes alone)."""
    doc = control_plane.cluster_intent(p)
    doc["gateways"] = [g for g in doc["gateways"] if g["name"] == gw.name]
    return doc


def attach_ops(gw: Gateway) -> list[Op]:
    """Load and attach the fast path again over `gw`'s pinned maps and reconcile them once with
    the store (an upgrade: the new program takes over the live maps; bpf_xdp_attach replaces the
    program on the device atomically). The running agent keeps programming the same maps and
    owns the gateway's FRR, so this one-shot agent leaves routing alone (`--no-routing`: without
    it, it would apply the intent's `bgp:` to the system's FRR)."""
    # Off the control CPU: loading holds its CPU for up to a second (frr.control_cpus).
    return [Cmd((*frr.loader_pin(), crosszone_bin(), "agent", "--gateway", gw.name, "--once",
                 "--reattach", "--no-routing", "--store", control_plane.store_url(),
                 "--pin-dir", str(gw.pin_dir), "--netns", gw.ns, "--metrics", "",
                 "--state-file", str(control_plane.agent_state_file(gw))))]


def router_side_ports(p: Plan, gw: Gateway) -> list[tuple[str, str]]:
    """(namespace, device) of the routers' ends of `gw`'s two links."""
    return [(p.compute_router_ns, f"g{gw.index}"), (p.storage_router_ns, f"g{gw.index}")]


def has_xdp(link_json: str) -> bool:
    """Whether `ip -j link show DEV` reports an XDP program on the device."""
    try:
        data = json.loads(link_json or "[]")
    except json.JSONDecodeError:
        return False
    return any(isinstance(x, dict) and x.get("xdp") for x in data)


def missing_peer_programs(ex: Executor, p: Plan, gw: Gateway) -> list[str]:
    """Router-side veth ends of `gw` that lack an XDP program after `fastpath attach`.

    The kernel's veth driver drops an XDP_REDIRECT into a veth whose peer runs no XDP program,
    so `attach` puts an XDP_PASS program on each peer. It finds the peer by (ifindex, peer
    ifindex) alone, and ifindexes are per namespace: an unrelated veth elsewhere with the same
    pair of numbers can be taken for it (tests/integration/test_fastpath_regression.py). The
    emulator checks the outcome instead of trusting it, and fails loudly.
    """
    missing = []
    for ns, dev in router_side_ports(p, gw):
        if not has_xdp(ex.output(["ip", "-n", ns, "-j", "link", "show", dev], check=False)):
            missing.append(f"{ns}/{dev}")
    return missing


def detach_ops(gw: Gateway) -> list[Op]:
    """Undo attach; tolerant of a fast path that was never attached."""
    return KIND.detach(gw.ns, gw.pin_dir)


def read_stats(gw: Gateway, strict: bool = False) -> dict[str, Any]:
    """Fast-path counters of `gw` (empty when not attached or not available; with `strict`,
    DeployError instead, for callers that count drops and must not read a failure as none)."""
    try:
        res = subprocess.run([crosszone_bin(), "fastpath", "stats", "--pin-dir", str(gw.pin_dir),
                              "--json"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _no_stats(gw, strict, repr(exc))
    if res.returncode != 0:
        return _no_stats(gw, strict, f"exit {res.returncode}: {res.stderr.strip()[-200:]}")
    try:
        data = json.loads(res.stdout)
    except json.JSONDecodeError as exc:
        return _no_stats(gw, strict, f"not JSON ({exc})")
    if not isinstance(data, dict) or (strict and not isinstance(data.get("reasons"), dict)):
        return _no_stats(gw, strict, f"no reasons in {res.stdout[:80]!r}")
    return data


def _no_stats(gw: Gateway, strict: bool, why: str) -> dict[str, Any]:
    if strict:
        raise DeployError(f"{gw.name}: cannot read fast-path counters: {why}")
    return {}


def dropped_from_stats(stats: dict[str, Any]) -> int:
    """Sum of drop counters in a stats document, whatever its exact nesting."""
    total = 0

    def walk(node: Any, in_drop: bool) -> None:
        nonlocal total
        if isinstance(node, dict):
            for key, val in node.items():
                walk(val, in_drop or "drop" in str(key).lower())
        elif isinstance(node, list):
            for val in node:
                walk(val, in_drop)
        elif in_drop and isinstance(node, int | float) and not isinstance(node, bool):
            total += int(node)

    walk(stats, False)
    return total


class CrosszoneGateway:
    """The XDP fast path as a gateway kind (kinds.GatewayKind): silent until attached."""

    name = "crosszone"
    letter = "x"
    attaches = True  # XDP_REDIRECT needs the program attached before traffic may come
    default_count = 2

    def configure(self, p: Plan, gw: Gateway) -> list[Op]:
        """Nothing before the namespaces exist: the control plane programs it at `attach`."""
        return []

    def available(self) -> bool:
        """Whether `crosszone fastpath attach` exists (fastpath_available)."""
        return fastpath_available()

    def attach(self, ex: Executor, p: Plan, gw: Gateway) -> None:
        """Start the controller (once) and `gw`'s agent, which attaches the fast path, programs
        it and configures the gateway's FRR; wait until it has applied the intent to both, then
        check that both router-side peers got XDP_PASS."""
        revision = control_plane.start_controller(p)
        control_plane.start_agent(p, gw)
        control_plane.wait_applied(gw, revision)
        missing = missing_peer_programs(ex, p, gw)
        if missing:
            raise DeployError(
                f"{gw.name}: `crosszone fastpath attach` left no XDP program on the "
                f"router-side veth end(s) {', '.join(missing)}: redirects into the "
                "gateway's links would be dropped (fast-path peer lookup; see "
                "tests/integration/test_fastpath_regression.py)")

    def detach(self, ns: str, pin_dir: Path) -> list[Op]:
        """`crosszone fastpath detach`, tolerant of a fast path that was never attached (the
        agent is stopped before, with the other daemons)."""
        return [Cmd((crosszone_bin(), "fastpath", "detach", "--netns", ns,
                     "--pin-dir", str(pin_dir)), check=False)]

    def drops(self, ex: Executor, gw: Gateway) -> dict[str, int]:
        """The fast path's drop reasons of `gw` (`crosszone fastpath stats`)."""
        out: dict[str, int] = {}
        for name, c in read_stats(gw, strict=True)["reasons"].items():
            if name.startswith("drop_") and isinstance(c, dict):
                out[name] = out.get(name, 0) + int(c.get("packets", 0))
        return out


KIND = CrosszoneGateway()
