"""The fixture table through the real XDP program (BPF_PROG_TEST_RUN) and the model: both must
give the row's verdict, reason, egress, VPC and output bytes."""

from __future__ import annotations

import pytest

from crosszone.fastpath.testing.testrun import TestRunner

from fixture_runs import check, ifindexes, model_runner
from packet_fixtures import fixtures, ids, tables

ROWS = fixtures()


@pytest.fixture(scope="module")
def runners(gateway_object):
    made: dict = {}

    def get(ingress):
        if ingress not in made:
            made[ingress] = TestRunner(
                tables(), gateway_object, ifindex_of=ifindexes(tables(), ingress)
            )
        return made[ingress]

    yield get
    for r in made.values():
        r.close()


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_kernel_matches_fixture(row, runners):
    runner = runners(row.ingress)
    check(row, runner.run(row.frame), runner.tables)
    run_model, bound = model_runner(row.ingress)
    check(row, run_model(row.frame), bound)


def test_counters_count_by_reason_and_vpc(runners):
    """Every verdict increments its reason counter; forwarded packets count per VPC."""
    runner = runners(None)
    before = runner.maps.reason_stats()
    fwd = [r for r in ROWS if r.ingress is None and r.egress == "storage0" and r.vpc == "tenant-a"]
    vpc_a = next(v.vpc_id for v in runner.tables.vpcs if v.name == "tenant-a")
    vbefore = runner.maps.vpc_stats(vpc_a).to_storage_packets
    for row in ROWS:
        if row.ingress is None:
            runner.run(row.frame)
    after = runner.maps.reason_stats()
    for reason in {r.reason for r in ROWS}:
        n = sum(1 for r in ROWS if r.ingress is None and r.reason == reason)
        assert after[reason][0] - before[reason][0] == n, reason
    vafter = runner.maps.vpc_stats(vpc_a)
    assert vafter.to_storage_packets - vbefore == len(fwd)
    assert vafter.to_storage_bytes > 0
