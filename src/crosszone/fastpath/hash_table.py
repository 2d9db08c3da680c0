"""The writer of the fast path's kernel hash maps (hosts, vpc_by_vni): an entry a packet found
stays that entry's value until the packet is done, also when the map changes under it.

Why this is needed (kernel/bpf/hashtab.c, kernel/bpf/memalloc.c): replacing or deleting a hash
map element frees it at once to a per-CPU free list, and the next element the map allocates,
even in the same batch, may be that one. A packet that looked the old element up just before is
still reading it (XDP runs inside an RCU read-side section, but the element's memory is not
RCU-deferred), so it could read another key's value: another host's VTEP and MAC.

The rule kept here: a freed element's memory may be handed out again only after an RCU grace
period (`grace.Grace`) since it was freed. So
- a put batch first waits until every element this map freed earlier is past a grace period;
  its new keys are then written in one batch (they only allocate);
- keys that already exist (a replace allocates a new element and frees the old one) are written
  one at a time, with a grace period between two of them; replaces are rare (a host changing
  VTEP or MAC), so the wait is paid only then;
- a delete batch frees; the next allocation in this map waits for the grace period, which runs
  in the background meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from crosszone.fastpath.grace import Grace, map_identity, process_grace, require_tso

#: The kernel hash maps the programming path writes (the slot tables and the double-buffered
#: records have writers of their own; LPM tries free replaced nodes after a grace period).
HASH_MAPS = ("hosts", "vpc_by_vni")
#: Up to this many keys, a put batch looks each up instead of dumping the whole map (100k hosts).
_FEW = 256


def _records(buf: bytes | Sequence[bytes], size: int) -> list[bytes]:
    if isinstance(buf, bytes | bytearray | memoryview):
        b = bytes(buf)
        return [b[i:i + size] for i in range(0, len(b), size)]
    return [bytes(x) for x in buf]


class HashMapWriter:
    """A kernel hash map seen through writes that never reuse an element a packet may hold."""

    def __init__(self, m: Any, grace: Grace | None = None) -> None:
        require_tso(getattr(m, "name", "hash map"))
        self.map = m
        self.grace = grace if grace is not None else process_grace()
        self._ident = map_identity(m)
        # a previous writer process may have freed elements just before it stopped
        self.grace.deletes.setdefault(self._ident, 0)

    def __getattr__(self, name: str) -> Any:
        # everything that only reads (lookup, dump, key_size, ...) is the map's own
        return getattr(self.map, name)

    def _settle(self) -> None:
        """Wait until every element this map freed is past a grace period."""
        self.grace.wait_for(self.grace.deletes.get(self._ident, 0))

    def _freed(self) -> None:
        self.grace.deletes[self._ident] = self.grace.mark()

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        """Create or replace one entry."""
        self._settle()
        existed = self.map.lookup(key) is not None
        self.map.update(key, value, flags)
        if existed:
            self._freed()

    def update_batch(self, keys: bytes | Sequence[bytes], values: bytes | Sequence[bytes],
                     flags: int = 0) -> int:
        """Write many entries: new keys in one batch, replaces one grace period apart."""
        ks = _records(keys, self.map.key_size)
        vs = _records(values, self.map.value_stride)
        if len(ks) != len(vs):
            # the map's own error for a length mismatch
            return int(self.map.update_batch(keys, values, flags))
        self._settle()
        held = self._held(ks)
        fresh = [(k, v) for k, v in zip(ks, vs) if k not in held]
        again = [(k, v) for k, v in zip(ks, vs) if k in held]
        if fresh:
            self.map.update_batch(b"".join(k for k, _ in fresh), b"".join(v for _, v in fresh),
                                  flags)
        for k, v in again:
            self._settle()
            self.map.update(k, v, flags)
            self._freed()
        return len(ks)

    def delete(self, key: bytes) -> bool:
        """Delete one entry (its element is reused only after a grace period)."""
        gone = bool(self.map.delete(key))
        if gone:
            self._freed()
        return gone

    def delete_batch(self, keys: bytes | Sequence[bytes]) -> int:
        """Delete many entries."""
        n = int(self.map.delete_batch(keys))
        if n:
            self._freed()
        return n

    def _held(self, keys: list[bytes]) -> set[bytes]:
        """Which of keys the map holds: a lookup each for a small batch (an agent's delta),
        one dump of the map for a large one (a first program, where the map is nearly empty)."""
        if len(keys) <= _FEW:
            return {k for k in keys if self.map.lookup(k) is not None}
        return self._keys()

    def _keys(self) -> set[bytes]:
        keys, _values, n = self.map.dump()
        size = self.map.key_size
        return {keys[i * size:(i + 1) * size] for i in range(n)}

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._keys())


def wrap_hashes(maps: Mapping[str, Any], grace: Grace | None = None) -> dict[str, Any]:
    """maps with each kernel hash map of HASH_MAPS behind a HashMapWriter."""
    out: dict[str, Any] = dict(maps)
    for name in HASH_MAPS:
        if name in maps and not isinstance(maps[name], HashMapWriter):
            out[name] = HashMapWriter(maps[name], grace)
    return out
