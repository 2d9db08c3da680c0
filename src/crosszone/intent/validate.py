"""Cross-reference and capacity checks of an intent, all in one place.

Each check raises `InvalidIntentError` with `where` naming the object and field, as a path into
the YAML document (`("vpcs", 0, "vni")`); the loader turns that path into a line number.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from crosszone.abi import layout
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.schema import Intent, Vpc

Loc = tuple[Any, ...]


class IntentProblem(Exception):
    """A problem found by a check: a message and where it is."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def _unique(items: Iterable[Any], key: str, section: str) -> None:
    seen: dict[Any, int] = {}
    for i, item in enumerate(items):
        value = getattr(item, key)
        if value in seen:
            raise IntentProblem(
                (section, i, key), f"{value} is already used by {section}[{seen[value]}]"
            )
        seen[value] = i


def _by_family(vpc: Vpc, i: int) -> dict[int, ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out: dict[int, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
    for j, net in enumerate(vpc.prefixes):
        if net.version in out:
            raise IntentProblem(("vpcs", i, "prefixes", j), f"a second IPv{net.version} prefix")
        out[net.version] = net
    return out


def vpc_routes(intent: Intent, vpc: Vpc) -> list[tuple[Any, str, str | None, Loc]]:
    """The effective routes of a VPC: (prefix, action, pool, where it came from)."""
    pools = {p.name: (k, p) for k, p in enumerate(intent.storage_pools)}
    vi = intent.vpcs.index(vpc)
    out: list[tuple[Any, str, str | None, Loc]] = []
    for name in vpc.storage_pools:
        k, pool = pools[name]
        for m, net in enumerate(pool.prefixes):
            out.append((net, "forward", name, ("storage_pools", k, "prefixes", m)))
    for j, r in enumerate(vpc.routes):
        out.append((r.prefix, r.action, r.pool, ("vpcs", vi, "routes", j, "prefix")))
    return out


def check(intent: Intent) -> None:
    """Raise IntentProblem for the first cross-object problem of a schema-valid intent."""
    gw = intent.gateway
    _unique(gw.interfaces, "name", "gateway.interfaces")
    ifaces = {itf.name: itf for itf in gw.interfaces}
    compute = [i for i, itf in enumerate(gw.interfaces) if itf.role == "compute"]
    if len(compute) != 1:
        raise IntentProblem(
            ("gateway", "interfaces"), "exactly one interface must have role compute"
        )
    if gw.interfaces[compute[0]].next_hop_mac is None:
        raise IntentProblem(
            ("gateway", "interfaces", compute[0], "next_hop_mac"),
            "the compute interface needs next_hop_mac (the compute zone router)",
        )
    if len(gw.interfaces) > layout.CZ_MAX_PORTS:
        raise IntentProblem(("gateway", "interfaces"), f"more than {layout.CZ_MAX_PORTS} ports")

    _unique(intent.vpcs, "name", "vpcs")
    _unique(intent.vpcs, "vni", "vpcs")
    _unique(intent.storage_pools, "name", "storage_pools")
    _unique(intent.hosts, "name", "hosts")
    if len(intent.vpcs) > layout.CZ_MAX_VPCS:
        raise IntentProblem(
            ("vpcs",), f"{len(intent.vpcs)} VPCs; the tables hold {layout.CZ_MAX_VPCS}"
        )

    nexthops = 0
    for k, pool in enumerate(intent.storage_pools):
        _unique(pool.next_hops, "name", f"storage_pools[{k}].next_hops")
        for m, nh in enumerate(pool.next_hops):
            nexthops += 1
            if nh.interface not in ifaces:
                raise IntentProblem(
                    ("storage_pools", k, "next_hops", m, "interface"),
                    f"no gateway interface named {nh.interface!r}",
                )
    if nexthops > layout.CZ_MAX_NEXTHOPS:
        raise IntentProblem(
            ("storage_pools",), f"{nexthops} next hops; the tables hold {layout.CZ_MAX_NEXTHOPS}"
        )

    pool_names = {p.name for p in intent.storage_pools}
    storage_facing: list[tuple[Any, Loc]] = []
    spaces: dict[str, dict[int, Any]] = {}
    routes4 = routes6 = 0
    for i, vpc in enumerate(intent.vpcs):
        fam = _by_family(vpc, i)
        spaces[vpc.name] = fam
        if vpc.storage_facing == "identity":
            for net in fam.values():
                storage_facing.append((net, ("vpcs", i, "prefixes")))
        else:
            seen_sf: set[int] = set()
            for j, sf in enumerate(vpc.storage_facing):
                loc = ("vpcs", i, "storage_facing", j)
                own = fam.get(sf.version)
                if own is None or sf.version in seen_sf:
                    raise IntentProblem(loc, f"{sf} has no IPv{sf.version} VPC prefix to map 1:1")
                if sf.prefixlen != own.prefixlen:
                    raise IntentProblem(
                        loc, f"{sf} must have the length of the VPC prefix {own} (1:1 mapping)"
                    )
                seen_sf.add(sf.version)
                storage_facing.append((sf, loc))
            if seen_sf != set(fam):
                raise IntentProblem(
                    ("vpcs", i, "storage_facing"),
                    "one storage-facing prefix per VPC prefix is needed",
                )
        for j, name in enumerate(vpc.storage_pools):
            if name not in pool_names:
                raise IntentProblem(("vpcs", i, "storage_pools", j), f"no storage pool {name!r}")
        for j, r in enumerate(vpc.routes):
            loc = ("vpcs", i, "routes", j)
            if r.action == "forward" and r.pool is None:
                raise IntentProblem(loc + ("pool",), "a forward route needs a pool")
            if r.action != "forward" and r.pool is not None:
                raise IntentProblem(loc + ("pool",), f"a {r.action} route takes no pool")
            if r.pool is not None and r.pool not in pool_names:
                raise IntentProblem(loc + ("pool",), f"no storage pool {r.pool!r}")
        seen_routes: dict[Any, Loc] = {}
        plens: dict[int, set[int]] = {4: set(), 6: set()}
        for net, _action, _pool, loc in vpc_routes(intent, vpc):
            if net in seen_routes:
                raise IntentProblem(
                    loc,
                    f"route {net} of VPC {vpc.name} is also defined at "
                    f"{'.'.join(map(str, seen_routes[net]))}",
                )
            seen_routes[net] = loc
            plens[net.version].add(net.prefixlen)
            if net.version == 4:
                routes4 += 1
            else:
                routes6 += 1
        if len(plens[6]) > layout.CZ_MAX_PLENS6:
            raise IntentProblem(
                ("vpcs", i, "routes"),
                f"{len(plens[6])} distinct IPv6 prefix "
                f"lengths; the fast path handles {layout.CZ_MAX_PLENS6} per VPC",
            )
    if routes4 > layout.CZ_MAX_ROUTES4 or routes6 > layout.CZ_MAX_ROUTES6:
        raise IntentProblem(
            ("vpcs",),
            f"{routes4} IPv4 / {routes6} IPv6 routes; the tables hold "
            f"{layout.CZ_MAX_ROUTES4} / {layout.CZ_MAX_ROUTES6}",
        )

    # Replies are demultiplexed by storage-facing destination: those prefixes must be disjoint.
    # Prefixes are intervals; sorted by start, one overlaps an earlier one iff it starts before
    # the furthest end seen so far (n log n, so 4096 VPCs check in milliseconds).
    ordered = sorted(storage_facing, key=lambda s: (s[0].version, int(s[0].network_address)))
    last: tuple[Any, Loc] | None = None
    for net, loc in ordered:
        if (
            last is not None
            and last[0].version == net.version
            and (int(net.network_address) <= int(last[0].broadcast_address))
        ):
            raise IntentProblem(
                loc, f"{net} overlaps the storage-facing prefix {last[0]} ({format_loc(last[1])})"
            )
        if (
            last is None
            or last[0].version != net.version
            or (int(net.broadcast_address) > int(last[0].broadcast_address))
        ):
            last = (net, loc)

    seen_addr: dict[tuple[str, Any], int] = {}
    vpc_names = {v.name for v in intent.vpcs}
    if len(intent.hosts) > layout.CZ_MAX_HOSTS:
        raise IntentProblem(
            ("hosts",), f"{len(intent.hosts)} hosts; the tables hold {layout.CZ_MAX_HOSTS}"
        )
    for h, host in enumerate(intent.hosts):
        if host.vpc not in vpc_names:
            raise IntentProblem(("hosts", h, "vpc"), f"no VPC named {host.vpc!r}")
        fam = spaces[host.vpc]
        for j, addr in enumerate(host.addresses):
            loc = ("hosts", h, "addresses", j)
            space = fam.get(addr.version)
            if space is None or addr not in space:
                raise IntentProblem(loc, f"{addr} is outside every prefix of VPC {host.vpc}")
            if (host.vpc, addr) in seen_addr:
                raise IntentProblem(
                    loc, f"{addr} is already used by hosts[{seen_addr[(host.vpc, addr)]}]"
                )
            seen_addr[(host.vpc, addr)] = h


def as_error(problem: IntentProblem, path: str | None, line: int | None) -> InvalidIntentError:
    """Turn a problem into the project's error type."""
    return InvalidIntentError(problem.message, path=path, line=line, where=format_loc(problem.loc))


def format_loc(loc: Loc) -> str:
    """('vpcs', 0, 'vni') -> 'vpcs[0].vni'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
