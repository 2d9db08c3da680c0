"""The emulator's legacy gateways, driven through the product's command adapter.

`crosszone.migrate.legacy_adapter.CommandAdapter` runs one operator command per action with the
gateway's name (and a value) as its last arguments. For the emulated legacy gateways (FRR in a
namespace each) those commands are this module:

    python -m crosszone_lab.emulate.legacy_adapter_commands [--topology FILE] [--vtysh PATH]
        [--ip PATH] ACTION GATEWAY [VALUE...]

    set-weight GATEWAY MBPS        announce with link bandwidth MBPS, graceful shutdown off
    drain GATEWAY                  graceful shutdown, no link bandwidth
    withdraw GATEWAY [PREFIX...]   stop announcing PREFIX... (every prefix when none is given)
    restore GATEWAY [PREFIX...]    announce PREFIX... again; with none: every prefix, no link
                                   bandwidth, no graceful shutdown (as before the migration)
    forwarded-packets GATEWAY      print the nftables `forwarded` counters (both families)
    forwarded-bytes GATEWAY        print their bytes (the optional forwarded_bytes action)

`adapter_section()` gives the configuration section that points the adapter here. The
gateway is looked up in the running deployment (or in `--topology` when given: the unit tests
run without one); only legacy gateways are accepted, crosszone gateways are their agents'.
The bgpd commands are the emulator's own (`frr.weight_commands`, `frr.prefix_commands`), sent
with one vtysh run per action; a failed vtysh ends this command with its exit status and its
stderr, which the adapter reports with the action and the gateway.
"""

from __future__ import annotations

import argparse
import ipaddress
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from crosszone.migrate.legacy_adapter import LegacyActionError
from crosszone_lab.emulate import frr, legacy_gateway, topology
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.kinds import DeployError

MODULE = "crosszone_lab.emulate.legacy_adapter_commands"
#: The adapter's actions (legacy_adapter.ACTIONS) and this module's sub-command for each.
SUBCOMMANDS = {"set_weight": "set-weight", "drain": "drain", "withdraw": "withdraw",
               "restore": "restore", "forwarded_packets": "forwarded-packets",
               "forwarded_bytes": "forwarded-bytes"}
#: The counters' sub-commands, and what each prints from `nft -j list counters`.
COUNTERS = {"forwarded-packets": legacy_gateway.forwarded_packets,
            "forwarded-bytes": legacy_gateway.forwarded_bytes}


def adapter_section(topology_file: Path | None = None, vtysh: str | None = None,
                    ip: str | None = None, timeout_s: float = 10.0) -> dict[str, object]:
    """The adapter configuration (`legacy.adapter` of a deployment file) that drives the
    emulator's legacy gateways through this module (for legacy_adapter.from_config)."""
    base = [sys.executable, "-m", MODULE]
    if topology_file is not None:
        base += ["--topology", str(topology_file)]
    if vtysh is not None:
        base += ["--vtysh", vtysh]
    if ip is not None:
        base += ["--ip", ip]
    return {"kind": "command", "timeout_s": timeout_s,
            "commands": {a: [*base, sub] for a, sub in SUBCOMMANDS.items()}}


def _plan(topology_file: Path | None) -> topology.Plan:
    if topology_file is not None:
        return topology.plan(topology.load(topology_file))
    state = st.load()
    if state is None:
        raise DeployError("no deployment: run `crosszone emulate up` first (or give --topology)")
    return topology.plan(topology.parse(state.spec, source=str(st.STATE_FILE)))


def _gateway(p: topology.Plan, name: str) -> topology.Gateway:
    gw = next((g for g in p.gateways if g.name == name), None)
    if gw is None:
        raise DeployError(f"no gateway {name!r} in the deployment "
                          f"({', '.join(g.name for g in p.gateways)})")
    if gw.kind != legacy_gateway.KIND.name:
        raise DeployError(f"{name} is a {gw.kind} gateway: only legacy gateways are driven "
                          "through the legacy adapter")
    return gw


def _prefixes(p: topology.Plan, given: Sequence[str]) -> tuple[list[str], list[str]]:
    """(to compute, to storage) of the gateway's prefixes, restricted to `given` if any."""
    to_compute, to_storage = frr.gateway_prefixes(p)
    if not given:
        return to_compute, to_storage
    known = set(to_compute) | set(to_storage)
    wanted = []
    for x in given:
        try:
            net = str(ipaddress.ip_network(x))
        except ValueError:
            raise DeployError(f"{x!r} is not a prefix") from None
        if net not in known:
            raise DeployError(f"{net} is not a prefix the legacy gateways announce "
                              f"({', '.join(sorted(known))})")
        wanted.append(net)
    return ([x for x in to_compute if x in wanted], [x for x in to_storage if x in wanted])


