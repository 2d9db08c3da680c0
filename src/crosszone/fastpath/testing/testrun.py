"""Run frames through the real XDP program with BPF_PROG_TEST_RUN and report like the model.

Each frame runs once, non-live: the kernel returns the program's action and the rewritten bytes
without transmitting anything. The reason and egress port come from the program's per-CPU trace
record (CZ_CFG_TRACE), so the process is pinned to one CPU while it runs frames.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

from crosszone.abi import layout
from crosszone.abi.objects import object_path
from crosszone.abi.reasons import Reason, XdpAction
from crosszone.abi.ticks import kernel_tick_ns, ticks_at
from crosszone.compile.encode import bind_ports, encode_tables, u32
from crosszone.compile.tables import Port, Tables
from crosszone.fastpath.libbpf import BpfObject, xdp_ctx
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.sink import program
from crosszone.fastpath.testing.model import Result

LOOPBACK_IFINDEX = 1
FAKE_IFINDEX_BASE = 1000


def default_object() -> Path:
    """The gateway object built by `make build`."""
    for cand in (object_path("xdp_gateway"), Path.cwd() / "build" / "xdp_gateway.o"):
        if cand.exists():
            return cand
    raise FileNotFoundError("build/xdp_gateway.o not found: run `make build` first")


def test_ifindexes(t: Tables) -> Callable[[str], int]:
    """Port name -> a fake, distinct ifindex (test runs never transmit)."""
    by_name = {p.name: FAKE_IFINDEX_BASE + p.index for p in t.ports}
    return by_name.__getitem__


class TestRunner:
    """A loaded gateway program with tables written, ready to run frames."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        tables: Tables,
        obj_path: str | Path | None = None,
        *,
        ifindex_of: Callable[[str], int] | None = None,
        ingress_ifindex: int = LOOPBACK_IFINDEX,
    ) -> None:
        self.tables = bind_ports(tables, ifindex_of or test_ifindexes(tables))
        self.obj = BpfObject.open(obj_path or default_object())
        self.maps = GatewayMaps.of(self.obj)
        # Devmap slots must name a real device; lo is always there and is never sent to. The
        # trace flag makes the program leave the reason and port of each frame.
        traced = dataclasses.replace(self.tables, flags=self.tables.flags | layout.CZ_CFG_TRACE,
                                     _index={})
        program(self.maps, encode_tables(traced, devmap_ifindex=lambda p: LOOPBACK_IFINDEX))
        self.prog = self.obj.program("cz_gateway")
        self.ingress_ifindex = ingress_ifindex
        self.cpu = sorted(os.sched_getaffinity(0))[0]

    def run(self, frame: bytes) -> Result:
        """One frame through the kernel program."""
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {self.cpu})
        try:
            before = self.maps.last_trace(self.cpu).seq
            res = self.prog.test_run(frame, ctx=xdp_ctx(self.ingress_ifindex))
            tr = self.maps.last_trace(self.cpu)
        finally:
            os.sched_setaffinity(0, saved)
        if tr.seq == before:
            raise RuntimeError("the program left no trace record: was it run on another CPU?")
        action = XdpAction(res.retval)
        forwarded = action in (XdpAction.TX, XdpAction.REDIRECT)
        return Result(
            action,
            Reason(tr.reason),
            tr.port if forwarded else None,
            None if tr.vpc_id == layout.CZ_NO_VPC else tr.vpc_id,
            res.data_out,
        )

    def set_clock(self, ns: int, ticks: int | None = None) -> None:
        """The program's clocks (test builds only: build/xdp_gateway_testclock.o): ns, and the
        jiffies, by default ns cut into this kernel's ticks (as `PolicyState.ticks`)."""
        if "test_clock" not in self.maps.maps:
            raise RuntimeError("this object reads the real clock: load xdp_gateway_testclock.o")
        if ticks is None:
            ticks = ticks_at(ns, kernel_tick_ns())
        clock = self.maps.maps["test_clock"]
        clock.update((0).to_bytes(4, "little"), ns.to_bytes(8, "little"))
        clock.update((1).to_bytes(4, "little"), ticks.to_bytes(8, "little"))

    def clear_policy_state(self) -> None:
        """Forget every flow, refill every token bucket, zero the policy counters."""
        for name in ("flows", "vpc_buckets"):
            with self.maps.maps[name].mmap_values() as m:
                m[:] = bytes(len(m))
        stats = self.maps.maps["policy_stats"]
        zero = bytes(stats.value_size)
        for v in self.tables.vpcs:
            stats.update_percpu(u32(v.vpc_id), [zero] * stats.ncpus)

    def port_name(self, index: int | None) -> str | None:
        """Interface name of a port index."""
        if index is None:
            return None
        port: Port = next(p for p in self.tables.ports if p.index == index)
        return port.name

    def close(self) -> None:
        """Unload the program and its maps."""
        self.maps.close()
        self.obj.close()

    def __enter__(self) -> TestRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
