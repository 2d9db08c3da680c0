"""Applying a rendered FRR configuration with FRR's own tools: only the difference, no restart.

`FrrReloadApplier.apply(config)` writes the configuration where FRR reads it at start (so a
restarted FRR comes back with it), asks `frr-reload.py --test` what differs from the running
configuration, and when something does, runs `frr-reload.py --reload`: FRR's script turns the
difference into `no ...` and configuration lines and feeds them to vtysh. bgpd is never
restarted, so unchanged sessions stay up (their uptime does not reset). A second `--test`
checks that FRR took everything; what it did not take is an error (`ApplyError`), reported by
the agent and tried again.

A route-map change (link bandwidth, graceful shutdown) reaches the routers after bgpd's
route-map delay timer (5 s) unless the routes are sent again, hence `clear bgp ... soft out`
after such a change (a soft clear re-sends routes; the session stays up).

The migration's steps change only a few lines (`routing_delta`): announcements (`network`),
the link bandwidth (`set extcommunity bandwidth`) and `bgp graceful-shutdown`, each inside a
block that stays. For those, when FRR runs the configuration this applier last brought it to,
the lines go to vtysh directly, in one run with the soft clear, and one `show running-config`
checks them: three frr-reload.py runs (each a Python start that parses the whole
configuration) took 1.5 s on an idle box and 10 to 40 s on a saturated one, one vtysh run takes
tens of milliseconds. Anything else, the first apply, the same lines again (the agent's drift
check) and a check that fails go through frr-reload.py.

Which FRR: `FrrTarget`. The defaults are the system's FRR (/etc/frr, vtysh's default sockets);
a per-namespace FRR (daemons started with `-N NAME`) is either `pathspace=NAME` (sockets under
/var/run/frr/NAME) or `vty_socket=DIR` when its daemons were given `--vty_socket DIR` (what the
emulator does). The code path is the same: only the options given to frr-reload.py and vtysh
differ. The control code (`routing_owner`) sees only the `Applier` protocol, so unit tests pass
a fake.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class ApplyError(RuntimeError):
    """FRR did not take the configuration (the message says what failed)."""


@dataclass(frozen=True)
class Changes:
    """What one apply changed: lines deleted and added (frr-reload's words), and the time."""

    deleted: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def empty(self) -> bool:
        """Nothing differed."""
        return not self.deleted and not self.added


class Applier(Protocol):
    """Brings the running FRR to a configuration; raises ApplyError when it cannot."""

    def apply(self, config: str) -> Changes:
        """Apply the difference between `config` and the running configuration."""
        ...


@dataclass(frozen=True)
class FrrTarget:
    """One FRR instance: the system's by default, or a per-namespace one (see the module
    docstring). config_file: where the rendered configuration is kept (default: frr.conf in
    the vty socket directory when one is given, else in confdir, or in confdir/NAME for a
    pathspace); it must be named frr.conf.

    Why the name: after a reload, frr-reload.py runs `vtysh write` unless the file it applied is
    <confdir>/frr.conf, and vtysh writes the running configuration to *its* configuration file,
    /etc/frr/frr.conf, whichever FRR it talks to: a per-namespace reload would overwrite the
    system's configuration. So frr-reload.py always gets the file's own directory as --confdir
    and the file as <that>/frr.conf: it writes nothing, and the agent's own write of the file
    is what persists the configuration."""

    pathspace: str | None = None
    vty_socket: Path | None = None
    config_file: Path | None = None
    confdir: Path = Path("/etc/frr")
    bindir: Path = Path("/usr/bin")
    rundir: Path = Path("/var/run/frr")
    reload_script: Path = Path("/usr/lib/frr/frr-reload.py")

    def __post_init__(self) -> None:
        if self.conf.name != "frr.conf":
            raise ValueError(f"the FRR configuration file must be named frr.conf, not "
                             f"{self.conf.name} (see FrrTarget)")

    @property
    def conf(self) -> Path:
        """The configuration file this target keeps."""
        if self.config_file is not None:
            return self.config_file
        if self.vty_socket is not None:
            # an instance with its own socket directory keeps its files there (the emulator's
            # start file is DIR/frr.conf): never the system's /etc/frr/frr.conf by default
            return self.vty_socket / "frr.conf"
        return self.confdir / (self.pathspace or "") / "frr.conf"

    def _where(self) -> list[str]:
        # vtysh joins -N's name onto --vty_socket's directory: with an explicit socket
        # directory (already per namespace) the name must not be given again
        if self.vty_socket is not None:
            return ["--vty_socket", str(self.vty_socket)]
        return ["-N", self.pathspace] if self.pathspace else []

    @property
    def sockets(self) -> Path:
        """The directory of the daemons' vty sockets (bgpd.vty, ...)."""
        if self.vty_socket is not None:
            return self.vty_socket
        return Path("/var/run/frr") / (self.pathspace or "")

    def vtysh(self) -> list[str]:
        """The vtysh argv prefix that reaches this instance."""
        return [str(self.bindir / "vtysh"), *self._where()]

    def reload_argv(self, mode: str) -> list[str]:
        """frr-reload.py in `mode` ("--test" or "--reload") for this target's file (its
        directory as --confdir: see the class docstring)."""
        return [sys.executable, str(self.reload_script), mode, "--stdout",
                "--bindir", str(self.bindir), "--confdir", str(self.conf.parent),
                "--rundir", str(self.rundir), *self._where(), str(self.conf)]


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run(argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run a command, output captured (never raises for its exit status)."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          check=False)


def parse_test_output(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(lines to delete, lines to add) from `frr-reload.py --test` output."""
    out: dict[str, list[str]] = {"del": [], "add": []}
    section: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if line == "Lines To Delete":
            section = "del"
        elif line == "Lines To Add":
            section = "add"
        elif section and line and not set(line) <= {"="}:
            out[section].append(line)
    return tuple(out["del"]), tuple(out["add"])


#: Lines whose change alters what routes carry, not which routes exist: FRR applies them only
#: when the routes are sent again.
_RESEND = ("set extcommunity bandwidth", "bgp graceful-shutdown", "route-map ", "match ")
#: Lines the direct path may add or remove (inside blocks that exist before and after).
_DIRECT = ("network ", "set extcommunity bandwidth ", "bgp graceful-shutdown")
#: Lines that close a block or separate them (not configuration).
_CLOSERS = ("!", "exit", "exit-address-family", "exit-vrf", "end")

Line = tuple[tuple[str, ...], str]  # (the blocks it is in, outermost first; the line)


def _direct_line(line: str) -> bool:
    """A line the direct path may change: `_DIRECT`'s, or a neighbour shut or opened again
    (the fast path's fail-closed, routing_owner.fail_closed)."""
    words = line.split()
    return line.startswith(_DIRECT) or (len(words) == 3 and words[0] == "neighbor"
                                        and words[2] == "shutdown")


def config_lines(text: str) -> set[Line]:
    """Every configuration line of an FRR configuration with the blocks it is in, by
    indentation (as FRR writes its running configuration and the renderer writes files)."""
    out: set[Line] = set()
    stack: list[tuple[int, str]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        body = line.strip()
        if not body or body in _CLOSERS:
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        out.add((tuple(h for _, h in stack), body))
        stack.append((indent, body))
    return out


@dataclass(frozen=True)
class Delta:
    """Lines to remove and to add, each with its blocks (routing_delta)."""

    removed: tuple[Line, ...]
    added: tuple[Line, ...]

    def commands(self) -> list[str]:
        """vtysh commands that make the change: route-maps first (new announcements leave
        with their weight), then graceful shutdown, additions, removals; a replaced `set`
        needs no `no` (a route-map clause holds one value per set)."""
        replaced = {(ctx, " ".join(line.split()[:-1])) for ctx, line in self.added
                    if line.startswith("set ")}

        def rank(item: tuple[str, Line]) -> tuple[int, str, tuple[str, ...], str]:
            verb, (ctx, line) = item
            first = 0 if line.startswith("set ") else 1 if "graceful" in line else 2
            return (first, verb, ctx, line)
        todo = [("add", x) for x in self.added] + [
            ("no", x) for x in self.removed
            if not (x[1].startswith("set ") and (x[0], " ".join(x[1].split()[:-1])) in replaced)]
        cmds: list[str] = []
        for verb, (ctx, line) in sorted(todo, key=rank):
            cmds += ["configure terminal", *ctx, line if verb == "add" else "no " + line, "end"]
        return cmds


def routing_delta(old: str, new: str) -> Delta | None:
    """The difference between two configurations when it is made only of `_DIRECT` lines in
    blocks both have (a migration step's); None otherwise."""
    a, b = config_lines(old), config_lines(new)
    removed, added = a - b, b - a
    blocks_a = {ctx + (line,) for ctx, line in a}
    blocks_b = {ctx + (line,) for ctx, line in b}
    for ctx, line in removed | added:
        if not _direct_line(line) or any(
                ctx[:i + 1] not in blocks_a or ctx[:i + 1] not in blocks_b
                for i in range(len(ctx))):
            return None
    return Delta(tuple(sorted(removed)), tuple(sorted(added)))


@dataclass
class FrrReloadApplier:
    """Applier over frr-reload.py and vtysh (see the module docstring)."""

    target: FrrTarget = field(default_factory=FrrTarget)
    runner: Runner = run
    #: the configuration FRR was last brought to and checked at (None: not yet)
    last: str | None = None
    #: applies made through vtysh directly, and those that fell back to frr-reload.py
    direct_applies: int = 0
    direct_fallbacks: int = 0

    def _write(self, config: str) -> Path:
        """Write config atomically where the target keeps it (owner and mode of the file it
        replaces, so FRR, which runs as user frr, can still read it)."""
        path = self.target.conf
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".frr.conf.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(config)
            if path.exists():
                st = path.stat()
                os.chmod(tmp, st.st_mode & 0o7777)
                os.chown(tmp, st.st_uid, st.st_gid)
            else:
                os.chmod(tmp, 0o640)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def diff(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What frr-reload.py would change to bring the running FRR to the file."""
        done = self.runner(self.target.reload_argv("--test"))
        if done.returncode != 0:
            raise ApplyError(f"frr-reload.py --test failed ({done.returncode}): "
                             f"{(done.stderr or done.stdout).strip()[-500:]}")
        return parse_test_output(done.stdout)

    def apply(self, config: str) -> Changes:
        """Write, then the direct path for a migration step's lines (module doc), else
        compare, reload the difference and check (ApplyError if FRR did not take it)."""
        t0 = time.monotonic()
        self.target.rundir.mkdir(parents=True, exist_ok=True)
        self._write(config)
        delta = routing_delta(self.last, config) if self.last is not None else None
        if delta is not None and (delta.removed or delta.added):  # no change: a drift check
            if self._direct(delta):
                self.last = config
                self.direct_applies += 1
                return Changes(tuple(_show(x) for x in delta.removed),
                               tuple(_show(x) for x in delta.added), time.monotonic() - t0)
            self.direct_fallbacks += 1
        self.last = None
        changes = self._reload(t0)
        self.last = config
        return changes

    def _direct(self, delta: Delta) -> bool:
        """Send the delta's commands (and the soft clear) in one vtysh run; True when the
        running configuration then has every added line and none of the removed ones."""
        cmds = delta.commands()
        if any(line.startswith(_RESEND) for _, line in delta.removed + delta.added):
            cmds += ["clear bgp ipv4 unicast * soft out", "clear bgp ipv6 unicast * soft out"]
        argv = [*self.target.vtysh()]
        for c in cmds:
            argv += ["-c", c]
        self.runner(argv)
        running = self.show("show running-config")
        if running is None:
            return False
        now = config_lines(running)
        return all(x in now for x in delta.added) and not any(x in now for x in delta.removed)

    def _reload(self, t0: float) -> Changes:
        """frr-reload.py: compare, reload the difference, check."""
        deleted, added = self.diff()
        if not deleted and not added:
            return Changes(seconds=time.monotonic() - t0)
        done = self.runner(self.target.reload_argv("--reload"))
        left_del, left_add = self.diff()
        if left_del or left_add:
            raise ApplyError(
                f"FRR did not take the configuration (frr-reload exit {done.returncode}); "
                f"still to delete: {list(left_del)[:5]}, to add: {list(left_add)[:5]}; "
                f"{(done.stdout + done.stderr).strip()[-300:]}")
        if any(x.strip().removeprefix("no ").startswith(_RESEND) for x in deleted + added):
            self.soft_out()
        return Changes(deleted, added, time.monotonic() - t0)

    def soft_out(self) -> None:
        """Send every session's routes again (the session stays up)."""
        self.runner([*self.target.vtysh(), "-c", "clear bgp ipv4 unicast * soft out",
                     "-c", "clear bgp ipv6 unicast * soft out"])

    def show(self, command: str) -> str | None:
        """Output of one show command (None when vtysh failed)."""
        done = self.runner([*self.target.vtysh(), "-c", command])
        return done.stdout if done.returncode == 0 else None


def _show(x: Line) -> str:
    """A line with its blocks, as the agent logs and reports changes."""
    return " / ".join((*x[0], x[1]))
