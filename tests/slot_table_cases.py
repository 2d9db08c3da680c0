"""The slot-table writer's cases, run by both tiers against a `gateway_maps` fixture of their own:
tests/unit/test_slot_table_fake.py over the fake map backend (no root) and
tests/fastpath/test_slot_table.py over the kernel's maps. A test module imports the cases
(`test_*` functions, and the property test from `writer_agrees_with_a_dict`) and defines the
fixture; pytest collects the imported functions as the module's own tests."""

from __future__ import annotations

import errno
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crosszone.abi import layout as L
from crosszone.fastpath.libbpf_abi import BpfError
from crosszone.fastpath.slot_table import (
    DELETED,
    EMPTY,
    LIVE,
    ROUTE,
    ROUTES4,
    ROUTES6,
    SlotMap,
)

#: Random candidates searched for keys that share a home slot (enough for 4 in every run).
COLLISION_SEARCH = 1 << 22


def _keys4(vpc: int, plen: int, addrs: np.ndarray) -> np.ndarray:
    k = np.zeros(len(addrs), ROUTES4.key)
    k["vpc_id"], k["plen"] = vpc, plen
    k["addr"] = addrs.astype(">u4").view("<u4")  # network byte order in memory, as in C
    return k


def _keys6(vpc: int, plen: int, hi: np.ndarray) -> np.ndarray:
    k = np.zeros(len(hi), ROUTES6.key)
    k["vpc_id"], k["plen"] = vpc, plen
    k["addr"][:, 0] = hi.astype(">u8").view("<u8")
    return k


RNG = np.random.default_rng(7)


def _random(n: int, bits: int) -> np.ndarray:
    """n distinct random integers below 2^bits (sequential keys never collide under Fibonacci
    hashing, so collisions are searched for among random ones)."""
    return np.unique(RNG.integers(0, 1 << bits, size=n, dtype=np.uint64))


def _colliding(kind, keys: np.ndarray, n: int) -> np.ndarray:
    """n keys (of these candidates) that share one home slot."""
    home = kind.home(kind.pack(keys))
    values, counts = np.unique(home, return_counts=True)
    best = values[np.argmax(counts)]
    idx = np.flatnonzero(home == best)
    assert len(idx) >= n, f"only {len(idx)} candidates share a home; widen the search"
    return keys[idx[:n]]


def _route_values(n: int, group: int = 0) -> bytes:
    v = np.zeros(n, ROUTE)
    v["action"], v["group"] = L.CZ_ACT_FORWARD, group
    return v.tobytes()


def _reachable(m: SlotMap) -> None:
    """The linear-probing invariant: no empty slot between a live key and its home."""
    s = m.slots()
    rows = np.flatnonzero(s[:, 0] & LIVE)
    homes = m.kind.home(s[rows, :-1].copy())
    assert (rows >= homes).all() and (rows - homes < L.CZ_SLOT_PROBES).all()
    for r, h in zip(rows.tolist(), homes.tolist()):
        assert (s[h:r, 0] != EMPTY).all(), f"empty slot between home {h} and key at {r}"


def _clear(m: SlotMap) -> None:
    s = m.slots()
    s[np.flatnonzero(s[:, 0])] = 0
    assert m.live() == 0  # and the writer's count starts again from the table


_COLLIDE4 = _colliding(ROUTES4, _keys4(7, 32, _random(COLLISION_SEARCH, 32)), 4)


# A small key space (8 VPCs x 3 lengths x 64 addresses) so puts, replaces and deletes of the same
# keys meet often; the colliding group below makes probe chains and tombstones certain.
_ops = st.lists(
    st.tuples(st.sampled_from(["put", "delete"]),
              st.lists(st.tuples(st.integers(0, 7), st.sampled_from([8, 24, 32]),
                                 st.integers(0, 63), st.integers(1, 3)), min_size=1, max_size=12)),
    min_size=1, max_size=8)


def writer_agrees_with_a_dict(examples: int) -> Callable[..., None]:
    """The property test, with the tier's number of examples (the kernel tier runs more)."""

    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ops=_ops)
    def test_writer_agrees_with_a_dict(gateway_maps, ops) -> None:
        _agrees_with_a_dict(gateway_maps, ops)

    return test_writer_agrees_with_a_dict


def _agrees_with_a_dict(gateway_maps, ops) -> None:
    m = gateway_maps.maps["routes4"]
    _clear(m)
    model: dict[bytes, bytes] = {}
    collide = _COLLIDE4
    for kind, items in ops:
        keys = np.concatenate([_keys4(vpc, plen, np.array([a << (32 - plen)], np.uint64))
                               for vpc, plen, a, _ in items] + [collide[: len(items) % 5]])
        acts = [act for *_, act in items] + [1] * (len(keys) - len(items))
        vals = np.zeros(len(keys), ROUTE)
        vals["action"], vals["group"] = acts, np.arange(len(keys))
        kb = [k.tobytes() for k in keys]
        if kind == "put":
            m.update_batch(keys.tobytes(), vals.tobytes())
            model.update(zip(kb, [v.tobytes() for v in vals]))
        else:
            assert m.delete_batch(keys.tobytes()) == len({k for k in kb if k in model})
            for k in kb:
                model.pop(k, None)
        keys_out, vals_out, n = m.dump()
        got = {keys_out[i * 12:(i + 1) * 12]: vals_out[i * 8:(i + 1) * 8] for i in range(n)}
        assert got == model
        assert m.live() == len(model)
        _reachable(m)
        for k in kb:
            assert m.lookup(k) == model.get(k)
    _clear(m)


