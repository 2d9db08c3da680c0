"""The emulator's legacy-gateway commands, driven through the product's command adapter with
a fake vtysh and a fake ip (no deployment needed): each action sends the emulator's own bgpd
commands to the gateway's namespace, and failures come back named."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from crosszone.migrate.legacy_adapter import CommandAdapter, LegacyActionError, from_config
from crosszone_lab.emulate import frr, topology
from crosszone_lab.emulate.legacy_adapter_commands import adapter_section

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "examples" / "migrate.yaml"
RECORDER = """#!/bin/sh
python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@" >> "{log}"
{tail}
"""
NFT = {"nftables": [{"metainfo": {}},
                    {"counter": {"family": "ip", "table": "czgw", "name": "forwarded",
                                 "packets": 40, "bytes": 4000}},
                    {"counter": {"family": "ip6", "table": "czgw", "name": "forwarded",
                                 "packets": 2, "bytes": 200}},
                    {"counter": {"family": "ip", "table": "czgw", "name": "dropped",
                                 "packets": 7, "bytes": 70}}]}


def _script(path: Path, log: Path, tail: str = "") -> str:
    path.write_text(RECORDER.format(log=log, tail=tail))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def plan() -> topology.Plan:
    return topology.plan(topology.load(TOPOLOGY))


def _adapter(tmp_path: Path, vtysh_tail: str = "") -> tuple[CommandAdapter, Path]:
    log = tmp_path / "argv.log"
    vtysh = _script(tmp_path / "vtysh", log, vtysh_tail)
    ip = _script(tmp_path / "ip", log, f"echo '{json.dumps(NFT)}'")
    a = from_config(adapter_section(TOPOLOGY, vtysh=vtysh, ip=ip))
    assert isinstance(a, CommandAdapter)
    return a, log


def _runs(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _vtysh(ns: str, cmds: list[str]) -> list[str]:
    return list(frr.vtysh(ns, *cmds).argv[1:])


def test_each_action_sends_the_emulators_bgpd_commands(tmp_path: Path,
                                                        plan: topology.Plan) -> None:
    a, log = _adapter(tmp_path)
    lgw1 = next(g for g in plan.gateways if g.name == "lgw1")
    to_compute, to_storage = frr.gateway_prefixes(plan)
    v6 = any(":" in x for x in to_storage)
    canary = [to_storage[0]]
    a.set_weight("lgw1", 9000)
    a.drain("lgw1")
    a.withdraw("lgw1", canary)
    a.restore("lgw1", canary)
    a.withdraw("lgw1")
    a.restore("lgw1")
    assert _runs(log) == [
        _vtysh(lgw1.ns, frr.weight_commands(9000, False, v6)),
        _vtysh(lgw1.ns, frr.weight_commands(None, True, v6)),
        _vtysh(lgw1.ns, frr.prefix_commands([], canary, True)),
        _vtysh(lgw1.ns, frr.prefix_commands([], canary, False)),
        _vtysh(lgw1.ns, frr.prefix_commands(to_compute, to_storage, True)),
        _vtysh(lgw1.ns, frr.weight_commands(None, False, v6)
               + frr.prefix_commands(to_compute, to_storage, False)),
    ]


def test_the_counter_is_the_nftables_forwarded_counters(tmp_path: Path,
                                                         plan: topology.Plan) -> None:
    a, log = _adapter(tmp_path)
    assert a.forwarded_packets("lgw2") == 42
    assert a.forwarded_bytes("lgw2") == 4200  # both families' bytes, not the dropped ones
    lgw2 = next(g for g in plan.gateways if g.name == "lgw2")
    assert _runs(log) == [["netns", "exec", lgw2.ns, "nft", "-j", "list", "counters"]] * 2


def test_a_failing_vtysh_is_reported_with_action_and_gateway(tmp_path: Path) -> None:
    a, _ = _adapter(tmp_path, vtysh_tail="echo '% Unknown command' >&2; exit 1")
    with pytest.raises(LegacyActionError) as err:
        a.drain("lgw2")
    assert str(err.value).startswith("legacy drain on lgw2: ")
    assert "exit status 1" in str(err.value) and "Unknown command" in str(err.value)
    # withdrawing what is not announced is not an error (vtysh refuses `no network X`)
    a.withdraw("lgw2")


@pytest.mark.parametrize(("call", "words"), [
    (lambda a: a.drain("xgw1"), "only legacy gateways"),
    (lambda a: a.drain("lgw9"), "no gateway 'lgw9'"),
    (lambda a: a.withdraw("lgw1", ["10.99.0.0/16"]), "not a prefix the legacy gateways"),
])
def test_what_the_emulator_cannot_do_is_refused(tmp_path: Path, call, words: str) -> None:  # type: ignore[no-untyped-def]
    a, log = _adapter(tmp_path)
    with pytest.raises(LegacyActionError, match="exit status 2") as err:
        call(a)
    assert words in str(err.value)
    assert not log.exists()
