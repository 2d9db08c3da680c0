"""bench migrate's accounting of the probe's losses (no emulator needed)."""

from __future__ import annotations

from crosszone_lab.bench.migrate import loss_seconds, lost_in, step_lines
from crosszone_lab.workload.udp_probe import Record

T0 = 1_000.0


def _stream(sent_at: list[float], lost: set[int]) -> tuple[Record, Record]:
    sent, recv = Record.empty(), Record.empty()
    for i, t in enumerate(sent_at):
        sent.seq.append(i)
        sent.ns.append(int(t * 1e9))
        if i not in lost:
            recv.seq.append(i)
            recv.ns.append(int(t * 1e9) + 1000)
    return sent, recv


def test_losses_are_put_in_the_second_they_were_sent_before_or_after_the_start() -> None:
    times = [T0 - 1.5, T0 - 0.2, T0 + 0.1, T0 + 0.9, T0 + 2.5, T0 + 2.6]
    records = {"to_storage4": _stream(times, {0, 1, 3}),
               "to_compute4": _stream(times, {4, 5})}
    assert loss_seconds(records, T0) == [[-2, 1], [-1, 1], [0, 1], [2, 2]]
    assert loss_seconds({"to_storage4": _stream(times, set())}, T0) == []


def test_lost_in_counts_only_the_window_and_splits_directions() -> None:
    times = [T0 + i * 0.001 for i in range(100)]
    records = {"to_storage4": _stream(times, {10, 11, 50}),
               "to_compute6": _stream(times, {60})}
    whole = lost_in(records, 1_000_000, 1, T0, float("inf"))
    assert (whole["lost"], whole["lost_to_storage"], whole["lost_to_compute"]) == (4, 3, 1)
    assert whole["max_gap_ms"] == 2.0
    part = lost_in(records, 1_000_000, 1, T0 + 0.0455, T0 + 0.0705)
    assert (part["lost"], part["lost_to_storage"], part["lost_to_compute"]) == (2, 1, 1)


def test_step_lines_split_convergence_at_the_last_changed_route() -> None:
    events = [{"event": "step", "step": 1, "weight_new": 10, "t": T0},
              {"event": "step", "step": 2, "weight_new": 50, "t": T0 + 5},
              {"event": "finished", "step": 2, "weight_new": 50, "t": T0 + 9}]
    moves = [{"t": T0, "converge_ms": 900.0, "kernel_ms": 180.0, "announce_ms": 10.0},
             {"t": T0 + 5, "converge_ms": 950.0, "kernel_ms": 200.0, "announce_ms": 12.0}]
    # changes: one before the first step, two inside it, one after its kernels converged
    changes = [T0 - 1, T0 + 0.05, T0 + 0.110, T0 + 0.5, T0 + 5.120]
    writes = [T0 + 0.150, T0 + 0.170, T0 + 0.9, T0 + 5.190]
    lines = step_lines(events, moves, {}, 1_000_000, 1, [(T0 + 6, 2)], "legacy->crosszone",
                       changes, writes)
    assert [(x["update_rcvd_ms"], x["written_ms"], x["after_update_ms"]) for x in lines] == [
        (110.0, 170.0, 60.0), (120.0, 190.0, 70.0)]
    assert [x["failed_requests"] for x in lines] == [0, 2]
    none = step_lines(events, moves, {}, 1_000_000, 1, [], "x", [T0 + 3], None)
    assert [(x["update_rcvd_ms"], x["written_ms"], x["after_update_ms"]) for x in none] == [
        (None, None, None)] * 2


def test_step_lines_carry_the_products_convergence_next_to_the_routers_kernels() -> None:
    events = [{"event": "step", "step": 1, "weight_new": 10, "t": T0},
              {"event": "finished", "step": 1, "weight_new": 10, "t": T0 + 9}]
    # the product's driver: converge_ms is its own (agents applied, share reached), the
    # kernels' time comes from the emulator's watch beside it
    agents = [{"t": T0, "converge_ms": 1400.0, "kernel_ms": 650.0, "announce_ms": 3.0,
               "applied_ms": 900.0, "share": 9.1, "share_unit": "bytes"}]
    writes = [T0 + 0.6, T0 + 1.2]
    line = step_lines(events, agents, {}, 1_000_000, 1, [], "x", None, writes)[0]
    assert (line["converge_ms"], line["kernel_converge_ms"], line["driver"]) == (
        1400.0, 650.0, "agents")
    assert line["written_ms"] == 600.0  # the routers' logs are read within the kernels' time
    assert (line["applied_ms"], line["share"], line["share_unit"]) == (900.0, 9.1, "bytes")
    # the kernels never held the step's weights within the watch's time: no kernel figure,
    # and no router log is read against the product's own
    unseen = [{"t": T0, "converge_ms": 1400.0, "kernel_ms": None, "announce_ms": 3.0}]
    line = step_lines(events, unseen, {}, 1_000_000, 1, [], "x", None, writes)[0]
    assert (line["converge_ms"], line["kernel_converge_ms"], line["written_ms"]) == (
        1400.0, None, None)
