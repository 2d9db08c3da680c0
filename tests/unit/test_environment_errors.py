"""Environment problems reach a user as one line and exit code 2, never a traceback; the demo
skips a part the machine cannot run and fails only when crosszone itself failed."""

from __future__ import annotations

import errno

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

import crosszone_lab.demo as demo_mod
from crosszone import cli
from crosszone.fastpath.libbpf_abi import BpfError
from crosszone.linux.environment import EnvironmentProblem, describe, is_environment_problem


@pytest.mark.parametrize("exc, line", [
    (EnvironmentProblem("live-frames test runs", "EPERM: refused"),
     "live-frames test runs: EPERM: refused"),
    (BpfError(errno.EPERM, "bpf_prog_test_run_opts", "cz_bench_gen"),
     "the kernel refused bpf_prog_test_run_opts(cz_bench_gen): Operation not permitted (EPERM)"),
    (FileNotFoundError(2, "No such file or directory", "build/xdp_gateway.o"),
     "[Errno 2] No such file or directory: 'build/xdp_gateway.o'"),
])
def test_an_environment_problem_is_one_line_and_exit_2(monkeypatch, capsys, exc, line):
    def boom() -> None:
        raise exc

    monkeypatch.setattr(cli, "command", lambda _args: boom)
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == f"error: {line}\n"


def test_a_crosszone_failure_keeps_its_traceback(monkeypatch):
    def boom() -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(cli, "command", lambda _args: boom)
    with pytest.raises(ValueError, match="a bug"):
        cli.main()


def test_classification() -> None:
    assert is_environment_problem(PermissionError("x"))
    assert is_environment_problem(BpfError(errno.EINVAL, "bpf_xdp_attach", "c0"))
    assert not is_environment_problem(RuntimeError("wrong forwarding"))
    assert not is_environment_problem(OSError(errno.EIO, "io"))
    assert describe(EnvironmentProblem("a\nb", "c")) == "a b: c"


def _run_demo(monkeypatch, part1, part2, part3) -> tuple[int, str]:
    import crosszone_lab.emulate.demo as emulated

    monkeypatch.setattr(demo_mod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(demo_mod, "fastpath_demo", lambda console: part1())
    monkeypatch.setattr(emulated, "run_demo", lambda console, duration, verbose: part2())
    monkeypatch.setattr(demo_mod, "forwarding_demo", lambda console: part3())
    app = typer.Typer()
    app.command()(demo_mod.demo)
    res = CliRunner().invoke(app, [])
    return res.exit_code, res.output


GOOD = {"crosszone": {"corrupted": 0, "misrouted": 0}, "floor": {"corrupted": 0, "misrouted": 0}}


def _refused():
    raise BpfError(errno.EPERM, "bpf_prog_test_run_opts", "cz_bench_gen")


def test_the_demo_skips_a_part_the_machine_cannot_run_and_exits_0(monkeypatch):
    rc, out = _run_demo(monkeypatch, lambda: 3, lambda: 0, _refused)
    assert rc == 0, out
    assert "part 3 cannot run on this machine" in out and "Operation not permitted" in out
    assert "Traceback" not in out


def test_the_demo_goes_on_after_a_skipped_part(monkeypatch):
    ran = []
    rc, out = _run_demo(monkeypatch, _refused, lambda: ran.append(2) or 0,
                        lambda: ran.append(3) or GOOD)
    assert rc == 0 and ran == [2, 3] and "part 1 cannot run" in out


@pytest.mark.parametrize("part2, part3", [
    (lambda: 1, lambda: GOOD),  # errors through crosszone in the emulated workload
    (lambda: 0, lambda: {**GOOD, "crosszone": {"corrupted": 2, "misrouted": 0}}),
    (lambda: 0, lambda: (_ for _ in ()).throw(RuntimeError("unreadable counter"))),
])
def test_the_demo_fails_when_crosszone_fails(monkeypatch, part2, part3):
    rc, out = _run_demo(monkeypatch, lambda: 3, part2, part3)
    assert rc == 1 and "failed" in out and "Traceback" not in out


def test_run_part_reports_in_one_line() -> None:
    console = Console(record=True, width=300)
    assert demo_mod.run_part(console, "9", _refused) is None
    assert console.export_text().count("\n") == 1


@pytest.mark.parametrize("args, lab", [
    (["probe", "--config", "x.yaml"], False), (["agent", "--gateway", "gw-a"], False),
    (["controller"], False), (["emulate", "up"], True), (["bench", "migrate"], True),
    (["migrate", "status"], True), (["plan", "--demand", "2Tbps"], True), (["--help"], True),
    ([], True),
])
def test_a_product_daemon_starts_without_importing_the_lab(args, lab):
    """`crosszone probe`, `agent` and `controller` never import the lab (matplotlib, scapy: about
    1 s of CPU at every start); a command line that may need it gets it."""
    import subprocess
    import sys

    code = ("import sys; from crosszone import cli; cli.command(sys.argv[1:]); "
            "print(any(m.startswith('crosszone_lab') for m in sys.modules), "
            "'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(lab), str(lab)], (args, out)
