"""The legacy adapter: the command adapter runs the operator's argv (recorded by a fake
command), times out, reports failures by action, gateway and status; its configuration refuses
every mistake; the no-action mode accepts only routers that can reach 100 %."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from crosszone.migrate.legacy_adapter import (
    ACTIONS,
    CommandAdapter,
    LegacyActionError,
    LegacyConfigError,
    NoActionAdapter,
    from_config,
    load,
    loads,
)

FAKE = """#!/bin/sh
# records its arguments (one JSON line per run), then behaves as FAKE_MODE says
python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@" >> "{log}"
case "$FAKE_MODE" in
  fail) echo "bgpd is not running" >&2; exit 3 ;;
  hang) sleep 30 & sleep 30 ;;
  counter) echo 12345 ;;
  garbage) echo "twelve" ;;
esac
"""


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "argv.log"
    prog = tmp_path / "legacy-gw"
    prog.write_text(FAKE.format(log=log))
    prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
    return prog, log


def _adapter(prog: Path, mode: str = "", timeout: float = 10.0) -> CommandAdapter:
    section = {"kind": "command", "timeout_s": timeout,
               "commands": {a: [str(prog), a.replace("_", "-")] for a in ACTIONS}}
    adapter = from_config(section)
    assert isinstance(adapter, CommandAdapter)
    return CommandAdapter(adapter.commands, adapter.timeout_s,
                          env={**os.environ, "FAKE_MODE": mode})


def _runs(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_each_action_runs_its_command_with_the_gateway_and_value(
        fake: tuple[Path, Path]) -> None:
    prog, log = fake
    a = _adapter(prog)
    a.set_weight("lgw1", 9000)
    a.drain("lgw2")
    a.withdraw("lgw1")
    a.withdraw("lgw1", ["100.64.3.0/24", "fd00:64:3::/48"])
    a.restore("lgw1", ["100.64.3.0/24"])
    a.restore("lgw2")
    assert _runs(log) == [["set-weight", "lgw1", "9000"], ["drain", "lgw2"],
                          ["withdraw", "lgw1"],
                          ["withdraw", "lgw1", "100.64.3.0/24", "fd00:64:3::/48"],
                          ["restore", "lgw1", "100.64.3.0/24"], ["restore", "lgw2"]]
    assert _adapter(prog, "counter").forwarded_packets("lgw1") == 12345
    assert _adapter(prog).forwarded_bytes("lgw1") is None  # optional, not configured


def test_the_optional_bytes_counter_runs_its_command(fake: tuple[Path, Path]) -> None:
    prog, log = fake
    section = {"kind": "command",
               "commands": {a: [str(prog), a.replace("_", "-")]
                            for a in (*ACTIONS, "forwarded_bytes")}}
    a = from_config(section)
    assert isinstance(a, CommandAdapter)
    a = CommandAdapter(a.commands, env={**os.environ, "FAKE_MODE": "counter"})
    assert a.forwarded_bytes("lgw1") == 12345
    assert _runs(log)[-1] == ["forwarded-bytes", "lgw1"]
    with pytest.raises(LegacyActionError, match="forwarded_bytes on lgw1"):
        CommandAdapter(a.commands, env={**os.environ, "FAKE_MODE": "garbage"}
                       ).forwarded_bytes("lgw1")
    none = from_config({"kind": "none", "routers": "skip-missing",
                        "commands": {"forwarded_packets": [str(prog), "count"],
                                     "forwarded_bytes": [str(prog), "bytes"]}})
    assert isinstance(none, NoActionAdapter) and none.counter is not None
    assert "forwarded_bytes" in none.counter.commands
    with pytest.raises(LegacyConfigError, match="unknown key"):
        from_config({**section, "commands": {**section["commands"],  # type: ignore[dict-item]
                                             "forwarded_gigabytes": [str(prog)]}})


def test_a_gateway_name_is_an_argument_never_a_command(fake: tuple[Path, Path]) -> None:
    prog, log = fake
    with pytest.raises(LegacyActionError, match="not a gateway name"):
        _adapter(prog).drain("lgw1; touch /tmp/pwned")
    with pytest.raises(LegacyActionError, match="not a gateway name"):
        _adapter(prog).drain("--help")
    assert not log.exists()


def test_a_failing_command_names_action_gateway_and_status(fake: tuple[Path, Path]) -> None:
    prog, _ = fake
    with pytest.raises(LegacyActionError) as err:
        _adapter(prog, "fail").set_weight("lgw2", 100)
    msg = str(err.value)
    assert msg.startswith("legacy set_weight on lgw2: ") and "exit status 3" in msg
    assert "bgpd is not running" in msg
    assert (err.value.action, err.value.gateway) == ("set_weight", "lgw2")


def test_a_hung_command_is_killed_at_its_timeout(fake: tuple[Path, Path]) -> None:
    prog, _ = fake
    t0 = time.monotonic()
    with pytest.raises(LegacyActionError, match=r"drain on lgw1: .* within 0.3 s"):
        _adapter(prog, "hang", timeout=0.3).drain("lgw1")
    assert time.monotonic() - t0 < 5  # its background child did not hold the pipes open


def test_a_counter_must_print_one_integer(fake: tuple[Path, Path]) -> None:
    prog, _ = fake
    with pytest.raises(LegacyActionError, match="printed 'twelve'"):
        _adapter(prog, "garbage").forwarded_packets("lgw1")
    with pytest.raises(LegacyActionError, match="printed ''"):
        _adapter(prog).forwarded_packets("lgw1")


@pytest.mark.parametrize("value", [0, 25601, -5, True, 1.5, "100"])
def test_a_weight_out_of_frr_range_is_refused_before_running(fake: tuple[Path, Path],
                                                            value: object) -> None:
    prog, log = fake
    with pytest.raises(LegacyActionError, match="1 to 25600"):
        _adapter(prog).set_weight("lgw1", value)  # type: ignore[arg-type]
    assert not log.exists()


@pytest.mark.parametrize("prefixes", [["10.0.0.1/8"], ["nope"], ["-x"], ["10.0.0.0/8", ""],
                                      [167772160], "10.0.0.0/8"])
def test_prefixes_are_validated_before_running(fake: tuple[Path, Path],
                                               prefixes: list[str]) -> None:
    prog, log = fake
    with pytest.raises(LegacyActionError, match=r"not a prefix|a list of prefixes"):
        _adapter(prog).withdraw("lgw1", prefixes)
    assert not log.exists()


def test_a_missing_program_is_named(tmp_path: Path) -> None:
    a = CommandAdapter({x: (str(tmp_path / "absent"),) for x in ACTIONS})
    with pytest.raises(LegacyActionError, match="restore on lgw1: cannot run"):
        a.restore("lgw1")


COMMANDS = "\n".join(f"  {a}: [/usr/local/sbin/legacy-gw, {a}]" for a in ACTIONS)
GOOD = f"kind: command\ntimeout_s: 5\ncommands:\n{COMMANDS}\n"
NONE = "kind: none\nrouters: skip-missing\n"


def test_a_valid_section_gives_a_command_adapter(tmp_path: Path) -> None:
    f = tmp_path / "adapter.yaml"
    f.write_text(GOOD)
    a = load(f)
    assert isinstance(a, CommandAdapter) and a.timeout_s == 5.0
    assert a.commands["drain"] == ("/usr/local/sbin/legacy-gw", "drain")
    assert loads(GOOD.replace("timeout_s: 5", "timeout_s: 2.5")).timeout_s == 2.5  # type: ignore[union-attr]
    b = loads(NONE)
    assert isinstance(b, NoActionAdapter) and b.counter is None


def _without(action: str) -> str:
    return GOOD.replace(f"  {action}: [/usr/local/sbin/legacy-gw, {action}]\n", "")


@pytest.mark.parametrize(("text", "words"), [
    (GOOD.replace("timeout_s: 5", "timeout_s: 5\ncolour: blue"), "unknown key(s) colour"),
    (GOOD.replace("timeout_s: 5", "timeout_s: 5\nrouters: skip-missing"),
     "unknown key(s) routers"),
    (GOOD.replace("  drain:", "  reboot: [/sbin/reboot]\n  drain:"),
     "a.yaml.commands: unknown key(s) reboot"),
    (_without("forwarded_packets"), "no command for forwarded_packets"),
    (GOOD.replace("timeout_s: 5", "timeout_s: 0"), "timeout_s: 0"),
    (GOOD.replace("timeout_s: 5", "timeout_s: 05"), "timeout_s: '05'"),
    (GOOD.replace("timeout_s: 5", "timeout_s: yes"), "timeout_s: 'yes'"),
    (GOOD.replace("timeout_s: 5", "timeout_s: 1e1"), "timeout_s: '1e1'"),
    (GOOD.replace("timeout_s: 5", "timeout_s: 301"), "timeout_s: 301"),
    (GOOD.replace("[/usr/local/sbin/legacy-gw, drain]", "/usr/local/sbin/legacy-gw drain"),
     "is a string"),
    (GOOD.replace("[/usr/local/sbin/legacy-gw, drain]", "[]"), "non-empty list"),
    (GOOD.replace("[/usr/local/sbin/legacy-gw, drain]", "[/usr/local/sbin/legacy-gw, 3]"),
     "drain[1]: 3"),
    (GOOD.replace("[/usr/local/sbin/legacy-gw, drain]", "[/usr/local/sbin/legacy-gw, '']"),
     "drain[1]: ''"),
    (GOOD.replace("[/usr/local/sbin/legacy-gw, drain]", "[bin/legacy-gw, drain]"),
     "must be absolute"),
    (GOOD.replace("[/usr/local/sbin/legacy-gw, drain]", "['legacy gw', drain]"),
     "white space"),
    (GOOD.replace("  drain: [/usr/local/sbin/legacy-gw, drain]\n", "  drain: [a]\n"
                  "  drain: [b]\n"), "given twice"),
    (GOOD.replace("kind: command", "kind: shell"), "kind: 'shell'"),
    (GOOD.replace("kind: command\n", ""), "kind: None"),
    (GOOD.replace("commands:\n" + COMMANDS + "\n", ""), "commands: missing"),
    (GOOD.replace("commands:\n" + COMMANDS + "\n", "commands: [a]\n"),
     "commands: not a mapping"),
    ("kind: none\n", "routers: None"),
    (NONE + "colour: blue\n", "unknown key(s) colour"),
    (NONE + "commands:\n  drain: [/bin/true]\n", "commands: unknown key(s) drain"),
    (NONE + "commands: {}\n", "no command for forwarded_packets"),
    ("kind: none\nrouters: default-weight-for-missing\n", "N/(100+N) of the traffic"),
    ("kind: none\nrouters: ignore\n", "plain ECMP"),
    ("kind: none\nrouters: ecmp\n", "BGP_MP_LB_ALL"),
    ("kind: none\nrouters: weighted\n", "not one of"),
    ("- kind\n", "a.yaml: not a mapping"),
    ("kind: {\n", "not valid YAML"),
])
def test_configuration_mistakes_are_refused_naming_the_key(text: str, words: str) -> None:
    with pytest.raises(LegacyConfigError) as err:
        loads(text, "a.yaml")
    assert words in str(err.value), str(err.value)


def test_the_deployment_files_section_is_named_in_errors() -> None:
    with pytest.raises(LegacyConfigError, match=r"^legacy.adapter.kind: 'x'"):
        from_config({"kind": "x"})


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(LegacyConfigError, match="cannot be read"):
        load(tmp_path / "absent.yaml")


def test_no_action_does_nothing_and_refuses_partial_steps(fake: tuple[Path, Path]) -> None:
    _, log = fake
    a = NoActionAdapter()
    a.set_weight("lgw1", 100)
    a.drain("lgw1")
    a.withdraw("lgw1")
    a.restore("lgw1")
    with pytest.raises(LegacyActionError, match="adapter none has no counter"):
        a.forwarded_packets("lgw1")
    assert not log.exists()
    assert NoActionAdapter.plan_problems([100]) == []
    (problem,) = NoActionAdapter.plan_problems([1, 10, 100])
    assert "steps 1 %, 10 %" in problem and "plan the steps as 100" in problem


def test_no_action_reads_a_configured_counter(fake: tuple[Path, Path]) -> None:
    prog, log = fake
    a = from_config({"kind": "none", "routers": "skip-missing",
                     "commands": {"forwarded_packets": [str(prog), "count"]}})
    assert isinstance(a, NoActionAdapter) and a.counter is not None
    with pytest.raises(LegacyActionError, match="printed ''"):
        a.forwarded_packets("lgw1")  # the fake prints nothing without FAKE_MODE
    assert _runs(log) == [["count", "lgw1"]]
