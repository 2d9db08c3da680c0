"""The routers' kernel routes over netlink: next-hop devices and weights, read in a millisecond.

A migration step has converged when both routers' kernels forward with the step's weights, and
`converge_ms` is measured to that instant, so the read must cost far less than the 100 ms it
measures: one netlink socket per router namespace (opened there with setns), a dump of its main
table per read, no `ip` process (about 10 ms each on a busy box, nine of them per poll).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from pyroute2 import IPRoute

from crosszone.linux.netns import in_netns

MAIN_TABLE = 254
RTNH_F_DEAD, RTNH_F_LINKDOWN = 1, 16


class RouterFib:
    """Weighted next hops of one router's kernel routes."""

    def __init__(self, ns: str) -> None:
        with in_netns(ns):
            self.ipr = IPRoute()
        self.names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in self.ipr.get_links()}

    def close(self) -> None:
        """Close the netlink socket."""
        self.ipr.close()

    def weights(self, prefixes: set[str]) -> dict[str, dict[str, int]]:
        """prefix -> {device: weight} for each of `prefixes` that has a live route."""
        out: dict[str, dict[str, int]] = {}
        fams = {socket.AF_INET6 if ":" in p else socket.AF_INET for p in prefixes}
        for fam in fams:
            for r in self.ipr.get_routes(family=fam, table=MAIN_TABLE):
                dst = r.get_attr("RTA_DST")
                if dst is None:
                    continue
                key = str(ipaddress.ip_network(f"{dst}/{r['dst_len']}", strict=False))
                if key in prefixes:
                    out[key] = self._hops(r)
        return out

    def _hops(self, r: Any) -> dict[str, int]:
        hops = r.get_attr("RTA_MULTIPATH")
        if not hops:
            oif = r.get_attr("RTA_OIF")
            return {self.names.get(oif, str(oif)): 1} if r.get_attr("RTA_GATEWAY") else {}
        return {self.names.get(h["oif"], str(h["oif"])): h["hops"] + 1 for h in hops
                if not h["flags"] & (RTNH_F_DEAD | RTNH_F_LINKDOWN)}


def share(weights: dict[str, int], devices: set[str]) -> float:
    """Percent of the weight on `devices` (0 when the route has none)."""
    total = sum(weights.values())
    return 100.0 * sum(w for d, w in weights.items() if d in devices) / total if total else 0.0
