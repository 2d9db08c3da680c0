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

from crosszone_lab.emulate import frr, legacy_gateway, topology
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.kinds import DeployError

MODULE = "crosszone_lab.emulate.legacy_adapter_commands"
#: The adapter's actions (legacy_adapter.ACTIONS) and this module's sub-command for each.
SUBCOMMANDS = {"set_weight": "set-weight", "drain": "drain", "withdraw": "withdraw",
               "restore": "restore", "forwarded_packets": "forwarded-packets"}


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
        p = _plan(args.topology)
        gw = _gateway(p, args.gateway)
        if args.action == "forwarded-packets":
            if args.values:
                raise DeployError(f"forwarded-packets takes no value: {args.values}")
            out = subprocess.run([args.ip, "netns", "exec", gw.ns, "nft", "-j", "list",
                                  "counters"], capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"nft in {gw.ns}: exit status {out.returncode}: {out.stderr.strip()}",
                      file=sys.stderr)
                return out.returncode
            print(legacy_gateway.forwarded_packets(out.stdout))
            return 0
        commands, checked = bgpd_commands(p, args.action, args.values)
        argv_ = [args.vtysh, *frr.vtysh(gw.ns, *commands).argv[1:]]
        done = subprocess.run(argv_, capture_output=True, text=True, check=False)
    except (DeployError, topology.TopologyError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if done.returncode != 0 and checked:
        print(f"vtysh in {gw.ns}: exit status {done.returncode}: "
              f"{(done.stderr or done.stdout).strip()[-400:]}", file=sys.stderr)
        return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
