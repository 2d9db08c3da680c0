"""The fake map backend (fastpath/testing/fake_maps.py) keeps the semantics of the kernel's maps
that the code relies on, and fails with the errors the real backend raises."""

from __future__ import annotations

import errno

import pytest

from crosszone.abi.objects import BUILD_DIR as BUILD
from crosszone.fastpath.libbpf import BpfError, MapType, map_specs
from crosszone.fastpath.testing.fake_maps import BPF_F_MMAPABLE, FakeMap


def u32(i: int) -> bytes:
    return i.to_bytes(4, "little")


def test_array_reads_zeros_refuses_deletes_and_indexes_past_the_end() -> None:
    m = FakeMap("a", MapType.ARRAY, 4, 8, 4)
    assert m.lookup(u32(3)) == bytes(8)
    m.update(u32(3), b"abcdefgh")
    assert m.lookup(u32(3)) == b"abcdefgh"
    assert m.lookup(u32(4)) is None
    with pytest.raises(BpfError) as e:
        m.update(u32(4), bytes(8))
    assert e.value.errno == errno.E2BIG and e.value.call == "bpf_map_update_elem"
    with pytest.raises(BpfError) as e:
        m.delete(u32(3))
    assert e.value.errno == errno.EINVAL
    keys, values, n = m.dump()
    assert n == 4 and values[24:] == b"abcdefgh" and keys[12:] == u32(3)


def test_wrong_sizes_raise_einval_like_the_real_backend() -> None:
    m = FakeMap("h", MapType.HASH, 8, 4, 16)
    for call in (lambda: m.update(bytes(7), bytes(4)), lambda: m.lookup(bytes(9)),
                 lambda: m.delete(bytes(4)), lambda: m.update(bytes(8), bytes(5))):
        with pytest.raises(BpfError) as e:
            call()
        assert e.value.errno == errno.EINVAL
    with pytest.raises(BpfError, match="not a multiple of 8"):
        m.update_batch(bytes(12), bytes(4))
    with pytest.raises(BpfError, match="2 keys but 1 values"):
        m.update_batch(bytes(16), bytes(4))


def test_full_hash_refuses_new_keys_and_a_batch_keeps_what_came_before() -> None:
    m = FakeMap("h", MapType.HASH, 4, 4, 3)
    with pytest.raises(BpfError) as e:
        m.update_batch(b"".join(u32(i) for i in range(5)), b"".join(u32(i) for i in range(5)))
    assert e.value.errno == errno.E2BIG and e.value.call == "bpf_map_update_batch"
    assert "entry #3 of 5" in str(e.value)
    assert [m.lookup(u32(i)) for i in range(5)] == [u32(0), u32(1), u32(2), None, None]
    m.update(u32(1), u32(9))  # replacing an existing key needs no room
    assert m.lookup(u32(1)) == u32(9)
    assert m.delete(u32(1)) and not m.delete(u32(1))
    assert m.delete_batch(u32(0) + u32(7)) == 1
    assert m.dump() == (u32(2), u32(2), 1)


def test_lpm_trie_lookup_is_a_longest_prefix_match() -> None:
    m = FakeMap("t", MapType.LPM_TRIE, 8, 4, 16, map_flags=1)

    def key(plen: int, addr: str) -> bytes:
        return u32(plen) + bytes(int(x) for x in addr.split("."))
    m.update(key(8, "10.0.0.0"), u32(8))
    m.update(key(24, "10.1.2.0"), u32(24))
    assert m.lookup(key(32, "10.1.2.3")) == u32(24)
    assert m.lookup(key(32, "10.9.9.9")) == u32(8)
    assert m.lookup(key(32, "11.0.0.1")) is None
    assert m.lookup(key(16, "10.1.0.0")) == u32(8)  # the /24 is longer than the key
    with pytest.raises(BpfError) as e:
        m.update(key(33, "10.0.0.0"), u32(0))
    assert e.value.errno == errno.EINVAL
    assert m.dump()[2] == 2


def test_percpu_values_and_the_shared_mapping_of_an_mmapable_array() -> None:
    pc = FakeMap("p", MapType.PERCPU_ARRAY, 4, 12, 2, ncpus=3)
    assert pc.value_stride == 16 * 3
    pc.update_percpu(u32(1), [b"a" * 12, b"b" * 12, b"c" * 12])
    assert pc.lookup_percpu(u32(1)) == [b"a" * 12, b"b" * 12, b"c" * 12]
    assert pc.lookup_percpu(u32(0)) == [bytes(12)] * 3
    with pytest.raises(BpfError):
        FakeMap("h", MapType.HASH, 4, 4, 1).lookup_percpu(u32(0))
    arr = FakeMap("s", MapType.ARRAY, 4, 16, 8, map_flags=BPF_F_MMAPABLE)
    mem = arr.mmap_values()
    mem[16:32] = b"x" * 16
    assert arr.lookup(u32(1)) == b"x" * 16
    arr.update(u32(2), b"y" * 16)
    assert mem[32:48] == b"y" * 16
    with pytest.raises(BpfError):
        pc.mmap_values()


def test_devmap_indexes_are_bounded_and_deletable() -> None:
    m = FakeMap("tx", MapType.DEVMAP, 4, 4, 2)
    m.update(u32(1), u32(7))
    assert m.lookup(u32(0)) is None and m.lookup(u32(1)) == u32(7)
    with pytest.raises(BpfError) as e:
        m.update(u32(2), u32(7))
    assert e.value.errno == errno.E2BIG
    assert m.delete(u32(1)) and m.lookup(u32(1)) is None


def test_fakes_take_the_shape_the_object_file_defines() -> None:
    obj = BUILD / "xdp_gateway.o"
    if not obj.exists():
        pytest.skip("build/xdp_gateway.o not built (make build)")
    specs = map_specs(obj)
    assert {"route4_slots", "hosts", "tx_ports", "sf4", "reason_stats"} <= set(specs)
    fake = FakeMap.of(specs["route4_slots"])
    assert fake.map_flags & BPF_F_MMAPABLE and fake.value_size == 16
