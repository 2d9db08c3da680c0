"""Decoding store objects: whatever bytes a store holds, only InvalidIntentError escapes.

The store is written by the controller, but anyone with write access to it (or a bug, or a torn
copy) may leave anything there; the agent and the controller decode it at every revision and at
start. Cases from the issue first, then hypothesis over random JSON, random bytes and mutations
of a valid cluster's objects (core document, pool chunks, host chunks).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crosszone.intent.cluster import load_cluster
from crosszone.intent.errors import InvalidIntentError
from crosszone.store.objects import CORE, join_objects, parse_chunk, split_cluster

ROOT = Path(__file__).resolve().parents[2]
GOOD = split_cluster(load_cluster(ROOT / "examples" / "cluster.yaml"))
GOOD_DOC = json.loads(GOOD[CORE])
POOL_KEYS = sorted(k for k in GOOD if k.startswith("pool/"))


def _decodes_or_rejects(objs: dict[str, bytes]) -> None:
    """join_objects gives a cluster or InvalidIntentError; any other exception fails the test."""
    try:
        join_objects(objs)
    except InvalidIntentError as exc:
        assert str(exc)  # names the key and says why


@pytest.mark.parametrize("core", [
    b"[]", b'{"storage_pools": 5}', b"5", b"null", b'"text"', b"true",
    b"[" * 100_000 + b"]" * 100_000,                     # RecursionError in the decoder
    b'{"vpcs": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"storage_pools": {"name": "p"}}', b'{"storage_pools": [{"name": 5}]}',
    b'{"storage_pools": [5, null, []]}', b"\xff\xfe\x00", b'{"version": 2, ',
    b"\xef\xbb\xbf{}", b"NaN", b'{"version": 1e999}',
])
def test_wrong_typed_core_is_invalid_intent(core: bytes) -> None:
    with pytest.raises(InvalidIntentError) as info:
        join_objects({**GOOD, CORE: core})
    assert "core" in str(info.value)


@pytest.mark.parametrize("key,value", [
    (POOL_KEYS[0], b"\xff\xfe"), (POOL_KEYS[0], b"10.0.0.0/33"), (POOL_KEYS[0], b"x" * 10_000),
    (POOL_KEYS[0], b"fd00::/129\n::/0"), (POOL_KEYS[0], b"\x00\n\x00"),
    ("hosts/001", b"\xc3\x28"), ("hosts/001", b"h1 t0 10.0.0.1 zz:zz 10.0.0.2"),
    ("hosts/001", b"h t 1.2.3.4 02:00:00:00:00:01 " + b"1.1.1.1," * 5000),
])
def test_wrong_chunk_encodings_are_invalid_intent(key: str, value: bytes) -> None:
    with pytest.raises(InvalidIntentError) as info:
        join_objects({**GOOD, key: value})
    assert key in str(info.value)


def test_a_valid_cluster_still_joins() -> None:
    assert join_objects(GOOD).storage_pools


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_fuzz_core_any_json(value: Any) -> None:
    _decodes_or_rejects({**GOOD, CORE: json.dumps(value).encode()})


def _paths(doc: Any, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, at + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, at + (i,))
    return out


PATHS = _paths(GOOD_DOC)[1:]


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    doc = dict(doc) if isinstance(doc, dict) else list(doc)
    doc[path[0]] = _replace(doc[path[0]], path[1:], value)
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), JSON)
def test_fuzz_core_one_field_replaced(path: tuple, value: Any) -> None:
    """A valid document with one field (anywhere, any depth) replaced by any JSON value."""
    _decodes_or_rejects({**GOOD, CORE: json.dumps(_replace(GOOD_DOC, path, value)).encode()})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(0, 2))
def test_fuzz_any_bytes_in_any_object(raw: bytes, which: int) -> None:
    key = [CORE, POOL_KEYS[0], "hosts/007"][which]
    _decodes_or_rejects({**GOOD, key: raw})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(POOL_KEYS + [CORE]), st.integers(0, 10_000), st.integers(0, 255),
       st.booleans())
def test_fuzz_byte_flips_and_truncation(key: str, pos: int, byte: int, truncate: bool) -> None:
    """A valid object with one byte changed, or cut short (a torn write)."""
    raw = bytearray(GOOD[key])
    pos %= max(len(raw), 1)
    if truncate:
        raw = raw[:pos]
    elif raw:
        raw[pos] = byte
    _decodes_or_rejects({**GOOD, key: bytes(raw)})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="0123456789abcdef.:/ \n\t-", max_size=40), max_size=20))
def test_fuzz_chunk_text_lines(lines: list[str]) -> None:
    with contextlib.suppress(InvalidIntentError):
        parse_chunk(POOL_KEYS[0], "\n".join(lines).encode())
