"""The route Bloom filter's hash, mirrored from `bpf/route.h` (cz_bloom_hash4/6), vectorised.

Every route sets one bit; the fast path probes a prefix length's hash table only when that
length's bit is set for the destination, so a clear bit must never hide a live route: bits are
set before the route is written and are never cleared while the route may exist (a stale set bit
only costs a wasted probe). A full rewrite rebuilds the filter from the route set.
"""

from __future__ import annotations

import numpy as np

from crosszone.fastpath import layout

SEED = 0x63727A31
_U32 = np.uint32


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U32(r)) | (x >> _U32(32 - r))


def _mix(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    k = k.astype(_U32) * _U32(0xCC9E2D51)
    k = _rotl(k, 15) * _U32(0x1B873593)
    h = _rotl(h ^ k, 13)
    return h * _U32(5) + _U32(0xE6546B64)


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U32(16))
    h = h * _U32(0x85EBCA6B)
    h = h ^ (h >> _U32(13))
    h = h * _U32(0xC2B2AE35)
    return h ^ (h >> _U32(16))


def _raw32(x: np.ndarray) -> np.ndarray:
    """A big-endian 32-bit field as the BPF program loads it on little-endian x86."""
    return x.astype(_U32).byteswap()


def hash4(vpc_id: np.ndarray, plen: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """cz_bloom_hash4 for masked IPv4 networks given as host-order uint32."""
    with np.errstate(over="ignore"):
        h = np.full(len(vpc_id), SEED ^ 4, _U32)
        h = _mix(h, vpc_id)
        h = _mix(h, plen)
        h = _mix(h, _raw32(addr))
        return _fmix(h)


def hash6(vpc_id: np.ndarray, plen: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """cz_bloom_hash6 for masked IPv6 networks given as two host-order uint64 halves."""
    with np.errstate(over="ignore"):
        h = np.full(len(vpc_id), SEED ^ 6, _U32)
        h = _mix(h, vpc_id)
        h = _mix(h, plen)
        hi, lo = hi.astype(np.uint64), lo.astype(np.uint64)
        for half in (hi, lo):
            h = _mix(h, _raw32(half >> np.uint64(32)))
            h = _mix(h, _raw32(half & np.uint64(0xFFFFFFFF)))
        return _fmix(h)


def words(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(word index, OR of the bits in that word) for a set of bit hashes."""
    hashes = hashes.astype(_U32)
    idx = (hashes >> _U32(6)) & _U32(layout.CZ_BLOOM_WORDS - 1)
    bits = np.left_shift(np.uint64(1), (hashes & _U32(63)).astype(np.uint64))
    uniq, inverse = np.unique(idx, return_inverse=True)
    acc = np.zeros(len(uniq), np.uint64)
    np.bitwise_or.at(acc, inverse, bits)
    return uniq.astype(_U32), acc
