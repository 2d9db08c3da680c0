"""A gateway between two real namespaces, for tests that send frames through the fast path.

host ns (h0) -- gateway ns (c0 | s0) -- storage ns (st0), IPv6 off (no kernel chatter in the
counts), MACs from the example intent. Everything is removed on exit, also after a failure."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

from crosszone.fastpath import deploy
from crosszone.linux.netns import Executor, cmd, delete_namespaces, in_ns

from packet_fixtures import EXAMPLE

MACS = {
    "c0": "02:00:00:00:10:01",
    "s0": "02:00:00:00:20:01",
    "h0": "02:00:00:00:10:fe",
    "st0": "02:00:00:00:30:01",
}


def sh(*args: str) -> None:
    """Run a command, failing the test on error."""
    subprocess.run(args, check=True, capture_output=True)


@contextlib.contextmanager
def gateway_between(
    prefix: str, tmp_path: Path, bpffs: Path, mtu: int | None = None
) -> Iterator[tuple[dict[str, str], Path, Path]]:
    """Yields (namespaces by role: gw, h, st), the intent for c0/s0, and a fresh pin dir."""
    tag = secrets.token_hex(3)
    ns = {"gw": f"{prefix}-{tag}-gw", "h": f"{prefix}-{tag}-h", "st": f"{prefix}-{tag}-st"}
    pin = bpffs / f"{prefix}-{tag}"
    try:
        for name in ns.values():
            Executor().apply([cmd("ip", "netns", "add", name),
                              in_ns(name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")])
        for dev, peer, where in (("c0", "h0", "h"), ("s0", "st0", "st")):
            sh("ip", "-n", ns["gw"], "link", "add", dev, "type", "veth",
               "peer", "name", peer, "netns", ns[where])
        extra = ["mtu", str(mtu)] if mtu else []
        for where, dev in (("gw", "c0"), ("gw", "s0"), ("h", "h0"), ("st", "st0")):
            sh(
                "ip",
                "-n",
                ns[where],
                "link",
                "set",
                dev,
                "address",
                MACS[dev],
                *extra,
                "promisc",
                "on",
                "up",
            )
        intent = tmp_path / "gw.yaml"
        intent.write_text(EXAMPLE.read_text().replace("compute0", "c0").replace("storage0", "s0"))
        yield ns, intent, pin
    finally:
        deploy.detach(pin)
        Executor().apply(delete_namespaces(ns.values()))
