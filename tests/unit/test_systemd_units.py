"""The service units (packaging/systemd/): `systemd-analyze verify` passes on them with no
warning, and they keep the least privilege docs/deploy.md promises.

verify checks that ExecStart's binary exists, so it runs against a private root (--root) holding
the system's unit directory, the units installed as docs/deploy.md says, and a stand-in
/usr/local/bin/crosszone. All of it lives in pytest's temporary directory.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

from systemd_units import AGENT_UNIT, CONTROLLER_UNIT, capabilities, settings

pytestmark = pytest.mark.unit

SYSTEM_UNITS = Path("/usr/lib/systemd/system")


@functools.cache
def _cannot_verify() -> str:
    """Why systemd-analyze cannot run here ('' when it can): probed once."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return "systemd-analyze is not installed (Debian package systemd; make setup installs it)"
    if not (SYSTEM_UNITS / "sysinit.target").exists():
        return f"{SYSTEM_UNITS} has no sysinit.target: verify has no system units to resolve"
    done = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"systemd-analyze --version failed: {done.stderr.strip()}"
    return ""


def _verify(tmp_path: Path, *names: str) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "root"
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in (AGENT_UNIT, CONTROLLER_UNIT):
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
    binary = root / "usr/local/bin/crosszone"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}", *names],
                          capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.parametrize("name", ["crosszone-agent@gw-a.service", "crosszone-controller.service"])
def test_systemd_analyze_verify_passes(tmp_path: Path, name: str) -> None:
    why = _cannot_verify()
    if why:
        pytest.skip(why)
    done = _verify(tmp_path, name)
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), (
        done.stdout + done.stderr)


def test_verify_would_catch_a_mistake(tmp_path: Path) -> None:
    """The check itself: an unknown key is reported (verify still exits 0, so the test reads
    its output)."""
    why = _cannot_verify()
    if why:
        pytest.skip(why)
    bad = tmp_path / "units" / CONTROLLER_UNIT.name
    bad.parent.mkdir()
    bad.write_text(CONTROLLER_UNIT.read_text().replace("[Service]", "[Service]\nNoSuchKey=1"))
    done = subprocess.run(["systemd-analyze", "verify", str(bad)], capture_output=True,
                          text=True, check=False, timeout=120)
    assert "NoSuchKey" in done.stdout + done.stderr


def test_the_agent_unit_is_one_instance_per_gateway_with_least_privilege() -> None:
    s = settings(AGENT_UNIT)
    assert AGENT_UNIT.name.endswith("@.service")
    assert s["ExecStart"] == ["/usr/local/bin/crosszone agent --gateway %i"]
    assert sorted(capabilities(AGENT_UNIT)) == ["bpf", "net_admin", "perfmon"]
    assert s["AmbientCapabilities"] == s["CapabilityBoundingSet"]
    assert s["ProtectSystem"] == ["strict"] and s["NoNewPrivileges"] == ["yes"]
    assert s["Restart"] == ["on-failure"]
    # the state that lives as long as the pins survives a stop (a restart writes nothing)
    assert s["RuntimeDirectoryPreserve"] == ["yes"]
    assert "crosszone/agent" in s["RuntimeDirectory"][0].split()


def test_the_controller_unit_has_no_privilege_and_its_own_state() -> None:
    s = settings(CONTROLLER_UNIT)
    assert s["ExecStart"][0].startswith("/usr/local/bin/crosszone controller")
    assert s["DynamicUser"] == ["yes"] and s["CapabilityBoundingSet"] == [""]
    # the controller's default store is sqlite:///var/lib/crosszone/state.db
    assert s["StateDirectory"] == ["crosszone"] and s["ProtectSystem"] == ["strict"]
    assert s["Restart"] == ["on-failure"]
