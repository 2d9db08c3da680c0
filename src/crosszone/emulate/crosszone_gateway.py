"""The crosszone gateway in the emulation: an intent file per gateway and the fast-path commands.

The namespace itself is plumbed like every gateway (links, anycast VTEP on lo, FRR); what makes it
a crosszone gateway is the XDP program attached by `crosszone fastpath attach`, which reads the
intent written here. The emulator only speaks to the fast path through that CLI (its contract:
attach/detach/stats), so the two can evolve separately.

The intent describes exactly this deployment: the compute interface's next hop is the compute
router's MAC on that link, the storage pool's next hop is the storage router's MAC on the storage
link (the router then forwards to the nodes), and the host table has one entry per workload
endpoint (host VTEP, inner address, inner MAC).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from crosszone.emulate import frr
from crosszone.emulate.kinds import DeployError
from crosszone.emulate.topology import RUN_DIR, Gateway, Plan, router_mac
from crosszone.linux.netns import Cmd, Executor, Op, WriteFile

POOL = "storage"


def crosszone_bin() -> str:
    """The `crosszone` entry point of the running interpreter's environment."""
    return str(Path(sys.executable).parent / "crosszone")


def fastpath_available() -> bool:
    """True once `crosszone fastpath attach` exists (its --help exits 0)."""
    try:
        res = subprocess.run([crosszone_bin(), "fastpath", "attach", "--help"],
                             capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def intent_path(gw: Gateway) -> Path:
    """Where the intent of `gw` is written."""
    return RUN_DIR / "intent" / f"{gw.name}.yaml"


def intent(p: Plan, gw: Gateway) -> dict[str, Any]:
    """The intent document (docs/intent.md, version 1) for one crosszone gateway."""
    vpcs = [
        {
            "name": f"vpc-{vpc.name}",
            "vni": vpc.vni,
            "prefixes": [str(vpc.prefix)] + ([str(vpc.prefix6)] if vpc.prefix6 else []),
            "storage_facing": [str(vpc.storage_facing)]
            + ([str(vpc.storage_facing6)] if vpc.storage_facing6 else []),
            "router_mac": router_mac(v),
            "storage_pools": [POOL],
        }
        for v, vpc in enumerate(p.spec.vpcs, start=1)
    ]
    hosts = [
        {
            "name": ep.name,
            "vpc": f"vpc-{ep.vpc.name}",
            "vtep": p.hosts[ep.host - 1].vtep,
            "addresses": [ep.addr] + ([ep.addr6] if ep.addr6 else []),
            "mac": ep.mac,
        }
        for ep in p.endpoints
    ]
    return {
        "version": 1,
        "gateway": {
            "name": gw.name,
            "vtep": str(p.spec.anycast_vtep),
            "interfaces": [
                {"name": "c0", "role": "compute", "mac": gw.compute_mac,
                 "next_hop_mac": gw.compute_peer_mac},
                {"name": "s0", "role": "storage", "mac": gw.storage_mac},
            ],
        },
        "vpcs": vpcs,
        "hosts": hosts,
        "storage_pools": [
            {
                "name": POOL,
                "prefixes": [str(p.spec.storage.subnet)]
                + ([str(p.spec.storage.subnet6)] if p.ipv6 else []),
                "next_hops": [{"name": "storage-router", "interface": "s0",
                               "mac": gw.storage_peer_mac}],
            }
        ],
    }


def intent_ops(p: Plan, gw: Gateway) -> list[Op]:
    """Write the intent file of `gw`."""
    text = yaml.safe_dump(intent(p, gw), sort_keys=False)
    return [WriteFile(intent_path(gw), text)]


def attach_ops(gw: Gateway) -> list[Op]:
    """Load and attach the fast path in `gw`'s namespace, maps pinned under its pin dir."""
    # Off the control CPU: the loader's map allocation holds its CPU for up to a second
    # (frr.control_cpus), and bfdd must not be waiting behind it.
    _bfd_cpu, loader = frr.control_cpus()
    pin = ("taskset", "-c", loader) if loader else ()
    return [
        Cmd(("mkdir", "-p", str(gw.pin_dir))),
        Cmd((*pin, crosszone_bin(), "fastpath", "attach", "--netns", gw.ns,
             "--intent", str(intent_path(gw)), "--pin-dir", str(gw.pin_dir))),
    ]


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
        """Write the intent file that `fastpath attach` reads."""
        return intent_ops(p, gw)

    def available(self) -> bool:
        """Whether `crosszone fastpath attach` exists (fastpath_available)."""
        return fastpath_available()

    def attach(self, ex: Executor, p: Plan, gw: Gateway) -> None:
        """`crosszone fastpath attach`, then check that both router-side peers got XDP_PASS."""
        ex.apply(attach_ops(gw))
        missing = missing_peer_programs(ex, p, gw)
        if missing:
            raise DeployError(
                f"{gw.name}: `crosszone fastpath attach` left no XDP program on the "
                f"router-side veth end(s) {', '.join(missing)}: redirects into the "
                "gateway's links would be dropped (fast-path peer lookup; see "
                "tests/integration/test_fastpath_regression.py)")

    def detach(self, ns: str, pin_dir: Path) -> list[Op]:
        """`crosszone fastpath detach`, tolerant of a fast path that was never attached."""
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
