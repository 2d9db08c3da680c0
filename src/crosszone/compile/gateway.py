"""What one gateway's maps should hold for a cluster: compile with stable ids, and route deltas.

`compile_tables` numbers VPCs by VNI order and groups and next hops by position, so adding a VPC
with a low VNI would renumber every other VPC: each of its routes would be rewritten under a new
key, and for a moment two tenants could share an id. The agent therefore keeps an `Ids` map
(name -> id, persisted next to the pins) and renumbers the compiled tables onto it: names keep
their ids for as long as they exist, new names take the lowest free id.

Pool routes are compiled straight to arrays (`RouteArrays`): a million routes never become Python
objects. `route_delta` turns a change of one pool's prefixes into the partial old/new entries
that `compile.diff.diff_entries` orders, including the VPC entries whose prefix lengths change.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from crosszone.abi import layout
from crosszone.compile.encode import (
    Entries,
    RouteArrays,
    bind_ports,
    encode_host_set,
    encode_route_arrays,
    encode_tables,
    encode_vpc,
    u32,
)
from crosszone.compile.tables import Tables, Vpc, compile_tables
from crosszone.intent.prefixes import PrefixSet
from crosszone.intent.schema import Cluster


@dataclass
class Ids:
    """Stable ids by name: VPCs, ECMP groups (pools) and next hops ('pool/nexthop')."""

    vpcs: dict[str, int] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    nexthops: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialised form (the agent's state file)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Ids:
        """Parse the serialised form."""
        d = json.loads(text)
        return cls(dict(d["vpcs"]), dict(d["groups"]), dict(d["nexthops"]))


def _assign(names: list[str], old: dict[str, int]) -> dict[str, int]:
    """Keep the ids of names that stay; give new names the lowest free ids, in order."""
    out = {n: old[n] for n in names if n in old}
    used = set(out.values())
    free = (i for i in range(1 << 30) if i not in used)
    for n in names:
        if n not in out:
            out[n] = next(free)
    return out


def _plen_counts(plens: np.ndarray, width: int) -> np.ndarray:
    return np.bincount(plens.astype(np.int64), minlength=width + 1)


@dataclass
class Desired:
    """A gateway's compiled state: entries, the ids used, and what deltas need."""

    entries: Entries
    ids: Ids
    tables: Tables                                   # renumbered, core routes only
    vpcs: dict[str, Vpc]                             # by name, with the effective plens
    counts: dict[str, tuple[np.ndarray, np.ndarray]]  # VPC -> (plen4 counts, plen6 counts)


def renumber(t: Tables, ids: Ids) -> Tables:
    """Tables with every VPC, group and next-hop id replaced by its stable id."""
    vmap = {v.vpc_id: ids.vpcs[v.name] for v in t.vpcs}
    gmap = {g.group_id: ids.groups[g.name] for g in t.groups}
    nmap = {n.nh_id: ids.nexthops[n.name] for n in t.nexthops}
    if all(k == v for m in (vmap, gmap, nmap) for k, v in m.items()):
        return t
    rep = dataclasses.replace
    return rep(
        t,
        vpcs=tuple(rep(v, vpc_id=vmap[v.vpc_id]) for v in t.vpcs),
        groups=tuple(rep(g, group_id=gmap[g.group_id], members=tuple(nmap[m] for m in g.members),
                         buckets=tuple(nmap.get(b, b) for b in g.buckets)) for g in t.groups),
        nexthops=tuple(rep(n, nh_id=nmap[n.nh_id]) for n in t.nexthops),
        routes=tuple(rep(r, vpc_id=vmap[r.vpc_id], group=gmap[r.group]
                         if r.action == layout.CZ_ACT_FORWARD else r.group) for r in t.routes),
        storage_facing=tuple(rep(s, vpc_id=vmap[s.vpc_id]) for s in t.storage_facing),
        hosts=tuple(rep(h, vpc_id=vmap[h.vpc_id]) for h in t.hosts),
        _index={},
    )


def pool_route_arrays(vpc_id: int, group: int, p: PrefixSet) -> tuple[RouteArrays, ...]:
    """Forward routes of one VPC to one pool, per family, as arrays."""
    out = []
    for fam, addr, lo, plen in ((4, p.addr4, None, p.plen4), (6, p.hi6, p.lo6, p.plen6)):
        n = len(plen)
        if n:
            out.append(RouteArrays(
                fam, np.full(n, vpc_id, np.uint32), plen.astype(np.uint32), addr, lo,
                np.full(n, layout.CZ_ACT_FORWARD, np.uint32), np.full(n, group, np.uint32)))
    return tuple(out)


