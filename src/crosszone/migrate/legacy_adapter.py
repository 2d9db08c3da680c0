"""The legacy gateways behind an adapter: the few actions a migration needs from them.

Legacy gateways are not crosszone's: they run another vendor's software, or FRR configured by
hand. A migration needs five things of them (`LegacyAdapter`):

- `set_weight(gateway, bandwidth_mbps)`: announce with the BGP link-bandwidth extended community
  (FRR's `set extcommunity bandwidth`, 1 to 25600 Mbps, the unit the crosszone gateways use),
  not drained;
- `drain(gateway)`: graceful shutdown (RFC 8326): the routes stay as backup, no traffic;
- `withdraw(gateway, prefixes=())`: stop announcing `prefixes` (the canary VPC's, while the
  canary runs), or every prefix the gateway announces when none are given (retirement);
- `restore(gateway, prefixes=())`: announce `prefixes` again (the canary is over), or, when none
  are given, go back to how the gateway was before the migration: every prefix announced, no
  link bandwidth, not drained (a rollback);
- `forwarded_packets(gateway)`: a counter of the packets it forwarded for the VPCs (the drain
  is over when it stands still; the migration driver also reads the traffic share from it);
- optional, `forwarded_bytes(gateway)`: the same counter's bytes. A kernel gateway forwards
  GRO-merged packets (a bulk TCP flow's 64 KiB aggregates count once) while the crosszone fast
  path counts every frame, so their packet counts are not comparable: on the emulator a
  legacy gateway's packets averaged 7.2 KB against 1.2 KB for the same traffic through a
  crosszone gateway, and a 50 % step read as 75 %. With this command on every legacy gateway
  the driver reads the traffic share in bytes (None: not configured, packets it is).

`set_weight` weighs what a gateway announces; a gateway withdrawn whole (retired by an earlier
migration) is announced again by `restore` with the prefixes named, which keeps its weight: a
migration back to the legacy gateways does `set_weight` then `restore(every prefix)` on each.

Two adapters:

- `CommandAdapter`: an operator-supplied command per action, run with the gateway's name (and
  the values: the bandwidth, or the prefixes) as its last arguments. An argv, never a shell
  string: a gateway named `a;reboot` is refused, and no argument is ever parsed by a shell.
  Each run has a timeout, after which the command's whole process group is killed; a failure
  raises `LegacyActionError` naming the action, the gateway, the exit status and the end of
  stderr. The emulator's legacy gateways use it with vtysh
  (`crosszone_lab.emulate.legacy_adapter_commands`).
- `NoActionAdapter`: changes nothing, for routers configured with `bgp bestpath bandwidth
  skip-missing` (docs/migrate.md, "Legacy gateways: the adapter"): once a crosszone gateway
  announces link bandwidth, the routers install only the paths that carry it, so all traffic
  moves at the first step and no intermediate weight exists. The other router settings cannot
  reach 100 % without an action on the legacy side (`default-weight-for-missing` keeps weight 1
  per legacy path; `ignore` and the default are plain ECMP), so the configuration refuses them
  with the reason. Reading a counter is no action: it may still have a `forwarded_packets`
  command.

The configuration is a mapping (`legacy.adapter` in a deployment file, migrate/
deployment_file.py; YAML read with the intent's strict dialect when it is a file of its own):

```yaml
kind: command
timeout_s: 10                 # per command (optional, 0.1 to 300)
commands:                     # every action, each a non-empty list of strings
  set_weight: [/usr/local/sbin/legacy-gw, set-weight]      # + GATEWAY MBPS
  drain: [/usr/local/sbin/legacy-gw, drain]                # + GATEWAY
  withdraw: [/usr/local/sbin/legacy-gw, withdraw]          # + GATEWAY [PREFIX...]
  restore: [/usr/local/sbin/legacy-gw, restore]            # + GATEWAY [PREFIX...]
  forwarded_packets: [/usr/local/sbin/legacy-gw, counter]  # + GATEWAY; prints an integer
  forwarded_bytes: [/usr/local/sbin/legacy-gw, bytes]      # optional; prints an integer
```

```yaml
kind: none
routers: skip-missing         # what the routers' `bgp bestpath bandwidth` is set to
commands:                     # optional: the counter only
  forwarded_packets: [/usr/local/sbin/legacy-gw, counter]
```
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from crosszone.intent import strict_yaml
from crosszone.intent.strict_yaml import StrictLoader

ACTIONS = ("set_weight", "drain", "withdraw", "restore", "forwarded_packets")
#: Actions a configuration may leave out (the module doc says what is read without them).
OPTIONAL = ("forwarded_bytes",)
#: FRR's `set extcommunity bandwidth` range (Mbps).
MIN_MBPS, MAX_MBPS = 1, 25600
DEFAULT_TIMEOUT_S = 10.0
#: Router settings of `bgp bestpath bandwidth` (FRR 8.4), plus `ecmp` for "not configured".
ROUTER_MODES = ("skip-missing", "default-weight-for-missing", "ignore", "ecmp")
#: Why a router mode cannot carry a no-action migration (FRR 8.4.4, bgpd/bgp_zebra.c and
#: bgp_mpath.c; docs/migrate.md).
WHY_NOT = {
    "default-weight-for-missing": (
        "each legacy path keeps next-hop weight 1 while the crosszone paths share 100 "
        "(bgp_zebra_use_nhop_weighted: BGP_ZEBRA_DEFAULT_NHOP_WEIGHT for a path without link "
        "bandwidth, bw * 100 / cum_bw for the others), so N legacy gateways keep N/(100+N) of "
        "the traffic and 100 % is never reached"),
    "ignore": "the routers ignore link bandwidth: plain ECMP over every gateway, whatever the "
              "weights",
    "ecmp": "without `bgp bestpath bandwidth`, a multipath set in which some paths lack link "
            "bandwidth is plain ECMP (bgp_path_info_mpath_chkwtd needs BGP_MP_LB_ALL)",
}
#: A gateway name as the commands receive it: no option-like or empty argument.
_GATEWAY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,62}")
#: How much of a failed command's stderr an error quotes.
STDERR_TAIL = 400


class LegacyConfigError(ValueError):
    """The adapter's configuration is not valid; the message names the key."""