def test_replace_rewrites_only_the_value_and_delete_leaves_a_tombstone(gateway_maps) -> None:
    m = gateway_maps.maps["routes4"]
    _clear(m)
    keys = _colliding(ROUTES4, _keys4(1, 32, _random(COLLISION_SEARCH, 32)), 3)
    m.update_batch(keys.tobytes(), _route_values(3))
    s = m.slots()
    rows = np.flatnonzero(s[:, 0] & LIVE)
    assert len(rows) == 3 and rows[2] - rows[0] == 2  # one home, three consecutive slots
    first = rows[0]
    m.update(keys[1].tobytes(), _route_values(1, group=9))
    assert m.delete(keys[1].tobytes()) and not m.delete(keys[1].tobytes())
    s = m.slots()
    assert s[first + 1, 0] == DELETED
    assert np.frombuffer(s[first + 1, 1].tobytes(), ROUTE)["group"][0] == 9
    assert m.lookup(keys[2].tobytes()) is not None  # found past the tombstone
    m.update(keys[1].tobytes(), _route_values(1))   # reuses the tombstone
    s = m.slots()
    assert np.flatnonzero(s[:, 0] & LIVE).tolist() == rows.tolist()
    _clear(m)


def test_last_of_a_duplicate_key_wins(gateway_maps) -> None:
    m = gateway_maps.maps["routes4"]
    _clear(m)
    k = _keys4(2, 32, np.array([0x0A000001, 0x0A000001], np.uint64))
    v = np.zeros(2, ROUTE)
    v["action"], v["group"] = 1, [5, 6]
    m.update_batch(k.tobytes(), v.tobytes())
    assert m.live() == 1
    assert np.frombuffer(m.lookup(k[0].tobytes()), ROUTE)["group"][0] == 6
    _clear(m)


def test_a_key_with_no_free_slot_is_refused_and_nothing_is_written(gateway_maps) -> None:
    m = gateway_maps.maps["routes4"]
    _clear(m)
    key = _keys4(3, 32, np.array([0xC0A80001], np.uint64))
    home = int(ROUTES4.home(ROUTES4.pack(key))[0])
    s = m.slots()  # every slot the key could take holds some other live key
    s[home:home + L.CZ_SLOT_PROBES, 0] = LIVE | np.uint64(0xFFFF_0000_0000)
    before = s.copy()
    with pytest.raises(BpfError) as err:
        m.update(key.tobytes(), _route_values(1))
    assert err.value.errno == errno.E2BIG and "no free slot" in str(err.value)
    s = m.slots()
    assert (s == before).all()
    _clear(m)


def test_bad_input_is_refused(gateway_maps) -> None:
    m = gateway_maps.maps["routes4"]
    with pytest.raises(ValueError, match="whole number"):
        m.update(b"\0" * 11, _route_values(1))
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        m.update_batch(bytes(24), _route_values(1))


def test_a_table_of_another_shape_is_refused(gateway_maps) -> None:
    with pytest.raises(BpfError, match="expected 32"):
        SlotMap(ROUTES6, gateway_maps.maps["route4_slots"])


def test_a_deleted_slot_is_reused_only_after_a_grace_period(gateway_maps) -> None:
    """A packet that matched a key just before its delete may still read the slot's value word:
    the slot must not take another key's value until a grace period has passed (issue 12,
    finding 14). Inserting into an empty slot, or replacing a value, needs none."""
    from crosszone.fastpath.grace import Grace

    grace = Grace(sync=lambda: None, background=False)
    m = SlotMap(ROUTES4, gateway_maps.maps["routes4"].table, grace)
    _clear(m)
    grace.covered = grace.marked  # no previous writer's tombstones (the table is clear)
    k1, k2 = _COLLIDE4[:1], _COLLIDE4[1:2]
    home = int(ROUTES4.home(ROUTES4.pack(k1))[0])
    m.update_batch(k1.tobytes(), _route_values(1, group=1))
    m.update_batch(k1.tobytes(), _route_values(1, group=2))     # a replace: one value store
    assert grace.periods == 0
    m.delete_batch(k1.tobytes())
    s = m.slots()
    during: list[int] = []
    grace._sync = lambda: during.append(int(s[home, 0]))
    m.update_batch(k2.tobytes(), _route_values(1, group=3))     # takes k1's slot back
    assert during == [int(DELETED)], "the grace period must run before the slot is reused"
    assert m.lookup(k2.tobytes()) == _route_values(1, group=3)
    assert int(s[home, 0]) != int(DELETED) and grace.waits == 1
    m.update_batch(_COLLIDE4[2:3].tobytes(), _route_values(1))   # an empty slot: no wait
    assert grace.waits == 1
    # a new writer does not know when its predecessor deleted: it owes one grace period
    m.delete_batch(k2.tobytes())
    fresh = Grace(sync=lambda: None, background=False)
    m2 = SlotMap(ROUTES4, gateway_maps.maps["routes4"].table, fresh)
    m2.update_batch(k2.tobytes(), _route_values(1))
    assert fresh.waits == 1
    _clear(m)
