"""A property over the controller API (issue 12): for any sequence of writes (whole intents,
prefix additions and removals, valid or not, dry runs or not), every accepted write leaves a
stored state that `crosszone check` accepts and that a fresh agent loads (every gateway
compiles), and every rejected write changes nothing in the store."""

from __future__ import annotations

import ipaddress
import tempfile
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from crosszone.compile.gateway import compile_gateway
from crosszone.control.api import create_app
from crosszone.control.service import Controller
from crosszone.intent.cluster import parse_cluster, to_document
from crosszone.store.objects import join_objects, split_cluster
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT

ROOT = Path(__file__).resolve().parents[2]
BASE = (ROOT / "examples" / "cluster.yaml").read_text()
AUTH = {"Authorization": "Bearer t"}


def _variant(edit: Any) -> str:
    doc = yaml.safe_load(BASE)
    edit(doc)
    return yaml.safe_dump(doc)


def _pool(doc: dict, name: str) -> dict:
    return next(p for p in doc["storage_pools"] if p["name"] == name)


INTENTS = [
    BASE,
    # tenant-b gives up checkpoints; datasets gains IPv6 prefixes
    _variant(lambda d: (d["vpcs"][1].update(storage_pools=["datasets"]),
                        _pool(d, "datasets")["prefixes"].append("fd11::/48"))),
    # checkpoints holds an IPv6 prefix too (fine while no VPC uses both pools with it twice)
    _variant(lambda d: _pool(d, "checkpoints").update(prefixes="172.17.0.0/16 fd12::/48")),
    # invalid: checkpoints repeats datasets' fd10::/48, and tenant-b uses both
    _variant(lambda d: _pool(d, "checkpoints").update(prefixes="172.17.0.0/16 fd10::/48")),
    # invalid: two VPCs with one VNI
    BASE.replace("vni: 1002", "vni: 1001"),
    # invalid: not YAML at all
    "version: 2\ngateways: [",
]

V4 = ["172.16.0.0/16", "172.17.0.0/16", "172.20.0.0/24", "172.20.1.0/24", "172.21.0.0/16",
      "172.16.99.0/24", "192.168.3.0/24", "10.1.0.1/16", "300.1.0.0/16", "junk"]
V6_FIXED = ["fd10::/48", "fd11::/48", "fd12::/48", "fd00:a::/80", "fd20:abcd::1/64", "fd13::/48"]


def _v6_of_length(n: int) -> str:
    """A prefix of length n from fd20:abcd:: (n <= 10 covers fd00::/8, so a VPC's own space)."""
    return str(ipaddress.IPv6Network((0xFD20ABCD << 96, n), strict=False))


# Mostly valid-looking prefixes (a write is refused as a whole if one prefix is bad, so bad
# ones must be rare for accepted writes to be common), and batches of distinct IPv6 lengths
# (two of them in one VPC exceed CZ_MAX_PLENS6).
prefix = st.one_of(st.sampled_from(V4), st.sampled_from(V6_FIXED),
                   st.integers(8, 96).map(_v6_of_length))
fresh = st.one_of(st.sampled_from(["172.20.0.0/24", "172.20.1.0/24", "172.21.0.0/16",
                                   "fd11::/48", "fd12::/48", "fd13::/48", "fd10::/48"]),
                  st.integers(12, 96).map(_v6_of_length))
lengths6 = st.lists(st.integers(12, 96), min_size=10, max_size=24, unique=True).map(
    lambda ns: [_v6_of_length(n) for n in ns])
pool = st.sampled_from(["datasets", "checkpoints", "datasets", "checkpoints", "nope"])
write = st.one_of(
    st.tuples(st.just("apply"), st.sampled_from(range(len(INTENTS))), st.booleans()),
    st.tuples(st.just("prefixes"), pool, st.lists(fresh, max_size=3),
              st.lists(fresh, max_size=1), st.booleans()),
    st.tuples(st.just("prefixes"), pool, st.lists(prefix, max_size=4),
              st.lists(prefix, max_size=2), st.booleans()),
    st.tuples(st.just("prefixes"), pool, lengths6, st.just([]), st.just(False)))
first = st.tuples(st.just("apply"), st.sampled_from([0, 1, 2]), st.just(False))


def _snapshot(store: SqliteStore) -> tuple[int, dict[str, bytes]]:
    return store.revision(), store.get_prefix(INTENT)[0]


def _assert_loadable(store: SqliteStore, ctl: Controller) -> None:
    """`crosszone check` accepts the stored state and every gateway of it compiles."""
    items, _ = store.get_prefix(INTENT)
    cluster = join_objects({k[len(INTENT):]: v for k, v in items.items()})  # as an agent does
    checked = parse_cluster(yaml.safe_dump(to_document(cluster)), "stored.yaml")  # = check
    assert split_cluster(checked) == split_cluster(cluster)
    for gw in cluster.gateways:
        compile_gateway(cluster, gw.name, lambda _: 1)
    assert split_cluster(Controller(store).cluster) == split_cluster(ctl.cluster)


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(first, st.lists(write, min_size=1, max_size=8))
def test_accepted_writes_stay_valid_rejected_writes_change_nothing(start: tuple, more: list
                                                                   ) -> None:
    writes = [start, *more]
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(str(Path(tmp) / "s.db"), poll_s=0.001)
        ctl = Controller(store)
        api = TestClient(create_app(ctl, "t"))
        for w in writes:
            before = _snapshot(store)
            if w[0] == "apply":
                _, k, dry = w
                r = api.post("/v1/intent", params={"dry_run": dry}, content=INTENTS[k],
                             headers=AUTH)
            else:
                _, pool, add, remove, dry = w
                r = api.post(f"/v1/pools/{pool}/prefixes", params={"dry_run": dry},
                             json={"add": add, "remove": remove}, headers=AUTH)
            assert r.status_code in (200, 422), (w, r.status_code, r.text)
            event(f"{w[0]} {r.status_code}")
            if r.status_code == 422 or dry or r.json()["revision"] is None:
                assert _snapshot(store) == before, w
            else:
                assert store.revision() == r.json()["revision"] > before[0]
                _assert_loadable(store, ctl)
