"""Failures of one gateway, and their repair, as operations on the emulated deployment.

Each event is a pair (inject, repair) of operation lists, so the failover bench and the tests
inject exactly the same failure. The events are those an operator meets:

- `compute_link_down`, `storage_link_down`: one of the gateway's links loses carrier (the router on
  that link evicts the next hop at once; the other router learns it from BGP).
- `silent`: links up, every received packet dropped (an XDP drop-all on both ports): only BFD
  sees it.
- `bgpd_killed`, `bfdd_killed`: the gateway's routing daemon dies (kill -9); the repair starts it
  again the way `emulate up` does (a crosszone gateway's bgpd reads the configuration its agent
  keeps in the same file; the agent puts back bfdd's profile at its next check).
- `withdraw`: planned maintenance, the gateway is taken out of the traffic with its sessions up;
  the repair brings it back. A legacy gateway withdraws its prefixes itself. A crosszone
  gateway's announcements are its agent's, from the intent, and the product has no per-gateway
  withdraw yet (issue 23, deliverable 2): the routers refuse its routes instead
  (deploy.take_out_ops), which is what they see of a withdrawal too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crosszone.linux.netns import Cmd, Op
from crosszone_lab.emulate import crosszone_gateway as xgw
from crosszone_lab.emulate import deploy, frr
from crosszone_lab.emulate.topology import Gateway, Plan

EVENTS = ("compute_link_down", "storage_link_down", "silent", "bgpd_killed", "bfdd_killed",
          "withdraw")
#: Events after which the gateway must come back by itself once repaired (BGP re-establishes).
FAILURES = EVENTS[:-1]
PORTS = (frr.GATEWAY_COMPUTE_DEV, frr.GATEWAY_STORAGE_DEV)


@dataclass(frozen=True)
class Event:
    """What to run to inject an event on one gateway, and what to run to repair it."""

    name: str
    inject: list[Op]
    repair: list[Op]


def _link(gw: Gateway, dev: str, state: str) -> Cmd:
    return Cmd(("ip", "-n", gw.ns, "link", "set", dev, state))


def _kill(gw: Gateway, daemon: str) -> Cmd:
    pidfile = frr.frr_dir(gw.ns) / f"{daemon}.pid"
    # `sh -c` reads the pidfile at run time: the daemon's pid changes with every restart.
    return Cmd(("sh", "-c", f"kill -9 $(cat {pidfile})"))


def _silent(gw: Gateway, drop_obj: Path) -> list[Op]:
    # -force replaces whatever runs there (on a crosszone gateway, the fast path itself)
    return [Cmd(("ip", "-n", gw.ns, "-force", "link", "set", "dev", dev, "xdp", "obj",
                 str(drop_obj), "sec", "xdp.frags")) for dev in PORTS]


def _unsilence(gw: Gateway) -> list[Op]:
    if gw.kind == "crosszone":
        # Attach the fast path over the drop-all program (the kernel replaces it atomically):
        # taking the drop-all off first would let BFD and BGP come back while nothing forwards.
        return [op for op in xgw.attach_ops(gw) if isinstance(op, Cmd)]
    return [Cmd(("ip", "-n", gw.ns, "link", "set", "dev", dev, "xdp", "off")) for dev in PORTS]


def _retry(op: Cmd, tries: int = 100) -> Cmd:
    """`op` retried every 0.1 s until it succeeds (a daemon just started accepts vtysh soon)."""
    loop = f'for i in $(seq {tries}); do "$@" && exit 0; sleep 0.1; done; exit 1'
    return Cmd(("sh", "-c", loop, "retry", *op.argv))


def event(p: Plan, gw: Gateway, name: str, drop_obj: Path, announcing: bool = True) -> Event:
    """The (inject, repair) operations of event `name` on gateway `gw` (`announcing`: whether
    it carries traffic, so that a restarted bgpd announces again)."""
    if name in ("compute_link_down", "storage_link_down"):
        dev = PORTS[0] if name.startswith("compute") else PORTS[1]
        return Event(name, [_link(gw, dev, "down")], [_link(gw, dev, "up")])
    if name == "silent":
        return Event(name, _silent(gw, drop_obj), _unsilence(gw))
    if name in ("bgpd_killed", "bfdd_killed"):
        daemon = name.removesuffix("_killed")
        by_agent = deploy.routing_by_agent(gw)
        repair: list[Op] = [frr.daemon_start_op(gw.ns, daemon, log_arg=by_agent)]
        if daemon == "bgpd" and announcing and not by_agent:
            # The config file holds the announcements of `emulate up`; a switch since then
            # changed them through vtysh only, as an operator would before saving. (An agent
            # keeps its whole configuration in the file: nothing to add.)
            repair += [_retry(op) for op in frr.announce_ops(p, gw) if isinstance(op, Cmd)]
        return Event(name, [_kill(gw, daemon)], repair)
    if name == "withdraw":
        return Event(name, deploy.take_out_ops(p, gw), deploy.take_in_ops(p, gw))
    raise ValueError(f"unknown event {name!r}: one of {', '.join(EVENTS)}")

