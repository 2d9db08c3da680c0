"""Run fixture rows through a runner (kernel or model) and compare with the expectation."""

from __future__ import annotations

from collections.abc import Callable

from crosszone.compile.encode import bind_ports
from crosszone.compile.tables import Tables
from crosszone.fastpath.testing import model
from crosszone.fastpath.testing.testrun import LOOPBACK_IFINDEX, test_ifindexes

from packet_fixtures import Fixture, tables

Runner = Callable[[bytes], model.Result]


def ifindexes(t: Tables, ingress: str | None) -> Callable[[str], int]:
    """Fake ifindexes, with lo's for the port the frame arrives on."""
    fake = test_ifindexes(t)
    return lambda name: LOOPBACK_IFINDEX if name == ingress else fake(name)


def model_runner(ingress: str | None) -> tuple[Runner, Tables]:
    """The reference model with the example tables bound as the kernel runner binds them."""
    bound = bind_ports(tables(), ifindexes(tables(), ingress))
    return (lambda frame: model.process(frame, bound, LOOPBACK_IFINDEX)), bound


def check(row: Fixture, res: model.Result, bound: Tables) -> None:
    """Assert everything the row expects."""
    names = {p.index: p.name for p in bound.ports}
    vpcs = {v.vpc_id: v.name for v in bound.vpcs}
    got = (
        res.action.name,
        res.reason.name,
        names.get(res.port) if res.port is not None else None,
        vpcs.get(res.vpc_id) if res.vpc_id is not None else None,
    )
    want = (row.action.name, row.reason.name, row.egress, row.vpc)
    assert got == want, f"{row.desc}: got {got}, want {want}"
    expected = row.out if row.out is not None else row.frame
    if res.data != expected:
        diff = next(
            (i for i, (a, b) in enumerate(zip(res.data, expected)) if a != b),
            min(len(res.data), len(expected)),
        )
        raise AssertionError(
            f"{row.desc}: output differs at byte {diff} (len {len(res.data)} vs {len(expected)})\n"
            f" got  {res.data[max(0, diff - 8) : diff + 24].hex()}\n"
            f" want {expected[max(0, diff - 8) : diff + 24].hex()}"
        )
