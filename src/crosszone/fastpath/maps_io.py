"""The maps of a loaded or pinned gateway, by logical name, and its counters read back.

`GatewayMaps` wraps the BPF maps of one gateway object so that everything above names entries
the way `compile.encode` encodes them: the slot tables appear as the logical maps they hold
(`slot_table.SlotMap`), the double-buffered records as the arrays they stand for
(`record_table.RecordMap`), an LPM-trie baseline object's route tries as routes4/routes6
(`LpmRouteMap`). Writing is not done here: every writer programs through `fastpath.sink`
(compile -> encode -> diff -> sink, one write order). The maps may be real (`BpfMap`) or the
pure-Python stand-ins of `fastpath.testing.fake_maps`.
"""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Mapping, Sequence
from typing import Any

from crosszone.abi import layout as L
from crosszone.abi.reasons import Reason
from crosszone.compile import encode as enc
from crosszone.fastpath.grace import Grace
from crosszone.fastpath.hash_table import wrap_hashes
from crosszone.fastpath.libbpf import BpfError, BpfMap, BpfObject
from crosszone.fastpath.record_table import wrap_records
from crosszone.fastpath.slot_table import SlotMap, wrap


class LpmRouteMap:
    """routes4/routes6 of the LPM-trie baseline objects: keyed like the slot tables (struct
    cz_route4_key/cz_route6_key, what the encoder and the diff name), stored in routes4_lpm or
    routes6_lpm under the trie's key (`encode.route_keys_to_lpm`).

    `lookup` is the trie's: a longest-prefix match, so a key that is absent may still answer the
    value of a shorter prefix that covers it."""

    def __init__(self, family: int, trie: BpfMap) -> None:
        self.family = family
        self.trie = trie
        self.name = "routes4" if family == 4 else "routes6"
        self.key_size = (enc.ROUTE4_KEY if family == 4 else enc.ROUTE6_KEY).itemsize
        self.value_size = trie.value_size
        self.value_stride = trie.value_stride
        self.max_entries = trie.max_entries

    def __repr__(self) -> str:
        return f"LpmRouteMap({self.name!r} in {self.trie.name!r})"

    def _keys(self, keys: bytes | Sequence[bytes], call: str) -> bytes:
        buf = bytes(keys) if isinstance(keys, bytes | bytearray | memoryview) else b"".join(keys)
        if len(buf) % self.key_size:
            raise BpfError(errno.EINVAL, call, self.name,
                           f"{len(buf)} bytes of keys, not a multiple of {self.key_size}")
        return enc.route_keys_to_lpm(buf, self.family)

    def update(self, key: bytes, value: bytes) -> None:
        """Insert or replace one route."""
        self.trie.update(self._keys(key, "bpf_map_update_elem"), value)

    def update_batch(self, keys: bytes | Sequence[bytes], values: bytes | Sequence[bytes]) -> int:
        """Insert or replace routes."""
        return self.trie.update_batch(self._keys(keys, "update_batch"), values)

    def delete(self, key: bytes) -> bool:
        """Delete one route; False if absent."""
        return self.trie.delete(self._keys(key, "bpf_map_delete_elem"))

    def delete_batch(self, keys: bytes | Sequence[bytes]) -> int:
        """Delete routes; returns how many were there."""
        return self.trie.delete_batch(self._keys(keys, "delete_batch"))

    def lookup(self, key: bytes) -> bytes | None:
        """The trie's answer for one key (longest-prefix match)."""
        return self.trie.lookup(self._keys(key, "bpf_map_lookup_elem"))

    def dump(self) -> tuple[bytes, bytes, int]:
        """(keys, values, n) of every route, keys in the route-key layout."""
        keys, values, n = self.trie.dump()
        return enc.lpm_keys_to_route(keys, self.family), values, n


class GatewayMaps:
    """The maps of one loaded (or pinned) gateway program, by name.

    The slot tables also appear under the logical maps they hold (routes4, routes6,
    vtep_allowed), and an LPM-trie object's route tries under routes4/routes6, which is how the
    encoder, the diff and the sink name them. Writing goes through `fastpath.sink` (the one
    programming path); this class reads counters and traces back."""

    def __init__(self, maps: Mapping[str, Any], grace: Grace | None = None) -> None:
        self.maps: dict[str, Any] = wrap_hashes(wrap_records(wrap(dict(maps), grace), grace),
                                                grace)
        self.lpm = "routes4_lpm" in self.maps
        for fam in (4, 6):
            if (trie := f"routes{fam}_lpm") in self.maps:
                self.maps[f"routes{fam}"] = LpmRouteMap(fam, self.maps[trie])

    def close(self) -> None:
        """Let go of the slot tables' mappings (each holds its map until closed or freed)."""
        for m in self.maps.values():
            if isinstance(m, SlotMap):
                m.close()

    @classmethod
    def of(cls, obj: BpfObject) -> GatewayMaps:
        """The maps of a loaded object."""
        return cls(obj.maps)

    def _percpu(self, name: str, index: int) -> list[bytes]:
        """One entry of a per-CPU array map, a value per CPU (those maps are never slot tables)."""
        m = self.maps[name]
        assert not isinstance(m, SlotMap | LpmRouteMap), name
        return m.lookup_percpu(enc.u32(index))  # type: ignore[no-any-return]

    def reason_stats(self) -> dict[Reason, tuple[int, int]]:
        """Reason -> (packets, bytes), summed over CPUs."""
        out = {}
        for r in Reason:
            pk = by = 0
            for raw in self._percpu("reason_stats", int(r)):
                c = L.CzCounter.from_buffer_copy(raw[: ctypes.sizeof(L.CzCounter)])
                pk += c.packets
                by += c.bytes
            out[r] = (pk, by)
        return out

    def vpc_stats(self, vpc_id: int) -> L.CzVpcCounter:
        """Forwarded packets and bytes of one VPC in both directions, summed over CPUs."""
        total = L.CzVpcCounter()
        for raw in self._percpu("vpc_stats", vpc_id):
            c = L.CzVpcCounter.from_buffer_copy(raw[: ctypes.sizeof(L.CzVpcCounter)])
            for f in (
                "to_storage_packets",
                "to_storage_bytes",
                "to_compute_packets",
                "to_compute_bytes",
            ):
                setattr(total, f, getattr(total, f) + getattr(c, f))
        return total

    def policy_stats(self, vpc_id: int) -> L.CzPolicyCounter:
        """What the traffic policy did to one VPC's packets, summed over CPUs."""
        total = L.CzPolicyCounter()
        for raw in self._percpu("policy_stats", vpc_id):
            c = L.CzPolicyCounter.from_buffer_copy(raw[: ctypes.sizeof(L.CzPolicyCounter)])
            for f, *_ in L.CzPolicyCounter._fields_:
                setattr(total, f, getattr(total, f) + getattr(c, f))
        return total

    def last_trace(self, cpu: int) -> L.CzTrace:
        """The trace record of one CPU (only filled with CZ_CFG_TRACE)."""
        raw = self._percpu("trace", 0)[cpu]
        return L.CzTrace.from_buffer_copy(raw[: ctypes.sizeof(L.CzTrace)])
