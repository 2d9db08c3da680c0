"""Cross-reference and capacity checks of an intent, all in one place: the one checker.

Every intent, whatever its source (a version-2 file, a version-1 file migrated when it was read,
the controller's store objects, a route change), is a `Cluster` and is checked here by
`check_cluster`. Each check raises `IntentProblem` with the document path of the offending field
(`("vpcs", 0, "vni")`); the loader turns that path into file:line. Route sets are checked with
numpy (duplicates, overlap with the VPC's own space) so a million routes check in a fraction of a
second.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

import numpy as np

from crosszone.abi import layout
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.prefixes import PrefixSet, duplicates4, member_sorted, overlaps4
from crosszone.intent.schema import Cluster, Gateway, Vpc

Loc = tuple[Any, ...]


class IntentProblem(Exception):
    """A problem found by a check: a message and where it is."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def _unique(items: Iterable[Any], key: str, *section: Any) -> None:
    seen: dict[Any, int] = {}
    for i, item in enumerate(items):
        value = getattr(item, key)
        if value in seen:
            raise IntentProblem(section + (i, key),
                                f"{value} is already used by {format_loc(section)}[{seen[value]}]")
        seen[value] = i


def _by_family(vpc: Vpc, i: int) -> dict[int, ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out: dict[int, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
    for j, net in enumerate(vpc.prefixes):
        if net.version in out:
            raise IntentProblem(("vpcs", i, "prefixes", j), f"a second IPv{net.version} prefix")
        out[net.version] = net
    return out


def _check_gateway(gw: Gateway, g: int) -> None:
    base: Loc = ("gateways", g)
    _unique(gw.interfaces, "name", "gateways", g, "interfaces")
    compute = [i for i, itf in enumerate(gw.interfaces) if itf.role == "compute"]
    if len(compute) != 1:
        raise IntentProblem(base + ("interfaces",), "exactly one interface must have role compute")
    if gw.interfaces[compute[0]].next_hop_mac is None:
        raise IntentProblem(base + ("interfaces", compute[0], "next_hop_mac"),
                            "the compute interface needs next_hop_mac (the compute zone router)")
    if len(gw.interfaces) > layout.CZ_MAX_PORTS:
        raise IntentProblem(base + ("interfaces",), f"more than {layout.CZ_MAX_PORTS} ports")


def _check_storage_facing(found: list[tuple[Any, Loc]]) -> None:
    # Replies are demultiplexed by storage-facing destination: the prefixes must be disjoint.
    ordered = sorted(found, key=lambda s: (s[0].version, int(s[0].network_address)))
    last: tuple[Any, Loc] | None = None
    for net, loc in ordered:
        if last is not None and last[0].version == net.version and (
            int(net.network_address) <= int(last[0].broadcast_address)
        ):
            raise IntentProblem(loc, f"{net} overlaps the storage-facing prefix {last[0]} "
                                f"({format_loc(last[1])})")
        if last is None or last[0].version != net.version or (
            int(net.broadcast_address) > int(last[0].broadcast_address)
        ):
            last = (net, loc)


def _storage_sources(c: Cluster) -> list[tuple[PrefixSet, Any]]:
    """Every storage-zone destination the intent routes to: each pool's prefixes (loc), and the
    explicit routes of every VPC (a list of their locs, one per IPv4 then IPv6 prefix)."""
    out: list[tuple[PrefixSet, Any]] = [(p.prefixes, ("storage_pools", k, "prefixes"))
                                        for k, p in enumerate(c.storage_pools)]
    routes = [(r.prefix, ("vpcs", i, "routes", j, "prefix"))
              for i, v in enumerate(c.vpcs) for j, r in enumerate(v.routes)]
    if routes:
        ordered = [r for r in routes if r[0].version == 4] + [r for r in routes
                                                              if r[0].version == 6]
        out.append((PrefixSet.from_networks([n for n, _ in ordered]), [loc for _, loc in ordered]))
    return out


def _clash(net: Any, sf: Any, sf_loc: Loc, src: Any, k: int) -> IntentProblem:
    """sf (storage-facing) equals, holds or lies inside the k-th prefix of a storage source."""
    where = format_loc(src[k]) if isinstance(src, list) else f"in {format_loc(src)}"
    how = "is" if net == sf else ("covers" if net.subnet_of(sf) else "lies inside")
    return IntentProblem(sf_loc, f"storage-facing {sf} {how} the storage prefix {net} "
                         f"({where}): the gateway could not tell replies from storage traffic")


def _check_sf_vs_storage4(sfs: list[tuple[Any, Loc]], sources: list[tuple[PrefixSet, Any]]
                          ) -> None:
    """No IPv4 storage-facing prefix overlaps a storage prefix (numpy: pools of millions)."""
    if not sfs:
        return
    s0 = np.array([int(n.network_address) for n, _ in sfs], np.int64)
    s1 = np.array([int(n.broadcast_address) for n, _ in sfs], np.int64)
    splen = np.array([n.prefixlen for n, _ in sfs], np.int64)
    for pset, src in sources:
        if not len(pset.addr4):
            continue
        starts = np.sort(pset.addr4.astype(np.int64))
        # a storage prefix inside (or equal to) a storage-facing one starts within it
        i = np.minimum(np.searchsorted(starts, s0), len(starts) - 1)
        bad = starts[i] <= s1
        bad &= starts[i] >= s0
        # one that covers it is the storage-facing start masked to one of the pool's lengths
        keys = np.sort(pset.keys4())
        for plen in np.unique(pset.plen4).tolist():
            mask = (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF
            probe = (((s0 & mask).astype(np.uint64)) << np.uint64(8)) | np.uint64(plen)
            bad |= member_sorted(keys, probe) & (splen >= plen)
        if bad.any():
            n = int(np.flatnonzero(bad)[0])
            sf, loc = sfs[n]
            k = next(m for m, (a, p) in enumerate(zip(pset.addr4.tolist(), pset.plen4.tolist()))
                     if ipaddress.IPv4Network((a, p)).overlaps(sf))
            net = ipaddress.IPv4Network((int(pset.addr4[k]), int(pset.plen4[k])))
            raise _clash(net, sf, loc, src, k)


def _check_storage_facing_clashes(c: Cluster, sfs: list[tuple[Any, Loc]]) -> None:
    """Storage-facing prefixes (identity VPCs' own prefixes included) stay clear of storage
    destinations and of the gateways' own underlay addresses."""
    sources = _storage_sources(c)
    _check_sf_vs_storage4([s for s in sfs if s[0].version == 4], sources)
    sf6 = [s for s in sfs if s[0].version == 6]
    for pset, src in sources if sf6 else []:
        offset = len(pset.addr4) if isinstance(src, list) else 0
        for m, net6 in enumerate(pset.networks6()):
            for sf, loc in sf6:
                if net6.overlaps(sf):
                    raise _clash(net6, sf, loc, src, offset + m)
    # The fast path takes a packet to a storage-facing address for a reply to a VPC host: BGP,
    # BFD or VXLAN to one of the gateway's own addresses there would be dropped as unknown host.
    own: list[tuple[Any, Loc, str]] = []
    for g, gw in enumerate(c.gateways):
        own.append((gw.vtep, ("gateways", g, "vtep"), "the gateway VTEP"))
        if gw.bgp is not None:
            own.append((gw.bgp.router_id, ("gateways", g, "bgp", "router_id"), "the router id"))
            own += [(p.address, ("gateways", g, "bgp", "peers", q, "address"), "a BGP peer")
                    for q, p in enumerate(gw.bgp.peers)]
    for sf, loc in sfs:
        for addr, where, what in own:
            if addr in sf:
                raise IntentProblem(loc, f"storage-facing {sf} covers {what} {addr} "
                                    f"({format_loc(where)}): the fast path would drop its "
                                    "traffic as a reply to an unknown host")


def _route_sets(c: Cluster, i: int) -> list[tuple[PrefixSet, Loc]]:
    """Every route source of VPC i: its pools' prefix sets and its explicit routes."""
    vpc = c.vpcs[i]
    pools = {p.name: (k, p) for k, p in enumerate(c.storage_pools)}
    out = [(pools[n][1].prefixes, ("storage_pools", pools[n][0], "prefixes"))
           for n in vpc.storage_pools]
    if vpc.routes:
        out.append((PrefixSet.from_networks([r.prefix for r in vpc.routes]),
                    ("vpcs", i, "routes")))
    return out


def _at(loc: Loc, vpc: Vpc, version: int, k: int) -> Loc:
    """The k-th IPv{version} prefix of a route source: an explicit route is named itself."""
    if loc[-1:] != ("routes",):
        return loc
    idx = [n for n, r in enumerate(vpc.routes) if r.prefix.version == version][k]
    return loc + (idx, "prefix")


def _check_vpc_routes(c: Cluster, i: int, fam: dict[int, Any]) -> tuple[int, int]:
    """Duplicates and overlap with the VPC's own prefixes; returns (IPv4, IPv6) route counts."""
    vpc = c.vpcs[i]
    sets = _route_sets(c, i)
    keys = np.concatenate([s.keys4() for s, _ in sets]) if sets else np.zeros(0, np.uint64)
    dup = duplicates4(keys)
    if len(dup):
        j, k = int(dup[0]), int(dup[0])
        for s, loc in sets:
            if k < len(s.addr4):
                net = ipaddress.IPv4Network((int(s.addr4[k]), int(s.plen4[k])))
                raise IntentProblem(_at(loc, vpc, 4, k),
                                    f"route {net} of VPC {vpc.name} is defined twice "
                                    f"(prefix #{k} here; #{j} of the VPC's routes)")
            k -= len(s.addr4)
    seen6: dict[tuple[int, int, int], Loc] = {}
    plens6: set[int] = set()
    for s, loc in sets:
        for m, (h, lo, p) in enumerate(zip(s.hi6.tolist(), s.lo6.tolist(), s.plen6.tolist())):
            if (h, lo, p) in seen6:
                net6 = ipaddress.IPv6Network(((h << 64) | lo, p))
                raise IntentProblem(_at(loc, vpc, 6, m),
                                    f"route {net6} of VPC {vpc.name} is also defined at "
                                    f"{format_loc(seen6[(h, lo, p)])}")
            seen6[(h, lo, p)] = loc
            plens6.add(p)
    if len(plens6) > layout.CZ_MAX_PLENS6:
        raise IntentProblem(("vpcs", i, "routes"), f"{len(plens6)} distinct IPv6 prefix lengths; "
                            f"the fast path handles {layout.CZ_MAX_PLENS6} per VPC")
    own4 = fam.get(4)
    for s, loc in sets:
        if own4 is not None and len(s.addr4):
            hit = np.flatnonzero(overlaps4(s.addr4, s.plen4, own4))
            if len(hit):
                net = ipaddress.IPv4Network((int(s.addr4[hit[0]]), int(s.plen4[hit[0]])))
                raise IntentProblem(_at(loc, vpc, 4, int(hit[0])),
                                    f"route {net} overlaps the address space {own4} of VPC "
                                    f"{vpc.name}")
        own6 = fam.get(6)
        if own6 is not None:
            for m, net6 in enumerate(s.networks6()):
                if net6.overlaps(own6):
                    raise IntentProblem(_at(loc, vpc, 6, m),
                                        f"route {net6} overlaps the address space {own6} "
                                        f"of VPC {vpc.name}")
    return len(keys), len(seen6)


def route_counts(c: Cluster) -> tuple[int, int]:
    """(IPv4, IPv6) route entries the cluster puts in the tables: every VPC's pools' prefixes and
    its explicit routes. The count check_cluster holds against the limits (it counts the same
    entries while looking for duplicates); the controller's delta check and `crosszone check`'s
    table counts use this one."""
    sizes = {p.name: (len(p.prefixes.addr4), len(p.prefixes.hi6)) for p in c.storage_pools}
    routes4 = routes6 = 0
    for v in c.vpcs:
        for name in v.storage_pools:
            n4, n6 = sizes.get(name, (0, 0))
            routes4 += n4
            routes6 += n6
        routes4 += sum(r.prefix.version == 4 for r in v.routes)
        routes6 += sum(r.prefix.version == 6 for r in v.routes)
    return routes4, routes6


def check_route_capacity(routes4: int, routes6: int) -> None:
    """IntentProblem when the routes do not fit the fast path's route tables."""
    if routes4 > layout.CZ_MAX_ROUTES4 or routes6 > layout.CZ_MAX_ROUTES6:
        raise IntentProblem(("vpcs",), f"{routes4} IPv4 / {routes6} IPv6 routes; the tables hold "
                            f"{layout.CZ_MAX_ROUTES4} / {layout.CZ_MAX_ROUTES6}")


def check_cluster(c: Cluster) -> None:
    """Raise IntentProblem for the first cross-object problem of a schema-valid cluster."""
    _unique(c.gateways, "name", "gateways")
    for g, gw in enumerate(c.gateways):
        _check_gateway(gw, g)
    _unique(c.vpcs, "name", "vpcs")
    _unique(c.vpcs, "vni", "vpcs")
    _unique(c.storage_pools, "name", "storage_pools")
    _unique(c.hosts, "name", "hosts")
    if len(c.vpcs) > layout.CZ_MAX_VPCS:
        raise IntentProblem(("vpcs",), f"{len(c.vpcs)} VPCs; the tables hold {layout.CZ_MAX_VPCS}")
    if len(c.storage_pools) > layout.CZ_MAX_GROUPS:
        raise IntentProblem(("storage_pools",), f"{len(c.storage_pools)} pools; the tables hold "
                            f"{layout.CZ_MAX_GROUPS} ECMP groups")

    nexthops = 0
    for k, pool in enumerate(c.storage_pools):
        _unique(pool.next_hops, "name", "storage_pools", k, "next_hops")
        for m, nh in enumerate(pool.next_hops):
            nexthops += 1
            for gw in c.gateways:
                if all(itf.name != nh.interface for itf in gw.interfaces):
                    raise IntentProblem(("storage_pools", k, "next_hops", m, "interface"),
                                        f"gateway {gw.name} has no interface {nh.interface!r}")
    if nexthops > layout.CZ_MAX_NEXTHOPS:
        raise IntentProblem(("storage_pools",), f"{nexthops} next hops; the tables hold "
                            f"{layout.CZ_MAX_NEXTHOPS}")

    pool_names = {p.name for p in c.storage_pools}
    storage_facing: list[tuple[Any, Loc]] = []
    spaces: dict[str, dict[int, Any]] = {}
    routes4 = routes6 = 0
    for i, vpc in enumerate(c.vpcs):
        fam = _by_family(vpc, i)
        spaces[vpc.name] = fam
        if vpc.storage_facing == "identity":
            storage_facing += [(net, ("vpcs", i, "prefixes")) for net in fam.values()]
        else:
            seen_sf: set[int] = set()
            for j, sf in enumerate(vpc.storage_facing):
                loc = ("vpcs", i, "storage_facing", j)
                own = fam.get(sf.version)
                if own is None or sf.version in seen_sf:
                    raise IntentProblem(loc, f"{sf} has no IPv{sf.version} VPC prefix to map 1:1")
                if sf.prefixlen != own.prefixlen:
                    raise IntentProblem(loc, f"{sf} must have the length of the VPC prefix {own} "
                                        "(1:1 mapping)")
                seen_sf.add(sf.version)
                storage_facing.append((sf, loc))
            if seen_sf != set(fam):
                raise IntentProblem(("vpcs", i, "storage_facing"),
                                    "one storage-facing prefix per VPC prefix is needed")
        for j, name in enumerate(vpc.storage_pools):
            if name not in pool_names:
                raise IntentProblem(("vpcs", i, "storage_pools", j), f"no storage pool {name!r}")
        if len(set(vpc.storage_pools)) != len(vpc.storage_pools):
            raise IntentProblem(("vpcs", i, "storage_pools"), "a pool is listed twice")
        for j, r in enumerate(vpc.routes):
            loc = ("vpcs", i, "routes", j)
            if r.action == "forward" and r.pool is None:
                raise IntentProblem(loc + ("pool",), "a forward route needs a pool")
            if r.action != "forward" and r.pool is not None:
                raise IntentProblem(loc + ("pool",), f"a {r.action} route takes no pool")
            if r.pool is not None and r.pool not in pool_names:
                raise IntentProblem(loc + ("pool",), f"no storage pool {r.pool!r}")
        n4, n6 = _check_vpc_routes(c, i, fam)
        routes4 += n4
        routes6 += n6
    check_route_capacity(routes4, routes6)
    _check_storage_facing(storage_facing)
    _check_storage_facing_clashes(c, storage_facing)

    n_hosts = len(c.hosts) + len(c.hosts_compact)
    if n_hosts > layout.CZ_MAX_HOSTS:
        raise IntentProblem(("hosts",), f"{n_hosts} hosts; the tables hold "
                            f"{layout.CZ_MAX_HOSTS}")
    seen_addr: dict[tuple[str, Any], int] = {}
    n_addr = 0
    for h, host in enumerate(c.hosts):
        host_fam = spaces.get(host.vpc)
        if host_fam is None:
            raise IntentProblem(("hosts", h, "vpc"), f"no VPC named {host.vpc!r}")
        for j, addr in enumerate(host.addresses):
            net = host_fam.get(addr.version)
            if net is None or addr not in net:
                raise IntentProblem(("hosts", h, "addresses", j),
                                    f"{addr} is outside every prefix of VPC {host.vpc}")
            prev = seen_addr.setdefault((host.vpc, addr), h)
            if prev != h:
                raise IntentProblem(("hosts", h, "addresses", j),
                                    f"{addr} is already used by hosts[{prev}]")
            n_addr += 1
    n_addr += _check_compact_hosts(c, spaces, seen_addr)
    if n_addr > layout.CZ_MAX_HOSTS:
        raise IntentProblem(("hosts",), f"{n_addr} host addresses; the tables hold "
                            f"{layout.CZ_MAX_HOSTS}")
    _check_policy(c)


def _check_policy(c: Cluster) -> None:
    """The policy's fields against each other (each is range-checked by the schema)."""
    p = c.policy
    if p.small_dscp == p.bulk_dscp:
        raise IntentProblem(("policy", "bulk_dscp"), f"{p.bulk_dscp} is small_dscp too: small "
                            "and bulk flows would share one class")
    if p.flowlet_gap_us >= p.flow_idle_ms * 1000:
        raise IntentProblem(("policy", "flowlet_gap_us"), f"{p.flowlet_gap_us} us is not below "
                            f"flow_idle_ms ({p.flow_idle_ms} ms): a flow would be forgotten "
                            "before any flowlet gap")


def _check_compact_hosts(c: Cluster, spaces: dict[str, dict[int, Any]],
                         seen_verbose: dict[tuple[str, Any], int]) -> int:
    """The verbose hosts' checks, vectorised, for the compact block; returns its addresses."""
    hs = c.hosts_compact
    if len(hs) == 0:
        return 0
    where = "hosts_compact"
    verbose = {h.name: i for i, h in enumerate(c.hosts)}
    if len(set(hs.names)) != len(hs.names) or not verbose.keys().isdisjoint(hs.names):
        seen: dict[str, int] = {}
        for i, name in enumerate(hs.names):
            if name in verbose:
                raise IntentProblem((where, i, "name"),
                                    f"{name} is already used by hosts[{verbose[name]}]")
            if name in seen:
                raise IntentProblem((where, i, "name"),
                                    f"{name} is already used by {where}[{seen[name]}]")
            seen[name] = i
    vpc_index = {v.name: k for k, v in enumerate(c.vpcs)}
    unknown = set(hs.vpcs) - vpc_index.keys()
    if unknown:
        i = next(i for i, v in enumerate(hs.vpcs) if v in unknown)
        raise IntentProblem((where, i, "vpc"), f"no VPC named {hs.vpcs[i]!r}")
    vi = np.fromiter((vpc_index[v] for v in hs.vpcs), np.int64, len(hs))
    # IPv4: inside the VPC's prefix, unique per VPC (also against the verbose hosts)
    nv = len(c.vpcs)
    has4 = np.zeros(nv, bool)
    net4 = np.zeros(nv, np.uint32)
    mask4 = np.zeros(nv, np.uint32)
    for k, v in enumerate(c.vpcs):
        own = spaces[v.name].get(4)
        if own is not None:
            has4[k] = True
            net4[k] = int(own.network_address)
            mask4[k] = int(own.netmask)
    av = vi[hs.h4]
    inside = has4[av] & ((hs.a4 & mask4[av]) == net4[av])
    if not inside.all():
        j = int(np.flatnonzero(~inside)[0])
        h = int(hs.h4[j])
        raise IntentProblem((where, h, "addresses"),
                            f"{ipaddress.IPv4Address(int(hs.a4[j]))} is outside every prefix "
                            f"of VPC {hs.vpcs[h]}")
    old = [(vpc_index[vpc], int(a)) for (vpc, a), _ in seen_verbose.items() if a.version == 4]
    old_keys = np.array([(k << 32) | a for k, a in old], np.uint64)
    keys = np.concatenate([old_keys, (av.astype(np.uint64) << np.uint64(32))
                           | hs.a4.astype(np.uint64)])
    dup = duplicates4(keys)
    if len(dup):
        j = int(dup[0]) - len(old_keys)
        first = int(np.flatnonzero(keys == keys[int(dup[0])])[0])
        if first < len(old_keys):
            k, a = old[first]
            by = f"hosts[{seen_verbose[(c.vpcs[k].name, ipaddress.IPv4Address(a))]}]"
        else:
            by = f"{where}[{int(hs.h4[first - len(old_keys)])}]"
        raise IntentProblem((where, int(hs.h4[j]), "addresses"),
                            f"{ipaddress.IPv4Address(int(hs.a4[j]))} is already used by {by}")
    # IPv6: few; one at a time
    seen6 = {(vpc, a): f"hosts[{i}]" for (vpc, a), i in seen_verbose.items() if a.version == 6}
    for h, hi, lo in zip(hs.h6.tolist(), hs.hi6.tolist(), hs.lo6.tolist()):
        addr = ipaddress.IPv6Address((hi << 64) | lo)
        vpc = hs.vpcs[h]
        own6 = spaces[vpc].get(6)
        if own6 is None or addr not in own6:
            raise IntentProblem((where, h, "addresses"),
                                f"{addr} is outside every prefix of VPC {vpc}")
        prev = seen6.setdefault((vpc, addr), f"{where}[{h}]")
        if prev != f"{where}[{h}]":
            raise IntentProblem((where, h, "addresses"), f"{addr} is already used by {prev}")
    return hs.n_addresses


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
