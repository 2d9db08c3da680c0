"""A router namespace's multipath routes, for the fast reroute (`emulate/fastreroute.py`).

The routes are read with one netlink dump and kept between decisions (`Routes.invalidate` when
the kernel reports a change, `route_monitor`). A decision takes one gateway's next hops out of
every route that has others, or puts them back, and sends every changed route as one
`RTM_NEWROUTE` replace in a single netlink datagram: the kernel applies them one after the
other inside that one `sendmsg`, so a router with many prefixes changes them all in well under
a millisecond.

Why the messages are encoded and parsed here and not by pyroute2: `IPRoute.route("replace")`
waits for each route's acknowledgement and builds each message from Python objects, and a
parsed dump of the storage router's routes took 5 to 11 ms (timed by hand in its namespace).
On the storage router (8 prefixes) a decision took 5 to 43 ms, and since both routers'
daemons share the real-time CPU at one priority, the other router's decision waited for it
(its detection slipped from 25 to 78 ms); the re-read after each change then held the second
router's decision another 5 to 13 ms. The format is the kernel's `struct rtmsg` and `struct
rtnexthop` (include/uapi/linux/rtnetlink.h); the tests decode what is encoded here with
pyroute2's parser.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

#: Route protocols a single-hop route may have without being a routing protocol's (kernel,
#: boot, static: connected subnets and the echo paths' /32s), never edited.
_NOT_ROUTING = (2, 3, 4)

RTM_NEWROUTE, RTM_GETROUTE = 24, 26
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE, NLM_F_CREATE = 0x1, 0x4, 0x100, 0x400
NLM_F_DUMP = 0x300
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_MULTIPATH, RTA_TABLE = 1, 4, 5, 6, 9, 15
RT_TABLE_MAIN = 254
#: The multicast groups of IPv4 and IPv6 route changes (RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE).
ROUTE_GROUPS = 0x40 | 0x400
_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope,
#                                       type, flags
_RTATTR = struct.Struct("=HH")  # len, type
_RTNEXTHOP = struct.Struct("=HBBi")  # len, flags, hops (weight - 1), ifindex

Hop = tuple[int, str | None, int]  # ifindex, gateway address, rtnh_hops (weight - 1)


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attr(kind: int, payload: bytes) -> bytes:
    raw = _RTATTR.pack(_RTATTR.size + len(payload), kind) + payload
    return raw + b"\0" * (_align(len(raw)) - len(raw))


def _addr(family: int, text: str) -> bytes:
    return socket.inet_pton(family, text)


@dataclass(frozen=True)
class Route:
    """One route of the main table as the kernel reported it, with its next hops."""

    family: int
    dst: str | None
    dst_len: int
    proto: int
    scope: int
    rtype: int
    priority: int | None
    hops: tuple[Hop, ...]

    @property
    def key(self) -> str:
        """family/destination/length, as `fastreroute.zebra_hops` keys routes."""
        return f"{self.family}/{self.dst}/{self.dst_len}"


def encode_replace(route: Route, seq: int) -> bytes:
    """The `RTM_NEWROUTE` replace (create if absent, acknowledged) that makes `route` so."""
    attrs = [_attr(RTA_TABLE, struct.pack("=I", 254))]
    if route.dst:
        attrs.append(_attr(RTA_DST, _addr(route.family, route.dst)))
    if route.priority is not None:
        attrs.append(_attr(RTA_PRIORITY, struct.pack("=I", route.priority)))
    if len(route.hops) == 1:
        oif, gw, _w = route.hops[0]
        attrs.append(_attr(RTA_OIF, struct.pack("=I", oif)))
        if gw:
            attrs.append(_attr(RTA_GATEWAY, _addr(route.family, gw)))
    else:
        nexthops = b""
        for oif, gw, hops in route.hops:
            inner = _attr(RTA_GATEWAY, _addr(route.family, gw)) if gw else b""
            nexthops += _RTNEXTHOP.pack(_RTNEXTHOP.size + len(inner), 0, hops, oif) + inner
        attrs.append(_attr(RTA_MULTIPATH, nexthops))
    body = _RTMSG.pack(route.family, route.dst_len, 0, 0, 254, route.proto, route.scope,
                       route.rtype, 0) + b"".join(attrs)
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE | NLM_F_CREATE
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_NEWROUTE, flags, seq, 0) + body


def parse_acks(data: bytes) -> dict[int, int]:
    """sequence number -> errno (0: done) of the acknowledgements in one netlink datagram."""
    out: dict[int, int] = {}
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(data, off)
        if length < _NLMSGHDR.size:
            break
        if kind == NLMSG_ERROR and length >= _NLMSGHDR.size + 4:
            (code,) = struct.unpack_from("=i", data, off + _NLMSGHDR.size)
            out[seq] = -code
        off += _align(length)
    return out


def _attrs(data: bytes, off: int, end: int) -> dict[int, bytes]:
    out = {}
    while off + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, off)
        if length < _RTATTR.size:
            break
        out[kind] = data[off + _RTATTR.size:off + length]
        off += _align(length)
    return out


def _text(family: int, raw: bytes | None) -> str | None:
    return socket.inet_ntop(family, raw) if raw else None


def parse_route(data: bytes, off: int, length: int) -> tuple[int, Route] | None:
    """The table and route of one RTM_NEWROUTE message at `off` (None if not a route a
    gateway's next hops can be taken out of: no next hop, or a kernel/boot/static single
    hop)."""
    start = off + _NLMSGHDR.size
    if length < _NLMSGHDR.size + _RTMSG.size:
        return None
    family, dst_len, _src, _tos, table, proto, scope, rtype, _fl = _RTMSG.unpack_from(data, start)
    a = _attrs(data, start + _RTMSG.size, off + length)
    if RTA_TABLE in a:
        (table,) = struct.unpack("=I", a[RTA_TABLE][:4])
    prio = struct.unpack("=I", a[RTA_PRIORITY][:4])[0] if RTA_PRIORITY in a else None
    hops: list[Hop] = []
    if RTA_MULTIPATH in a:
        mp, pos = a[RTA_MULTIPATH], 0
        while pos + _RTNEXTHOP.size <= len(mp):
            nh_len, _flags, nh_hops, oif = _RTNEXTHOP.unpack_from(mp, pos)
            if nh_len < _RTNEXTHOP.size:
                break
            inner = _attrs(mp, pos + _RTNEXTHOP.size, pos + nh_len)
            hops.append((oif, _text(family, inner.get(RTA_GATEWAY)), nh_hops))
            pos += _align(nh_len)
    elif RTA_OIF in a and proto not in _NOT_ROUTING:
        hops.append((struct.unpack("=i", a[RTA_OIF][:4])[0],
                     _text(family, a.get(RTA_GATEWAY)), 0))
    if not hops:
        return None
    return table, Route(family=family, dst=_text(family, a.get(RTA_DST)), dst_len=dst_len,
                        proto=proto, scope=scope, rtype=rtype, priority=prio, hops=tuple(hops))


def route_monitor(netns: str | None = None) -> socket.socket:
    """A netlink socket that becomes readable when the namespace's routes change (drain it
    with `drain`)."""
    return _netlink(netns, ROUTE_GROUPS)


def drain(sock: socket.socket) -> int:
    """Read and discard what is queued on a non-blocking socket; how many datagrams."""
    n = 0
    while True:
        try:
            sock.recv(65536, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return n
        except OSError:  # ENOBUFS: notifications were lost, which still means "changed"
            n += 1
            continue
        n += 1


@contextmanager
def _in_netns(netns: str | None) -> Iterator[None]:
    """This thread in `netns` (setns(2)) for the block, and back; no-op for None."""
    from pyroute2.netns import popns, pushns

    if not netns:
        yield
        return
    pushns(netns)
    try:
        yield
    finally:
        popns()


def _netlink(netns: str | None, groups: int = 0) -> socket.socket:
    with _in_netns(netns):
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    s.bind((0, groups))
    return s


def _ifindex(netns: str | None, dev: str) -> int:
    with _in_netns(netns):
        return socket.if_nametoindex(dev)


class Routes:
    """The namespace's multipath routes; each decision is one netlink datagram."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self.nl = _netlink(netns)
        self.nl.settimeout(1.0)  # the kernel answers inside send(); this is a safety net
        self._seq = 0
        # The routes as last read; None once the kernel reported a change (`invalidate`), so a
        # decision edits from a fresh read and the common case needs no dump at that moment.
        self._cache: list[Route] | None = None
        # route key -> {ifindex: (gateway address, weight)} of the next hops taken out
        self.removed: dict[str, dict[int, tuple[str | None, int]]] = {}
        self.errors: list[tuple[str, str]] = []  # (route key, error) of refused replaces

    def ifindex(self, dev: str) -> int:
        return _ifindex(self.netns, dev)

    def invalidate(self) -> None:
        """The kernel's routes changed (a netlink notification): read them again next time."""
        self._cache = None

    def warm(self) -> None:
        """Read the routes now if they are not cached, so that the next decision need not."""
        self._multipath()

    def _multipath(self) -> list[Route]:
        if self._cache is None:
            self._cache = self._dump()
        return self._cache

    def _dump(self) -> list[Route]:
        """The main table's routes with next hops, IPv4 and IPv6, in one netlink dump."""
        self._seq += 1
        ask = _RTMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0, 0, 0)
        self.nl.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(ask), RTM_GETROUTE,
                                    NLM_F_REQUEST | NLM_F_DUMP, self._seq, 0) + ask)
        out: list[Route] = []
        while True:
            data = self.nl.recv(1 << 20)
            off = 0
            while off + _NLMSGHDR.size <= len(data):
                length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(data, off)
                if length < _NLMSGHDR.size:
                    break
                if seq == self._seq:
                    if kind in (NLMSG_DONE, NLMSG_ERROR):
                        return out
                    if kind == RTM_NEWROUTE:
                        got = parse_route(data, off, length)
                        if got is not None and got[0] == RT_TABLE_MAIN:
                            out.append(got[1])
                off += _align(length)

    def _apply(self, changes: list[Route]) -> int:
        """Send every change in one datagram; how many the kernel took."""
        if not changes:
            return 0
        seqs = {}
        batch = b""
        for route in changes:
            self._seq += 1
            seqs[self._seq] = route.key
            batch += encode_replace(route, self._seq)
        self._cache = None  # read back (and notified) after our own change too
        self.nl.send(batch)
        acks: dict[int, int] = {}
        try:
            while not seqs.keys() <= acks.keys():  # the kernel answered inside send()
                acks.update(parse_acks(self.nl.recv(65536)))
        except TimeoutError:
            acks.update({s: errno.ETIMEDOUT for s in seqs if s not in acks})
        refused = {s: e for s, e in acks.items() if e and s in seqs}
        self.errors += [(seqs[s], errno.errorcode.get(e, str(e))) for s, e in refused.items()]
        return len(changes) - len(refused)

    def drop(self, ifindex: int) -> int:
        """Take next hops through `ifindex` out of every route that has others; how many
        routes changed."""
        changes = []
        for r in self._multipath():
            keep = tuple(h for h in r.hops if h[0] != ifindex)
            if len(keep) == len(r.hops) or not keep:
                continue
            for oif, gw, weight in r.hops:
                if oif == ifindex:
                    self.removed.setdefault(r.key, {})[oif] = (gw, weight)
            changes.append(replace(r, hops=keep))
        return self._apply(changes)

    def restore(self, ifindex: int, wanted: Callable[[str], bool]) -> int:
        """Put next hops through `ifindex` back where zebra still has them (`wanted(key)`)."""
        changes = []
        for r in self._multipath():
            gone = self.removed.get(r.key, {}).get(ifindex)
            if gone is None or any(h[0] == ifindex for h in r.hops) or not wanted(r.key):
                continue
            changes.append(replace(r, hops=(*r.hops, (ifindex, *gone))))
        for key in list(self.removed):
            self.removed[key].pop(ifindex, None)
            if not self.removed[key]:
                del self.removed[key]
        return self._apply(changes)

    def close(self) -> None:
        self.nl.close()
