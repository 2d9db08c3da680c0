"""The emulator's legacy-gateway commands against a real FRR 8.4, through the product's command
adapter: one legacy gateway's namespace with its daemons and its configuration as the emulator
renders it, under an emulator instance of its own (CROSSZONE_EMULATE_INSTANCE), so nothing of a
running emulation is touched. Each action must show in bgpd's running configuration, and the
counter must be read from the gateway's real nftables ruleset."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from frr_netns import FrrNs, sh

from crosszone.migrate.legacy_adapter import CommandAdapter, from_config

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "examples" / "migrate.yaml"
# Run with the test's instance, so every name is that instance's (topology reads it at import).
_RENDER = """
import json, sys
from pathlib import Path
from crosszone_lab.emulate import frr, legacy_adapter_commands, legacy_gateway, topology
p = topology.plan(topology.load(Path(sys.argv[1])))
gw = next(g for g in p.gateways if g.name == "lgw1")
print(json.dumps({"ns": gw.ns, "dir": str(frr.frr_dir(gw.ns)),
                  "config": frr.gateway_config(p, gw, True),
                  "nft": legacy_gateway.nft_ruleset(p),
                  "prefixes": frr.gateway_prefixes(p),
                  "section": legacy_adapter_commands.adapter_section(Path(sys.argv[1]))}))
"""


@pytest.fixture
def gateway() -> Iterator[tuple[FrrNs, dict, dict[str, str]]]:
    if shutil.which("vtysh") is None or not Path("/usr/lib/frr/bgpd").exists():
        pytest.skip("FRR is not installed")
    instance = "q" + secrets.token_hex(1)
    env = {**os.environ, "CROSSZONE_EMULATE_INSTANCE": instance}
    out = subprocess.run([sys.executable, "-c", _RENDER, str(TOPOLOGY)], env=env, check=True,
                         capture_output=True, text=True, cwd=ROOT)
    info = json.loads(out.stdout)
    assert info["ns"] == f"czemu{instance}-lgw1"
    frr = FrrNs(info["ns"], Path(info["dir"]))
    run_dir = Path(info["dir"]).parents[1]
    try:
        sh("ip", "netns", "add", frr.ns)
        sh("ip", "-n", frr.ns, "link", "set", "lo", "up")
        subprocess.run(["ip", "netns", "exec", frr.ns, "nft", "-f", "-"], input=info["nft"],
                       text=True, check=True, capture_output=True)
        frr.start(info["config"])
        yield frr, info, env
    finally:
        frr.stop()
        sh("ip", "netns", "del", frr.ns, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)


def _bgpd(frr: FrrNs) -> str:
    return frr.vtysh("show running-config bgpd")


def test_each_action_reaches_bgpd_and_the_counter_nftables(
        gateway: tuple[FrrNs, dict, dict[str, str]]) -> None:
    frr, info, env = gateway
    a = from_config(info["section"])
    assert isinstance(a, CommandAdapter)
    a = CommandAdapter(a.commands, a.timeout_s, env=env)
    to_compute, to_storage = info["prefixes"]
    canary = [x for x in to_storage if ":" not in x][-1]
    networks = {f"network {x}" for x in to_compute + to_storage}

    def lines() -> set[str]:
        return {line.strip() for line in _bgpd(frr).splitlines()}

    assert networks <= lines()
    a.set_weight("lgw1", 9000)
    got = lines()
    assert "set extcommunity bandwidth 9000" in got and "bgp graceful-shutdown" not in got
    a.drain("lgw1")
    got = lines()
    assert "bgp graceful-shutdown" in got
    assert not any(x.startswith("set extcommunity bandwidth") for x in got)
    a.withdraw("lgw1", [canary])
    got = lines()
    assert f"network {canary}" not in got and networks - {f"network {canary}"} <= got
    a.restore("lgw1", [canary])
    assert networks <= lines()
    a.withdraw("lgw1")
    assert not any(x.startswith("network ") for x in lines())
    a.withdraw("lgw1")  # twice is fine
    a.restore("lgw1")
    got = lines()
    assert networks <= got and "bgp graceful-shutdown" not in got
    assert not any(x.startswith("set extcommunity bandwidth") for x in got)
    assert a.forwarded_packets("lgw1") == 0