class LegacyActionError(RuntimeError):
    """An action on a legacy gateway failed; the message names the action, the gateway and
    what went wrong (exit status, timeout, unreadable output)."""

    def __init__(self, action: str, gateway: str, why: str) -> None:
        super().__init__(f"legacy {action} on {gateway}: {why}")
        self.action, self.gateway, self.why = action, gateway, why


class LegacyAdapter(Protocol):
    """What a migration needs of the legacy gateways (module doc)."""

    def set_weight(self, gateway: str, bandwidth_mbps: int) -> None:
        """Weigh what the gateway announces with link bandwidth `bandwidth_mbps` (1 to
        25600), not drained (a withdrawn gateway stays withdrawn until `restore`)."""
        ...

    def drain(self, gateway: str) -> None:
        """Graceful shutdown: routes kept as backup, no traffic."""
        ...

    def withdraw(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Stop announcing `prefixes` (every prefix of the gateway when empty)."""
        ...

    def restore(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Announce `prefixes` again; when empty: every prefix, no link bandwidth, not
        drained, as before the migration."""
        ...

    def forwarded_packets(self, gateway: str) -> int:
        """Packets forwarded for the VPCs so far (a counter)."""
        ...

    def forwarded_bytes(self, gateway: str) -> int | None:
        """Bytes forwarded for the VPCs so far (a counter); None when not configured."""
        ...


def _check_gateway(action: str, gateway: str) -> None:
    if not isinstance(gateway, str) or not _GATEWAY.fullmatch(gateway):
        raise LegacyActionError(action, repr(gateway),
                                "not a gateway name (letters, digits, '.', '_', ':', '-'; "
                                "1 to 63, not starting with '-')")


def _prefixes(action: str, gateway: str, prefixes: Sequence[str]) -> list[str]:
    """The prefixes as the command receives them (normalised), each checked."""
    if isinstance(prefixes, (str, bytes)):  # a str is a Sequence[str] of its characters
        raise LegacyActionError(action, gateway, f"{prefixes!r}: give a list of prefixes")
    out = []
    for p in prefixes:
        try:
            if not isinstance(p, str):
                raise TypeError(p)
            out.append(str(ipaddress.ip_network(p)))
        except (ValueError, TypeError):
            raise LegacyActionError(action, gateway, f"{p!r} is not a prefix (address/length, "
                                    "host bits zero)") from None
    return out


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the command's process group and reap it (its pipes are closed by then)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


@dataclass(frozen=True)
class CommandAdapter:
    """An operator's command per action (module doc)."""

    commands: Mapping[str, tuple[str, ...]]
    timeout_s: float = DEFAULT_TIMEOUT_S
    env: Mapping[str, str] | None = None

    def _run(self, action: str, gateway: str, *values: str) -> str:
        _check_gateway(action, gateway)
        argv = [*self.commands[action], gateway, *values]
        try:
            # A session of its own: at the timeout the whole group is killed, so a child the
            # command left behind cannot hold its pipes open and hang the migration.
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    env=None if self.env is None else dict(self.env))
        except OSError as exc:
            raise LegacyActionError(action, gateway, f"cannot run {argv[0]}: {exc}") from None
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise LegacyActionError(action, gateway,
                                    f"{argv[0]} did not finish within {self.timeout_s:g} s "
                                    "(killed)") from None
        if proc.returncode != 0:
            status = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
                      else f"exit status {proc.returncode}")
            tail = err.decode(errors="replace").strip()[-STDERR_TAIL:]
            raise LegacyActionError(action, gateway, f"{argv[0]} failed ({status})"
                                    + (f": {tail}" if tail else ""))
        return out.decode(errors="replace")

    def set_weight(self, gateway: str, bandwidth_mbps: int) -> None:
        """Run the set_weight command with GATEWAY MBPS."""
        mbps = bandwidth_mbps
        if isinstance(mbps, bool) or not isinstance(mbps, int) or not (
                MIN_MBPS <= mbps <= MAX_MBPS):
            raise LegacyActionError("set_weight", gateway,
                                    f"{mbps!r} Mbps: must be an integer from {MIN_MBPS} to "
                                    f"{MAX_MBPS}")
        self._run("set_weight", gateway, str(mbps))

    def drain(self, gateway: str) -> None:
        """Run the drain command with GATEWAY."""
        self._run("drain", gateway)

    def withdraw(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Run the withdraw command with GATEWAY [PREFIX...]."""
        self._run("withdraw", gateway, *_prefixes("withdraw", gateway, prefixes))

    def restore(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Run the restore command with GATEWAY [PREFIX...]."""
        self._run("restore", gateway, *_prefixes("restore", gateway, prefixes))

    def forwarded_packets(self, gateway: str) -> int:
        """Run the forwarded_packets command with GATEWAY; it must print one decimal integer
        (a failed read is an error, never a zero: a drain would take it for silence)."""
        return self._counter("forwarded_packets", gateway)

    def forwarded_bytes(self, gateway: str) -> int | None:
        """Run the forwarded_bytes command with GATEWAY (one decimal integer), or None when
        none is configured."""
        if "forwarded_bytes" not in self.commands:
            return None
        return self._counter("forwarded_bytes", gateway)

    def _counter(self, action: str, gateway: str) -> int:
        out = self._run(action, gateway).strip()
        if not re.fullmatch(r"[0-9]{1,20}", out):
            raise LegacyActionError(action, gateway,
                                    f"printed {out[:60]!r}, not one decimal integer")
        return int(out)


@dataclass(frozen=True)
class NoActionAdapter:
    """Changes nothing on the legacy gateways: the routers' `bgp bestpath bandwidth
    skip-missing` does the move (module doc). Only a plan whose every step is 100 % is honest
    with it (`plan_problems`). `counter`, when configured, reads the forwarded packets."""

    routers: str = "skip-missing"
    counter: CommandAdapter | None = None

    def set_weight(self, gateway: str, bandwidth_mbps: int) -> None:
        """Nothing: the crosszone gateways' link bandwidth alone moves the traffic."""

    def drain(self, gateway: str) -> None:
        """Nothing: with skip-missing the routers already send the gateway nothing."""

    def withdraw(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Nothing: the operator withdraws or switches off the legacy gateway."""

    def restore(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Nothing: once the crosszone gateways stop announcing link bandwidth (or anything),
        the routers go back to plain ECMP over the legacy paths."""

    def forwarded_packets(self, gateway: str) -> int:
        """The counter command's reading; without one, LegacyActionError (a drain or a traffic
        share cannot be judged from a counter that does not exist, and must not read zero)."""
        if self.counter is None:
            _check_gateway("forwarded_packets", gateway)
            raise LegacyActionError("forwarded_packets", gateway,
                                    "adapter none has no counter: configure "
                                    "commands.forwarded_packets")
        return self.counter.forwarded_packets(gateway)

    def forwarded_bytes(self, gateway: str) -> int | None:
        """The bytes counter command's reading, None without one."""
        return None if self.counter is None else self.counter.forwarded_bytes(gateway)

    @staticmethod
    def plan_problems(steps: Sequence[int]) -> list[str]:
        """Why a plan's steps do not fit this adapter (empty: they do). Under skip-missing any
        weight from 1 to 99 % on the crosszone gateways puts all traffic on them."""
        partial = [s for s in steps if 0 < s < 100]
        if not partial:
            return []
        listed = ", ".join(f"{s} %" for s in partial)
        return [f"legacy adapter none (routers skip-missing): steps {listed} would each move "
                "all traffic to the new gateways at once; plan the steps as 100"]


def from_config(raw: object, where: str = "legacy.adapter"
                ) -> CommandAdapter | NoActionAdapter:
    """An adapter from its configuration mapping (module doc); LegacyConfigError naming the
    key otherwise."""
    if not isinstance(raw, Mapping):
        raise LegacyConfigError(f"{where}: not a mapping (kind, commands, ...)")
    kind = raw.get("kind")
    if kind not in ("command", "none"):
        raise LegacyConfigError(f"{where}.kind: {kind!r} is not command or none")
    allowed = {"kind", "timeout_s", "commands"} | ({"routers"} if kind == "none" else set())
    _only(raw, allowed, where)
    raw_timeout = raw.get("timeout_s", DEFAULT_TIMEOUT_S)
    timeout = _decimal(raw_timeout)
    if timeout is None or not 0.1 <= timeout <= 300:
        raise LegacyConfigError(f"{where}.timeout_s: {raw_timeout!r} is not a decimal number "
                                "of seconds from 0.1 to 300")
    if kind == "none":
        routers = raw.get("routers")
        if routers not in ROUTER_MODES:
            raise LegacyConfigError(f"{where}.routers: {routers!r} is not one of "
                                    f"{', '.join(ROUTER_MODES)} (the routers' `bgp bestpath "
                                    "bandwidth`, ecmp when it is not set)")
        if routers != "skip-missing":
            raise LegacyConfigError(f"{where}.routers: {routers}: kind none cannot move all "
                                    f"traffic to the new gateways: {WHY_NOT[routers]}; use "
                                    "kind command")
        counter = None
        if "commands" in raw:
            commands = _commands(raw["commands"], ("forwarded_packets",), where,
                                 OPTIONAL)
            counter = CommandAdapter(commands, timeout)
        return NoActionAdapter(routers, counter)
    if "commands" not in raw:
        raise LegacyConfigError(f"{where}.commands: missing (a command for each of "
                                f"{', '.join(ACTIONS)})")
    return CommandAdapter(_commands(raw["commands"], ACTIONS, where, OPTIONAL), timeout)


def _commands(raw: object, actions: Sequence[str], where: str, optional: Sequence[str] = ()
              ) -> dict[str, tuple[str, ...]]:
    """A command for each of `actions`, maybe one for each of `optional`, nothing else."""
    if not isinstance(raw, Mapping):
        raise LegacyConfigError(f"{where}.commands: not a mapping of action to command")
    _only(raw, set(actions) | set(optional), f"{where}.commands")
    missing = [a for a in actions if a not in raw]
    if missing:
        raise LegacyConfigError(f"{where}.commands: no command for {', '.join(missing)} "
                                "(every action needs one)")
    return {a: _argv(raw[a], f"{where}.commands.{a}") for a in (*actions, *optional)
            if a in raw}


def _decimal(value: object) -> float | None:
    """An integer, or a plain decimal fraction (which the strict loader leaves a string:
    `2.5`, not `.5`, `1e3` or `.inf`); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", value):
        return float(value)
    return None


def _only(d: Mapping[object, object], allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise LegacyConfigError(f"{where}: unknown key(s) {', '.join(unknown)} "
                                f"(allowed: {', '.join(sorted(allowed))})")


def _argv(value: object, where: str) -> tuple[str, ...]:
    """A command: a non-empty list of non-empty strings without NUL, the program an absolute
    path or a name found on PATH at run time (a shell string is refused: it would be one
    program name with spaces in it)."""
    if isinstance(value, str):
        raise LegacyConfigError(f"{where}: {value!r} is a string; write the command as a list "
                                "of arguments ([program, arg, ...]), it is never run by a shell")
    if not isinstance(value, list) or not value:
        raise LegacyConfigError(f"{where}: not a non-empty list of arguments")
    for i, arg in enumerate(value):
        if not isinstance(arg, str) or not arg or "\0" in arg:
            raise LegacyConfigError(f"{where}[{i}]: {arg!r} is not a non-empty string")
    program = value[0]
    if "/" in program and not os.path.isabs(program):
        raise LegacyConfigError(f"{where}[0]: {program!r}: a program path must be absolute "
                                "(or a bare name looked up on PATH)")
    if any(c.isspace() for c in program):
        raise LegacyConfigError(f"{where}[0]: {program!r} contains white space: write each "
                                "argument as its own list item")
    return tuple(value)


def loads(text: str, source: str = "<legacy adapter>") -> CommandAdapter | NoActionAdapter:
    """An adapter from a YAML document that is its configuration mapping (strict dialect:
    unknown and duplicate keys, YAML 1.1 numbers and booleans are errors)."""
    try:
        raw = strict_yaml.load(text, source, StrictLoader)
    except strict_yaml.YamlInputError as exc:
        raise LegacyConfigError(str(exc)) from None
    return from_config(raw, source)


def load(path: Path) -> CommandAdapter | NoActionAdapter:
    """`loads` of a file."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise LegacyConfigError(f"{path}: cannot be read: {exc}") from None
    return loads(text, str(path))