def compile_gateway(c: Cluster, gateway: str, ifindex_of: Callable[[str], int],
                    ids: Ids | None = None) -> Desired:
    """The entries gateway's maps must hold for cluster c, on stable ids."""
    t = bind_ports(compile_tables(c, gateway, core=True), ifindex_of)
    old = ids or Ids()
    ids = Ids(_assign([v.name for v in t.vpcs], old.vpcs),
              _assign([g.name for g in t.groups], old.groups),
              _assign([n.name for n in t.nexthops], old.nexthops))
    t = renumber(t, ids)
    pools = {p.name: p.prefixes for p in c.storage_pools}
    arrays: list[RouteArrays] = []
    vpcs: dict[str, Vpc] = {}
    counts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    new_vpcs = []
    for v in t.vpcs:
        spec = next(x for x in c.vpcs if x.name == v.name)
        core4 = np.array([r.prefix.prefixlen for r in t.routes
                          if r.vpc_id == v.vpc_id and r.prefix.version == 4], np.uint8)
        core6 = np.array([r.prefix.prefixlen for r in t.routes
                          if r.vpc_id == v.vpc_id and r.prefix.version == 6], np.uint8)
        c4, c6 = _plen_counts(core4, 32), _plen_counts(core6, 128)
        for name in spec.storage_pools:
            p = pools[name]
            arrays += pool_route_arrays(v.vpc_id, ids.groups[name], p)
            c4 += _plen_counts(p.plen4, 32)
            c6 += _plen_counts(p.plen6, 128)
        counts[v.name] = (c4, c6)
        vv = with_plens(v, c4, c6)
        vpcs[v.name] = vv
        new_vpcs.append(vv)
    t = dataclasses.replace(t, vpcs=tuple(new_vpcs), _index={})
    entries = encode_tables(t, arrays)
    hs = c.hosts_compact
    if len(hs):
        by_name = {v.name: (v.vpc_id, v.vni) for v in t.vpcs}
        per_host = np.array([by_name[v] for v in hs.vpcs], np.int64).reshape(-1, 2)
        hosts, vteps = encode_host_set(hs, per_host[:, 0], per_host[:, 1])
        entries["hosts"].update(hosts)
        entries["vtep_allowed"].update(vteps)
    return Desired(entries, ids, t, vpcs, counts)


def with_plens(v: Vpc, c4: np.ndarray, c6: np.ndarray) -> Vpc:
    """The VPC entry whose prefix lengths are exactly those with a non-zero count."""
    p4 = tuple(int(x) for x in np.flatnonzero(c4)[::-1])
    p6 = tuple(int(x) for x in np.flatnonzero(c6)[::-1])
    return v if (p4, p6) == (v.plens4, v.plens6) else dataclasses.replace(v, plens4=p4, plens6=p6)


def route_delta(d: Desired, c: Cluster, pool: str, added: PrefixSet, removed: PrefixSet
                ) -> tuple[Entries, Entries]:
    """(old, new) partial entries for a change of one pool's prefixes; updates d's counts/VPCs.

    The caller diffs them (puts of new routes, then VPC entries, then deletes of old routes) and
    applies the same change to d.entries."""
    old: Entries = {"routes4": {}, "routes6": {}, "vpcs": {}}
    new: Entries = {"routes4": {}, "routes6": {}, "vpcs": {}}
    gid = d.ids.groups[pool]
    for spec in c.vpcs:
        if pool not in spec.storage_pools:
            continue
        v = d.vpcs[spec.name]
        for ps, side in ((added, new), (removed, old)):
            for arr in pool_route_arrays(v.vpc_id, gid, ps):
                name, entries = encode_route_arrays(arr)
                side[name].update(entries)
        c4, c6 = d.counts[spec.name]
        c4 += _plen_counts(added.plen4, 32) - _plen_counts(removed.plen4, 32)
        c6 += _plen_counts(added.plen6, 128) - _plen_counts(removed.plen6, 128)
        nv = with_plens(v, c4, c6)
        if nv is not v:
            key = u32(v.vpc_id)
            old["vpcs"][key] = encode_vpc(v)
            new["vpcs"][key] = encode_vpc(nv)
            d.vpcs[spec.name] = nv
    return old, new
