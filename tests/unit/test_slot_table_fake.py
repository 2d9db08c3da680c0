"""The slot tables' writer (fastpath/slot_table.py) over the fake map backend, without root:
it agrees with a dict under any sequence of puts and deletes, keeps every key reachable from its
home slot, leaves tombstones, refuses what it cannot place (probe limit, capacity) and bad
input. tests/fastpath/test_slot_table.py runs the same writer against the kernel's maps and
checks that the program finds what it wrote."""

from __future__ import annotations

import dataclasses
import errno

import numpy as np
import pytest

from crosszone.abi.objects import BUILD_DIR as BUILD
from crosszone.fastpath.libbpf_abi import BpfError
from crosszone.fastpath.slot_table import (
    ROUTES4,
    ROUTES6,
    VTEPS,
    SlotMap,
)
from crosszone.fastpath.testing.fake_maps import fake_gateway

from slot_table_cases import (  # noqa: F401  (collected by pytest as this module's tests)
    _clear,
    _colliding,
    _keys4,
    _keys6,
    _random,
    _reachable,
    _route_values,
    test_a_key_with_no_free_slot_is_refused_and_nothing_is_written,
    test_a_table_of_another_shape_is_refused,
    test_bad_input_is_refused,
    test_last_of_a_duplicate_key_wins,
    test_replace_rewrites_only_the_value_and_delete_leaves_a_tombstone,
    writer_agrees_with_a_dict,
)

OBJ = BUILD / "xdp_gateway.o"


@pytest.fixture(scope="module")
def gateway_maps():
    if not OBJ.exists():
        pytest.skip("build/xdp_gateway.o not built (make build)")
    maps = fake_gateway(OBJ)
    yield maps
    maps.close()


test_writer_agrees_with_a_dict = writer_agrees_with_a_dict(8)


def test_capacity_is_enforced_before_anything_is_written(gateway_maps) -> None:
    small = SlotMap(dataclasses.replace(ROUTES4, capacity=4), gateway_maps.maps["route4_slots"])
    _clear(small)
    small.update_batch(_keys4(5, 32, np.arange(3, dtype=np.uint64)).tobytes(), _route_values(3))
    before = small.slots().copy()
    with pytest.raises(BpfError) as err:
        small.update_batch(_keys4(5, 32, np.arange(3, 5, dtype=np.uint64)).tobytes(),
                           _route_values(2))
    assert err.value.errno == errno.E2BIG and "capacity 4" in str(err.value)
    assert (small.slots() == before).all()
    small.update(_keys4(5, 32, np.array([0], np.uint64)).tobytes(), _route_values(1, 3))
    assert small.live() == 3  # a replace needs no room
    _clear(small)


def test_ipv6_and_vtep_keys_round_trip(gateway_maps) -> None:
    for name, kind, keys in (
            ("routes6", ROUTES6, _keys6(9, 64, _random(50, 64))),
            ("vtep_allowed", VTEPS, np.array([(100 + i, 0x0A000001 + i) for i in range(20)],
                                             VTEPS.key))):
        m = gateway_maps.maps[name]
        _clear(m)
        vals = (_route_values(len(keys)) if name == "routes6"
                else np.arange(len(keys), dtype="<u4").tobytes())
        m.update_batch(keys.tobytes(), vals)
        k_out, _, n = m.dump()
        assert n == len(keys)
        size = kind.key.itemsize
        got = {k_out[i * size:(i + 1) * size] for i in range(n)}
        assert got == {k.tobytes() for k in keys}
        _reachable(m)
        assert m.delete_batch(keys.tobytes()) == len(keys) and m.live() == 0
        _clear(m)