def bgpd_commands(p: topology.Plan, action: str, values: Sequence[str]) -> tuple[list[str], bool]:
    """(vtysh commands, whether vtysh's exit status counts) of one action."""
    _, to_storage = frr.gateway_prefixes(p)
    v6 = any(":" in x for x in to_storage)
    if action == "set-weight":
        if len(values) != 1 or not values[0].isdigit():
            raise DeployError(f"set-weight takes one value, the link bandwidth in Mbps: {values}")
        mbps = int(values[0])
        if not 1 <= mbps <= 25600:
            raise DeployError(f"link bandwidth {mbps} Mbps: FRR takes 1 to 25600")
        return frr.weight_commands(mbps, False, v6), True
    if action == "drain":
        if values:
            raise DeployError(f"drain takes no value: {values}")
        return frr.weight_commands(None, True, v6), True
    if action == "withdraw":
        # `no network X` fails when X is not configured: withdrawing twice is fine, and the
        # migration verifies the outcome in what the routers and gateways report anyway.
        return frr.prefix_commands(*_prefixes(p, values), negate=True), False
    if action == "restore":
        cmds = [] if values else frr.weight_commands(None, False, v6)
        return cmds + frr.prefix_commands(*_prefixes(p, values), negate=False), True
    raise DeployError(f"unknown action {action!r}")


class ActionFailed(Exception):
    """An action failed: its message, and the exit status the command ends with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def run_action(p: topology.Plan, action: str, gateway: str, values: Sequence[str],
               vtysh: str = "vtysh", ip: str = "ip") -> str:
    """Run one action (a sub-command name) on a legacy gateway of `p`; what it prints (the
    counter for forwarded-packets, else ""). Raises ActionFailed."""
    try:
        gw = _gateway(p, gateway)
        if action in COUNTERS:
            if values:
                raise DeployError(f"{action} takes no value: {values}")
            out = subprocess.run([ip, "netns", "exec", gw.ns, "nft", "-j", "list", "counters"],
                                 capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise ActionFailed(f"nft in {gw.ns}: exit status {out.returncode}: "
                                   f"{out.stderr.strip()}", out.returncode)
            return str(COUNTERS[action](out.stdout))
        commands, checked = bgpd_commands(p, action, values)
        argv_ = [vtysh, *frr.vtysh(gw.ns, *commands).argv[1:]]
        done = subprocess.run(argv_, capture_output=True, text=True, check=False)
    except (DeployError, topology.TopologyError, OSError) as exc:
        raise ActionFailed(f"error: {exc}", 2) from None
    if done.returncode != 0 and checked:
        raise ActionFailed(f"vtysh in {gw.ns}: exit status {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-400:]}", done.returncode)
    return ""


class InProcessAdapter:
    """The same actions as the command adapter over this module, run in the caller's process.

    The emulator's migration uses it: a command per action is a Python interpreter that imports
    the emulator before it does anything, and on the emulator's saturated CPUs (the workload,
    the probe, every router) one such start took over the adapter's 10 s timeout, so a
    migration's parity could not even read the legacy counters. The command adapter drives the
    same functions (tests/integration/test_legacy_adapter_frr.py); what an operator's command
    does is theirs."""

    def __init__(self, topology_file: Path | None = None) -> None:
        self.topology_file = topology_file

    def _run(self, action: str, gateway: str, *values: str) -> str:
        try:
            return run_action(_plan(self.topology_file), SUBCOMMANDS[action], gateway, values)
        except (ActionFailed, DeployError, topology.TopologyError) as exc:
            raise LegacyActionError(action, gateway, str(exc)) from None

    def set_weight(self, gateway: str, bandwidth_mbps: int) -> None:
        """Announce with link bandwidth, not drained."""
        self._run("set_weight", gateway, str(int(bandwidth_mbps)))

    def drain(self, gateway: str) -> None:
        """Graceful shutdown."""
        self._run("drain", gateway)

    def withdraw(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Stop announcing `prefixes` (every prefix when empty)."""
        self._run("withdraw", gateway, *prefixes)

    def restore(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Announce again; with no prefixes, as before the migration."""
        self._run("restore", gateway, *prefixes)

    def forwarded_packets(self, gateway: str) -> int:
        """The nftables `forwarded` counters of the gateway."""
        return self._count("forwarded_packets", gateway)

    def forwarded_bytes(self, gateway: str) -> int:
        """Their bytes."""
        return self._count("forwarded_bytes", gateway)

    def _count(self, action: str, gateway: str) -> int:
        out = self._run(action, gateway).strip()
        if not out.isdigit():
            raise LegacyActionError(action, gateway, f"not a count: {out!r}")
        return int(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one action; 0 on success, else an error on stderr and a non-zero status."""
    ap = argparse.ArgumentParser(prog=MODULE, description=__doc__.split("\n")[0])
    ap.add_argument("--topology", type=Path, help="topology file (default: the deployment's)")
    ap.add_argument("--vtysh", default="vtysh", help="the vtysh program")
    ap.add_argument("--ip", default="ip", help="the ip program (counters: ip netns exec)")
    ap.add_argument("action", choices=sorted(SUBCOMMANDS.values()))
    ap.add_argument("gateway")
    ap.add_argument("values", nargs="*")
    args = ap.parse_args(argv)
    try:
        out = run_action(_plan(args.topology), args.action, args.gateway, args.values,
                         args.vtysh, args.ip)
    except (DeployError, topology.TopologyError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ActionFailed as exc:
        print(str(exc), file=sys.stderr)
        return exc.status
    if out:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
