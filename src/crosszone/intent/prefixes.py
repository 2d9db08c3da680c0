"""Compact prefix lists: a whitespace-separated block of prefixes, parsed into numpy arrays.

A storage pool of a million prefixes is one YAML block scalar, not a million list items: PyYAML
and `ipaddress` cost tens of microseconds per item, so a million items take tens of seconds,
while splitting one string and parsing it with numpy takes well under a second. IPv4 prefixes
take the vectorised path; IPv6 tokens (rare, and bounded by CZ_MAX_PLENS6 lengths) go through
`ipaddress` one by one.

A `PrefixSet` keeps IPv4 as (addr uint32, plen uint8) and IPv6 as (hi, lo uint64, plen uint8);
`keys4()` packs IPv4 (addr, plen) into one uint64 so that sets of prefixes compare with numpy.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_V4_TOKEN = re.compile(r"^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}/[0-9]{1,2}$")


class PrefixError(ValueError):
    """A token of a prefix block is not a prefix; `index` is its position in the block."""

    def __init__(self, index: int, token: str, why: str) -> None:
        super().__init__(f"prefix #{index} {token!r}: {why}")
        self.index = index
        self.token = token


@dataclass(frozen=True, eq=False)
class PrefixSet:
    """Prefixes of both families as arrays (order of the block kept)."""

    addr4: np.ndarray          # uint32, host order
    plen4: np.ndarray          # uint8
    hi6: np.ndarray            # uint64
    lo6: np.ndarray            # uint64
    plen6: np.ndarray          # uint8

    def __len__(self) -> int:
        return len(self.addr4) + len(self.hi6)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrefixSet):
            return NotImplemented
        return all(np.array_equal(a, b) for a, b in zip(self._parts(), other._parts()))

    def __hash__(self) -> int:
        return hash(tuple(p.tobytes() for p in self._parts()))

    def _parts(self) -> tuple[np.ndarray, ...]:
        return (self.addr4, self.plen4, self.hi6, self.lo6, self.plen6)

    def keys4(self) -> np.ndarray:
        """IPv4 prefixes packed as addr << 8 | plen (uint64): equal iff the prefixes are."""
        return (self.addr4.astype(np.uint64) << np.uint64(8)) | self.plen4.astype(np.uint64)

    def networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        """The prefixes as ipaddress objects (small sets only: tests, the v1 projection)."""
        out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = [
            ipaddress.IPv4Network((int(a), int(p))) for a, p in zip(self.addr4, self.plen4)
        ]
        out += [ipaddress.IPv6Network(((int(h) << 64) | int(lo), int(p)))
                for h, lo, p in zip(self.hi6, self.lo6, self.plen6)]
        return out

    def networks6(self) -> list[ipaddress.IPv6Network]:
        """The IPv6 prefixes as ipaddress objects (they are few: at most 32 lengths per VPC)."""
        return [ipaddress.IPv6Network(((int(h) << 64) | int(lo), int(p)))
                for h, lo, p in zip(self.hi6, self.lo6, self.plen6)]

    def to_text(self) -> str:
        """The block form again, one prefix per line (IPv4 first)."""
        a = self.addr4.astype(np.int64)
        lines = [f"{w}.{x}.{y}.{z}/{n}" for w, x, y, z, n in zip(
            *(((a >> s) & 255).tolist() for s in (24, 16, 8, 0)), self.plen4.tolist())]
        return "\n".join(lines + [str(n) for n in self.networks6()])

    @classmethod
    def empty(cls) -> PrefixSet:
        """No prefixes."""
        return cls(np.zeros(0, np.uint32), np.zeros(0, np.uint8), np.zeros(0, np.uint64),
                   np.zeros(0, np.uint64), np.zeros(0, np.uint8))

    @classmethod
    def from_networks(cls, nets: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]
                      ) -> PrefixSet:
        """Arrays from ipaddress networks."""
        v4 = [n for n in nets if n.version == 4]
        v6 = [n for n in nets if n.version == 6]
        return cls(
            np.array([int(n.network_address) for n in v4], np.uint32),
            np.array([n.prefixlen for n in v4], np.uint8),
            np.array([int(n.network_address) >> 64 for n in v6], np.uint64),
            np.array([int(n.network_address) & 0xFFFFFFFFFFFFFFFF for n in v6], np.uint64),
            np.array([n.prefixlen for n in v6], np.uint8),
        )


def _first_bad(tokens: list[str], ok: np.ndarray | np.bool_, why: str) -> PrefixError:
    i = int(np.flatnonzero(~np.asarray(ok))[0])
    return PrefixError(i, tokens[i], why)


def _parse_v4(tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised IPv4 parse of tokens that all look like a.b.c.d/n."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, np.uint32), np.zeros(0, np.uint8)
    text = " ".join(tokens).replace(".", " ").replace("/", " ")
    # sep-mode fromstring parses in C (np.array of a million str is ~0.5 s); the tokens were
    # matched by the caller, so every one is five integers.
    nums = np.fromstring(text, dtype=np.int64, sep=" ")
    if len(nums) != n * 5:
        nums = np.array(text.split(), dtype=np.int64)
    nums = nums.reshape(n, 5)
    octets, plen = nums[:, :4], nums[:, 4]
    ok = (octets <= 255).all(axis=1)
    if not ok.all():
        raise _first_bad(tokens, ok, "an octet is above 255")
    ok = plen <= 32
    if not ok.all():
        raise _first_bad(tokens, ok, "prefix length above 32")
    addr = (octets[:, 0] << 24) | (octets[:, 1] << 16) | (octets[:, 2] << 8) | octets[:, 3]
    host_mask = (np.int64(1) << (32 - plen)) - 1
    ok = (addr & host_mask) == 0
    if not ok.all():
        raise _first_bad(tokens, ok, "has host bits set")
    return addr.astype(np.uint32), plen.astype(np.uint8)


_V4_BLOCK = re.compile(
    r"\s*(?:[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}/[0-9]{1,2}(?:\s+|$))*")


def parse_block(text: str) -> PrefixSet:
    """Parse a whitespace-separated block of prefixes; raise PrefixError on the first bad one."""
    tokens = text.split()
    if ":" not in text and text.isascii() and _V4_BLOCK.fullmatch(text):
        # All IPv4 (one regex over the block, in C): skip the per-token loop.
        try:
            addr4, plen4 = _parse_v4(tokens)
        except PrefixError:
            pass  # fall through: the loop below reports the first bad token
        else:
            e = PrefixSet.empty()
            return PrefixSet(addr4, plen4, e.hi6, e.lo6, e.plen6)
    v4_idx: list[int] = []
    v6: list[ipaddress.IPv6Network] = []
    for i, tok in enumerate(tokens):
        if ":" in tok:
            try:
                net = ipaddress.ip_network(tok, strict=True)
            except ValueError as exc:
                raise PrefixError(i, tok, str(exc)) from None
            assert isinstance(net, ipaddress.IPv6Network)
            v6.append(net)
        elif _V4_TOKEN.match(tok):
            v4_idx.append(i)
        else:
            raise PrefixError(i, tok, "not a prefix like 10.0.0.0/24")
    v4_tokens = tokens if len(v4_idx) == len(tokens) else [tokens[i] for i in v4_idx]
    try:
        addr4, plen4 = _parse_v4(v4_tokens)
    except PrefixError as exc:
        raise PrefixError(v4_idx[exc.index], exc.token, str(exc).split(": ", 1)[1]) from None
    six = PrefixSet.from_networks(list(v6))
    return PrefixSet(addr4, plen4, six.hi6, six.lo6, six.plen6)


def member_sorted(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Mask of keys found in sorted_keys (binary search: O(k log n), where np.isin of a few keys
    in a big array sorts both, O(n log n) per call)."""
    n = len(sorted_keys)
    if n == 0 or len(keys) == 0:
        return np.zeros(len(keys), bool)
    i = np.minimum(np.searchsorted(sorted_keys, keys), n - 1)
    return sorted_keys[i] == keys


def duplicates4(keys: np.ndarray) -> np.ndarray:
    """Indexes of entries whose packed key occurred earlier in the array."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(keys, kind="stable")
    s = keys[order]
    dup = np.flatnonzero(s[1:] == s[:-1]) + 1
    return np.sort(order[dup])


def overlaps4(addr: np.ndarray, plen: np.ndarray, net: ipaddress.IPv4Network) -> np.ndarray:
    """Mask of IPv4 prefixes that overlap net (one contains the other)."""
    start = addr.astype(np.int64)
    end = start + (np.int64(1) << (32 - plen.astype(np.int64))) - 1
    n0, n1 = int(net.network_address), int(net.broadcast_address)
    return (start <= n1) & (end >= n0)
