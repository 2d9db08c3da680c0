"""Fast-path defects found by the emulator, reproduced as small as possible (they fail until fixed).

The emulator does not work around them: `emulate up` checks the outcome and stops with a
message that points here.

1. `fastpath attach` (src/crosszone/fastpath/deploy.py, `_veth_peer`) puts the XDP_PASS program
   that a redirect into a veth needs on the veth's *peer*. It finds the peer by searching the root
   and every named namespace (sorted) for a link whose ifindex is the peer ifindex and whose
   IFLA_LINK is the port's ifindex. Ifindexes are per namespace, so any unrelated veth pair with
   the same two numbers in a namespace searched earlier is taken instead: the real peer gets no
   program, and every frame the gateway redirects into that port is dropped by the veth driver
   (no fast-path counter sees it: the program already returned XDP_REDIRECT and counted a
   forward). The peer's namespace is known exactly (IFLA_LINK_NETNSID of the port), so the search
   is not needed. Whether it bites depends on which other namespaces exist on the box, which makes
   it look like random, total loss through one gateway in one direction.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

GW, RT, DECOY = "czreg-gw", "czreg-rt", "czreg-a"  # the decoy sorts before the real peer
PIN = Path("/sys/fs/bpf/czreg")

INTENT = """\
version: 1
gateway:
  name: reg
  vtep: 10.0.0.100
  interfaces:
    - {name: c0, role: compute, mac: "02:00:00:00:10:01", next_hop_mac: "02:00:00:00:10:fe"}
    - {name: s0, role: storage, mac: "02:00:00:00:20:01"}
vpcs:
  - {name: a, vni: 1001, prefixes: [192.168.0.0/16], storage_facing: [100.64.0.0/16],
     router_mac: "02:00:00:00:aa:01", storage_pools: [pool]}
hosts:
  - {name: h1, vpc: a, vtep: 10.1.1.2, addresses: [192.168.1.10], mac: "02:00:00:01:00:01"}
storage_pools:
  - name: pool
    prefixes: [172.16.0.0/24]
    next_hops: [{name: r, interface: s0, mac: "02:00:00:00:30:01"}]
"""


def _ip(*argv: str, check: bool = True) -> str:
    res = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise AssertionError(f"ip {' '.join(argv)}: {res.stderr}")
    return res.stdout


def _xdp_prog(ns: str, dev: str) -> str | None:
    link = json.loads(_ip("-n", ns, "-j", "link", "show", dev))[0]
    prog = (link.get("xdp") or {}).get("prog") or {}
    return prog.get("name")


@pytest.fixture
def decoy_topology(tmp_path: Path) -> Iterator[Path]:
    """Gateway c0 (ifindex 2) <-> router r0 (ifindex 6), s0 (3) <-> r1 (7); elsewhere an
    unrelated pair x (2) <-> y (6) inside the decoy namespace."""
    for ns in (GW, RT, DECOY):
        _ip("netns", "del", ns, check=False)
        _ip("netns", "add", ns)
    try:
        _ip("link", "add", "name", "c0", "index", "2", "netns", GW, "mtu", "1550", "type", "veth",
            "peer", "name", "r0", "index", "6", "netns", RT, "mtu", "1550")
        _ip("link", "add", "name", "s0", "index", "3", "netns", GW, "type", "veth",
            "peer", "name", "r1", "index", "7", "netns", RT)
        _ip("link", "add", "name", "x", "index", "2", "netns", DECOY, "type", "veth",
            "peer", "name", "y", "index", "6", "netns", DECOY)
        for ns, devs in ((GW, ("c0", "s0")), (RT, ("r0", "r1")), (DECOY, ("x", "y"))):
            for dev in devs:
                _ip("-n", ns, "link", "set", dev, "up")
        intent = tmp_path / "intent.yaml"
        intent.write_text(INTENT)
        yield intent
    finally:
        from crosszone.fastpath.deploy import detach

        detach(PIN)
        for ns in (GW, RT, DECOY):
            _ip("netns", "del", ns, check=False)


def test_attach_puts_the_pass_program_on_the_real_veth_peer(decoy_topology: Path) -> None:
    """The XDP_PASS helper must land on r0 (c0's peer), not on the look-alike y."""
    from crosszone.fastpath.deploy import attach

    attach(decoy_topology, PIN, GW)
    seen = {"r0": _xdp_prog(RT, "r0"), "r1": _xdp_prog(RT, "r1"), "decoy y": _xdp_prog(DECOY, "y")}
    assert seen["r1"] is not None, seen  # s0's peer has no look-alike: found correctly
    assert seen["r0"] is not None and seen["decoy y"] is None, (
        f"fastpath attach put the veth-peer program on the wrong device: {seen}")
