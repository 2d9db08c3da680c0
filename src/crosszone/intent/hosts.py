"""Compact hosts: one line per host, `name vpc vtep mac addr[,addr]`, parsed into numpy arrays.

A hundred thousand hosts as YAML mappings cost ~30 s in PyYAML and ~2 s of pydantic models; as one
block scalar (`hosts_compact: |`) they are one string, split and parsed with numpy in a fraction
of a second. The checks are the verbose form's (name syntax, IPv4 VTEP, MAC syntax, addresses),
and an error names the host by its position in the block (`host #N`) so that the loader can give
its line.

A `HostSet` keeps per host: name, VPC name, VTEP (uint32), MAC (uint64, the 6 bytes big-endian),
the block line (0-based, within the block); and the addresses flattened, each with the index of
its host: IPv4 as uint32, IPv6 as (hi, lo) uint64.
"""

from __future__ import annotations

import ipaddress
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_OCT = r"(?:0|[1-9][0-9]{0,2})"
_V4 = rf"{_OCT}\.{_OCT}\.{_OCT}\.{_OCT}"
_V4_RE = re.compile(_V4)
_MAC = re.compile(r"[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}")
# Whole columns checked in C: names, VTEPs, MACs, all-IPv4 address lists.
_NAMES = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\n)*")
_V4S = re.compile(rf"(?:{_V4}\n)*")
_MACS = re.compile(r"(?:[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}\n)*")
_ADDRS4 = re.compile(rf"(?:{_V4}(?:,{_V4})*\n)*")

FIELDS = ("name", "vpc", "vtep", "mac", "addresses")


class HostError(ValueError):
    """A line of a host block is wrong; `index` is the host's position in the block, `line` the
    line within the block (0-based), `field` the field."""

    def __init__(self, index: int, line: int, name: str, field: str | None, why: str) -> None:
        where = f".{field}" if field else ""
        super().__init__(f"host #{index} {name!r}{where}: {why}")
        self.index = index
        self.line = line
        self.field = field
        self.why = why


