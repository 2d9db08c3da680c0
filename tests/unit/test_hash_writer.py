"""The hash-map writer (fastpath/hash_table.py): a hash element a packet may still hold is never
handed out again within a grace period, over the fake map backend (no root).

The kernel frees a replaced or deleted element at once and may allocate it for the next write,
even in the same batch; the writer must therefore put a grace period between a free and the next
allocation in that map. These tests record, for every kernel-level write, whether a grace period
separated it from the last free."""

from __future__ import annotations

from crosszone.abi.objects import BUILD_DIR
from crosszone.fastpath.grace import Grace
from crosszone.fastpath.hash_table import HashMapWriter
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.testing.fake_maps import fake_maps

OBJ = BUILD_DIR / "xdp_gateway.o"


class Recording:
    """A map that logs each kernel-level operation with the grace periods run so far."""

    def __init__(self, inner, grace: Grace) -> None:
        self.inner, self.grace, self.log = inner, grace, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def update(self, k, v, flags=0):
        self.log.append(("update", bytes(k), self.grace.periods))
        return self.inner.update(k, v, flags)

    def update_batch(self, ks, vs, flags=0):
        n = len(ks) // self.inner.key_size
        self.log.append(("update_batch", n, self.grace.periods))
        return self.inner.update_batch(ks, vs, flags)

    def delete(self, k):
        self.log.append(("delete", bytes(k), self.grace.periods))
        return self.inner.delete(k)

    def delete_batch(self, ks):
        self.log.append(("delete_batch", len(ks) // self.inner.key_size, self.grace.periods))
        return self.inner.delete_batch(ks)


def _writer():
    grace = Grace(sync=lambda: None, background=False)
    raw = Recording(fake_maps(OBJ)["hosts"], grace)
    w = HashMapWriter(raw, grace)
    return w, raw, grace


def _key(i: int, size: int) -> bytes:
    return i.to_bytes(4, "little") + bytes(size - 4)


def _val(i: int, size: int) -> bytes:
    return bytes([i % 256]) * size


def test_new_keys_go_in_one_batch_replaces_one_grace_period_apart() -> None:
    w, raw, grace = _writer()
    ks, vs = raw.key_size, raw.value_stride
    w.update_batch(b"".join(_key(i, ks) for i in range(5)), b"".join(_val(i, vs) for i in range(5)))
    assert raw.log[-1][:2] == ("update_batch", 5)
    raw.log.clear()
    before = grace.periods
    # two replaces and one new key in one batch
    w.update_batch(_key(1, ks) + _key(2, ks) + _key(9, ks),
                   _val(11, vs) + _val(12, vs) + _val(9, vs))
    ops = raw.log
    assert ops[0][:2] == ("update_batch", 1)            # the new key: allocation only
    replaces = [op for op in ops if op[0] == "update"]
    assert [op[1] for op in replaces] == [_key(1, ks), _key(2, ks)]
    # a grace period separates the first replace's free from the second replace's allocation
    assert replaces[1][2] > replaces[0][2] >= before
    assert w.lookup(_key(2, ks)) == _val(12, vs) and w.lookup(_key(9, ks)) == _val(9, vs)


def test_an_allocation_after_a_delete_waits_for_a_grace_period() -> None:
    w, raw, grace = _writer()
    ks, vs = raw.key_size, raw.value_stride
    w.update(_key(1, ks), _val(1, vs))
    w.delete_batch(_key(1, ks))
    freed_at = grace.periods
    w.update(_key(2, ks), _val(2, vs))
    assert raw.log[-1][0] == "update" and raw.log[-1][2] > freed_at
    # nothing freed since: the next new key does not wait
    periods = grace.periods
    w.update(_key(3, ks), _val(3, vs))
    assert grace.periods == periods


def test_a_new_writer_owes_one_grace_period_before_it_allocates() -> None:
    w, raw, grace = _writer()
    ks, vs = raw.key_size, raw.value_stride
    assert grace.periods == 0
    w.update(_key(1, ks), _val(1, vs))
    assert raw.log[-1][2] == 1  # a previous writer process may have freed elements just before


def test_the_gateway_maps_write_hosts_and_vpc_by_vni_through_it() -> None:
    gm = GatewayMaps(fake_maps(OBJ), grace=Grace(sync=lambda: None, background=False))
    assert isinstance(gm.maps["hosts"], HashMapWriter)
    assert isinstance(gm.maps["vpc_by_vni"], HashMapWriter)