@dataclass(frozen=True, eq=False)
class HostSet:
    """Hosts as columns (order of the block kept)."""

    names: tuple[str, ...]
    vpcs: tuple[str, ...]
    vtep: np.ndarray          # uint32, host order
    mac: np.ndarray           # uint64 (48 bits)
    lines: np.ndarray         # int64, 0-based line within the block
    a4: np.ndarray            # uint32 addresses
    h4: np.ndarray            # int64 host index of each IPv4 address
    hi6: np.ndarray           # uint64
    lo6: np.ndarray           # uint64
    h6: np.ndarray            # int64 host index of each IPv6 address

    def __len__(self) -> int:
        return len(self.names)

    def __eq__(self, other: object) -> bool:
        """The same hosts, in any order (the store keeps them chunked, sorted by chunk)."""
        if not isinstance(other, HostSet):
            return NotImplemented
        if len(self) != len(other) or self.n_addresses != other.n_addresses:
            return False
        return sorted(self.to_text().split("\n")) == sorted(other.to_text().split("\n"))

    def __hash__(self) -> int:
        return hash(frozenset(self.to_text().split("\n")))

    @property
    def n_addresses(self) -> int:
        """Addresses of every host."""
        return len(self.a4) + len(self.hi6)

    @classmethod
    def empty(cls) -> HostSet:
        """No hosts."""
        z32, z64, zi = np.zeros(0, np.uint32), np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return cls((), (), z32, z64, zi, z32, zi, z64, z64, zi)

    def subset(self, mask: np.ndarray) -> HostSet:
        """The hosts where mask is true (addresses follow their hosts, re-indexed)."""
        idx = np.flatnonzero(mask)
        new_of = np.full(len(self), -1, np.int64)
        new_of[idx] = np.arange(len(idx))
        m4, m6 = mask[self.h4], mask[self.h6]
        names, vpcs = self.names, self.vpcs
        return HostSet(tuple(names[i] for i in idx.tolist()), tuple(vpcs[i] for i in idx.tolist()),
                       self.vtep[idx], self.mac[idx], self.lines[idx], self.a4[m4],
                       new_of[self.h4[m4]], self.hi6[m6], self.lo6[m6], new_of[self.h6[m6]])

    def addresses_of(self, i: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        """One host's addresses as ipaddress objects (error messages, small sets)."""
        out: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [
            ipaddress.IPv4Address(int(a)) for a in self.a4[self.h4 == i]]
        m = self.h6 == i
        out += [ipaddress.IPv6Address((int(h) << 64) | int(lo))
                for h, lo in zip(self.hi6[m], self.lo6[m])]
        return out

    def to_text(self) -> str:
        """The block form again, one host per line (addresses IPv4 first)."""
        n = len(self)
        if n == 0:
            return ""
        v4 = _dotted(self.vtep)
        macs = _macs(self.mac)
        addrs: list[list[str]] = [[] for _ in range(n)]
        for h, s in zip(self.h4.tolist(), _dotted(self.a4)):
            addrs[h].append(s)
        for h, hi, lo in zip(self.h6.tolist(), self.hi6.tolist(), self.lo6.tolist()):
            addrs[h].append(str(ipaddress.IPv6Address((hi << 64) | lo)))
        return "\n".join(f"{a} {b} {c} {d} {','.join(e)}" for a, b, c, d, e in zip(
            self.names, self.vpcs, v4, macs, addrs))

    def chunk_of(self, n_chunks: int) -> np.ndarray:
        """A chunk index per host: CRC-32 of its name (stable across processes)."""
        return np.array([zlib.crc32(s.encode()) % n_chunks for s in self.names], np.int64)


def _dotted(a: np.ndarray) -> list[str]:
    x = a.astype(np.int64)
    return [f"{w}.{p}.{q}.{r}" for w, p, q, r in zip(
        *(((x >> s) & 255).tolist() for s in (24, 16, 8, 0)))]


def _macs(m: np.ndarray) -> list[str]:
    raw = m.astype(">u8").tobytes()
    hexs = raw.hex()
    return [":".join(hexs[i + j:i + j + 2] for j in range(4, 16, 2))
            for i in range(0, len(hexs), 16)]


def _v4_column(tokens: Sequence[str]) -> np.ndarray | None:
    """Dotted quads (already matched by _V4) -> uint32, or None if an octet is above 255."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, np.uint32)
    nums = np.fromstring(" ".join(tokens).replace(".", " "), dtype=np.int64, sep=" ")
    if len(nums) != 4 * n:
        return None
    o = nums.reshape(n, 4)
    if (o > 255).any():
        return None
    return ((o[:, 0] << 24) | (o[:, 1] << 16) | (o[:, 2] << 8) | o[:, 3]).astype(np.uint32)


def _ipv4(tok: str) -> int | None:
    if not _V4_RE.fullmatch(tok):
        return None
    a, b, c, d = map(int, tok.split("."))
    if max(a, b, c, d) > 255:
        return None
    return (a << 24) | (b << 16) | (c << 8) | d


def parse_hosts(text: str) -> HostSet:
    """Parse a host block; raise HostError for the first bad line (empty and # lines skipped)."""
    raw = text.split("\n")
    rows: list[list[str]] = []
    lines: list[int] = []
    for ln, line in enumerate(raw):
        s = line.split("#", 1)[0].split() if "#" in line else line.split()
        if s:
            rows.append(s)
            lines.append(ln)
    n = len(rows)
    if n == 0:
        return HostSet.empty()
    for i, r in enumerate(rows):
        if len(r) != 5:
            raise HostError(i, lines[i], r[0], None, f"{len(r)} fields; a host line is "
                            "'name vpc vtep mac addr[,addr]'")
    names, vpcs, vteps, macs, addrs = (list(col) for col in zip(*rows))

    def first_bad(col: list[str], ok: object, field: str, why: str) -> HostError:
        for i, tok in enumerate(col):
            if not ok(tok):  # type: ignore[operator]
                return HostError(i, lines[i], names[i], field, f"{tok!r} {why}")
        raise AssertionError("no bad token")  # pragma: no cover

    if not _NAMES.fullmatch("\n".join(names) + "\n"):
        raise first_bad(names, _NAME.fullmatch, "name", "is not a name (letters, digits, _.-)")
    if not _NAMES.fullmatch("\n".join(vpcs) + "\n"):
        raise first_bad(vpcs, _NAME.fullmatch, "vpc", "is not a name")
    vtep = _v4_column(vteps) if _V4S.fullmatch("\n".join(vteps) + "\n") else None
    if vtep is None:
        raise first_bad(vteps, lambda t: _ipv4(t) is not None, "vtep",
                        "is not an IPv4 address (the underlay is IPv4)")
    if not _MACS.fullmatch("\n".join(macs) + "\n"):
        raise first_bad(macs, _MAC.fullmatch, "mac", "is not a MAC address like 02:00:00:00:00:01")
    mac = np.frombuffer(bytes.fromhex("".join(macs).replace(":", "")), np.uint8).reshape(n, 6)
    mac64 = np.zeros(n, np.uint64)
    for j in range(6):
        mac64 |= mac[:, j].astype(np.uint64) << np.uint64(8 * (5 - j))

    joined = "\n".join(addrs) + "\n"
    if ":" not in joined and _ADDRS4.fullmatch(joined):
        counts = np.fromiter((a.count(",") + 1 for a in addrs), np.int64, n)
        a4 = _v4_column(",".join(addrs).split(","))
        if a4 is not None:
            h4 = np.repeat(np.arange(n, dtype=np.int64), counts)
            e64, ei = np.zeros(0, np.uint64), np.zeros(0, np.int64)
            return HostSet(tuple(names), tuple(vpcs), vtep, mac64, np.array(lines, np.int64),
                           a4, h4, e64, e64, ei)
    # Mixed families or a bad token: one address at a time.
    l4: list[int] = []
    k4: list[int] = []
    l6: list[int] = []
    k6: list[int] = []
    for i, col in enumerate(addrs):
        for tok in col.split(","):
            v = _ipv4(tok)
            if v is not None:
                l4.append(v)
                k4.append(i)
                continue
            try:
                a = ipaddress.ip_address(tok)
            except ValueError:
                raise HostError(i, lines[i], names[i], "addresses",
                                f"{tok!r} is not an IP address") from None
            if a.version == 4:
                raise HostError(i, lines[i], names[i], "addresses",
                                f"{tok!r} is not an IP address")
            l6.append(int(a))
            k6.append(i)
    return HostSet(tuple(names), tuple(vpcs), vtep, mac64, np.array(lines, np.int64),
                   np.array(l4, np.uint32), np.array(k4, np.int64),
                   np.array([x >> 64 for x in l6], np.uint64),
                   np.array([x & 0xFFFFFFFFFFFFFFFF for x in l6], np.uint64),
                   np.array(k6, np.int64))


def concat_hosts(sets: Sequence[HostSet]) -> HostSet:
    """One HostSet of several (lines are kept as they were: they are per block)."""
    sets = [s for s in sets if len(s)]
    if not sets:
        return HostSet.empty()
    if len(sets) == 1:
        return sets[0]
    offs = np.cumsum([0] + [len(s) for s in sets[:-1]])
    return HostSet(
        tuple(n for s in sets for n in s.names), tuple(v for s in sets for v in s.vpcs),
        np.concatenate([s.vtep for s in sets]), np.concatenate([s.mac for s in sets]),
        np.concatenate([s.lines for s in sets]), np.concatenate([s.a4 for s in sets]),
        np.concatenate([s.h4 + o for s, o in zip(sets, offs)]),
        np.concatenate([s.hi6 for s in sets]), np.concatenate([s.lo6 for s in sets]),
        np.concatenate([s.h6 + o for s, o in zip(sets, offs)]))
