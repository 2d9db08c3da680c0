"""The fast path's watchdog and the agent's fail-closed (issue 25 point 1), with fakes: a fake
XDP query (port -> attached program id), a fake applier and a fake bgpd socket (`fast`).

Checks: a detached or replaced program is found at the next check and the gateway fails closed
(neighbours shut straight away, before the configuration is applied; health `failed-closed`;
the status written at once with the `fastpath` object, the message naming the port, what it
has and the expected id); the reconcile loop cannot clear the health; an upgrade that re-pins
is followed; the gateway comes back when the program does; a gateway without `bgp:` and an
agent without routing still fail closed and say they cannot withdraw; a fail-closed while the
main loop is inside an FRR apply shuts the neighbours at once and applies its configuration
only after that apply (serialised).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from crosszone.agent.agent import Agent, gateway_ports
from crosszone.agent.fastpath_guard import GONE, NO_PIN, FastPathGuard, PortForwarding, Report
from crosszone.agent.frr_apply import routing_delta
from crosszone.agent.routing_owner import RoutingOwner
from crosszone.compile.diff import DictSink
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import STATUS
from unit.test_routing_owner import IFX, FakeApplier, Log, LoggingSink, _objects, _put

PROG = 41


class Ports:
    """The fake kernel: what each port has attached, and the pinned program."""

    def __init__(self) -> None:
        self.attached = {"compute0": PROG, "storage0": PROG}
        self.pinned = PROG
        self.queries = 0

    def query(self, ifname: str) -> int:
        self.queries += 1
        return self.attached.get(ifname, GONE)

    def expected(self) -> int:
        if self.pinned == 0:
            raise FileNotFoundError("no pin")
        return self.pinned


class Fast:
    """The fake bgpd socket: records each command batch, in the shared log."""

    def __init__(self, log: Log) -> None:
        self.log, self.sent = log, []  # type: ignore[var-annotated]

    def __call__(self, cmds: list[str]) -> None:
        self.sent.append(cmds)
        self.log.events.append(("fast", cmds))


@pytest.fixture
def gw(tmp_path: Path):
    store = SqliteStore(str(tmp_path / "s.db"))
    log = Log()
    applier = FakeApplier(log)
    fast = Fast(log)
    owner = RoutingOwner("gw-a", applier, hostname="h", fast=fast)
    agent = Agent("gw-a", store, LoggingSink(log), IFX, routing=owner)
    ports = Ports()
    guard = FastPathGuard(gateway_ports(agent), ports.expected, agent.fastpath_changed,
                          query=ports.query)
    agent.guard = guard
    _put(store, _objects())
    agent.step(0)
    assert owner.mode == "managed"
    yield store, agent, owner, applier, fast, ports, guard, log
    store.close()


def _status(store: SqliteStore) -> dict:
    raw = store.get(STATUS + "gw-a")
    assert raw is not None
    return json.loads(raw)


def test_no_port_no_check_before_the_first_reconcile(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    agent = Agent("gw-a", store, DictSink(), IFX)
    seen: list[Report] = []
    guard = FastPathGuard(gateway_ports(agent), lambda: PROG, seen.append, query=lambda i: 0)
    assert guard.check() is None and seen == []
    store.close()


def test_all_attached_is_ok_and_reported(gw) -> None:
    store, agent, _owner, _applier, fast, _ports, guard, _ = gw
    r = guard.check()
    assert r is not None and r.ok and r.problem() == ""
    assert agent.health == "ok" and fast.sent == []
    st = _status(store)
    assert st["health"] == "ok"
    assert st["fastpath"] == {"ok": True, "expected": PROG,
                              "attached": {"compute0": PROG, "storage0": PROG},
                              "since": r.since}


@pytest.mark.parametrize("attached, says", [
    (0, "compute0 has nothing attached"),
    (99, "compute0 has program id 99"),
])
def test_a_detached_or_replaced_program_fails_closed(gw, attached: int, says: str) -> None:
    store, agent, owner, applier, fast, ports, guard, log = gw
    guard.check()
    n_configs = len(applier.configs)
    ports.attached["compute0"] = attached
    guard.check()
    # the neighbours were shut first, straight to bgpd, then the closed configuration applied
    assert fast.sent == [["configure terminal", "router bgp 65100", "neighbor 10.9.0.1 shutdown",
                          "end"]]
    kinds = [k for k, _ in log.events]
    assert kinds[-2:] == ["fast", "frr"]
    assert len(applier.configs) == n_configs + 1
    assert " neighbor 10.9.0.1 shutdown\n" in applier.configs[-1]
    assert agent.health == "failed-closed"
    assert says in agent.message and f"expected program id {PROG}" in agent.message
    assert "BGP neighbours 10.9.0.1 shut" in agent.message
    st = _status(store)  # written at once, without a step of the main loop
    assert st["health"] == "failed-closed" and says in st["message"]
    assert st["fastpath"]["ok"] is False and st["fastpath"]["expected"] == PROG
    assert st["fastpath"]["attached"] == {"compute0": attached, "storage0": PROG}
    assert st["routing"]["shutdown"] is True
    text = generate_latest(agent.metrics.registry).decode()
    assert 'crosszone_fastpath_own_program{interface="compute0"} 0.0' in text
    assert "crosszone_fail_closed_total 1.0" in text
    # the reconcile loop's next revision does not clear it, nor open the neighbours
    agent.step(0)
    assert agent.health == "failed-closed"
    assert " neighbor 10.9.0.1 shutdown\n" in applier.configs[-1]
    # the same fault seen again: nothing more is done
    guard.check()
    assert len(fast.sent) == 1 and owner.closed


def test_the_program_back_announces_again(gw) -> None:
    store, agent, owner, applier, _fast, ports, guard, _ = gw
    guard.check()
    ports.attached["storage0"] = 0
    guard.check()
    assert agent.health == "failed-closed"
    ports.attached["storage0"] = PROG
    r = guard.check()
    assert r is not None and r.ok
    assert agent.health == "ok" and not owner.closed
    assert "shutdown" not in applier.configs[-1]
    st = _status(store)
    assert st["health"] == "ok" and st["fastpath"]["ok"] is True
    assert st["routing"]["shutdown"] is False
    text = generate_latest(agent.metrics.registry).decode()
    assert "crosszone_fail_closed_recoveries_total 1.0" in text
    assert 'crosszone_fastpath_own_program{interface="storage0"} 1.0' in text


def test_the_ports_stop_forwarding_in_the_kernel_first_and_forward_as_before_after(
        gw, tmp_path: Path) -> None:
    """Failed closed, the gateway's ports forward nothing through the kernel either (the
    routers' data-plane checks then fail as for a drop-all), before BGP is shut; once the
    program is back each port gets its own earlier value, before the neighbours open."""
    store, agent, _owner, _applier, _fast, ports, guard, log = gw
    conf = tmp_path / "conf"
    for port, old in (("compute0", "1"), ("storage0", "2")):
        (conf / port).mkdir(parents=True)
        (conf / port / "forwarding").write_text(old + "\n")
    pf = PortForwarding(conf)
    real_off, real_restore = pf.off, pf.restore
    pf.off = lambda ports_: (log.events.append(("fwd-off", ports_)), real_off(ports_))[1]  # type: ignore[method-assign]
    pf.restore = lambda: (log.events.append(("fwd-on", None)), real_restore())[1]  # type: ignore[method-assign]
    agent.port_forwarding = pf
    guard.check()
    ports.attached["compute0"] = 0
    guard.check()
    kinds = [k for k, _ in log.events]
    assert kinds.index("fwd-off") < kinds.index("fast")  # before the BGP shutdown
    assert {p: (conf / p / "forwarding").read_text() for p in ("compute0", "storage0")} == \
        {"compute0": "0", "storage0": "0"}
    assert "kernel forwarding off on compute0, storage0" in _status(store)["message"]
    ports.attached["compute0"] = PROG
    guard.check()
    assert agent.health == "ok"
    assert [(conf / p / "forwarding").read_text() for p in ("compute0", "storage0")] == \
        ["1", "2"]
    after = [k for k, _ in log.events][len(kinds):]
    assert "fwd-on" in after and "frr" in after[after.index("fwd-on"):]  # then BGP opens
    assert pf.saved == {}
    # a port that cannot be written is said, the others still go off
    (conf / "storage0" / "forwarding").unlink()
    ports.attached["compute0"] = 0
    guard.check()
    assert "kernel forwarding not changed on storage0" in agent.message
    assert (conf / "compute0" / "forwarding").read_text() == "0"


def test_a_new_pinned_program_is_followed(gw) -> None:
    _store, agent, _owner, _applier, fast, ports, guard, _ = gw
    guard.check()
    ports.pinned = 77  # an upgrade: re-pinned, then attached
    ports.attached = {"compute0": 77, "storage0": 77}
    r = guard.check()
    assert r is not None and r.ok and r.expected == 77
    assert agent.health == "ok" and fast.sent == []


def test_a_missing_pin_or_port_fails_closed(gw) -> None:
    _store, agent, _owner, _applier, _fast, ports, guard, _ = gw
    ports.pinned = 0
    ports.attached = {"compute0": PROG}
    r = guard.check()
    assert r is not None and not r.ok and r.expected == NO_PIN
    assert "storage0 has no such interface" in agent.message
    assert "no program pinned to expect" in agent.message


def test_what_is_attached_while_failed_is_kept_current(gw) -> None:
    store, agent, _owner, _applier, fast, ports, guard, _ = gw
    ports.attached["compute0"] = 0
    guard.check()
    ports.attached["compute0"] = 99  # now a drop-all where nothing was
    guard.check()
    assert "compute0 has program id 99" in agent.message
    assert _status(store)["fastpath"]["attached"]["compute0"] == 99
    assert len(fast.sent) == 1


def test_unmanaged_routing_fails_closed_but_says_it_cannot_withdraw(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    log = Log()
    fast = Fast(log)
    owner = RoutingOwner("gw-a", FakeApplier(log), hostname="h", fast=fast)
    agent = Agent("gw-a", store, DictSink(), IFX, routing=owner)
    _put(store, _objects(bgp=False))
    agent.step(0)
    ports = Ports()
    guard = FastPathGuard(gateway_ports(agent), ports.expected, agent.fastpath_changed,
                          query=ports.query)
    ports.attached["compute0"] = 0
    guard.check()
    assert agent.health == "failed-closed" and fast.sent == []
    assert "routing is unmanaged" in agent.message and "cannot withdraw" in agent.message
    assert _status(store)["health"] == "failed-closed"
    store.close()


def test_an_agent_without_routing_fails_closed_and_says_so(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    agent = Agent("gw-a", store, DictSink(), IFX)
    _put(store, _objects())
    agent.step(0)
    guard = FastPathGuard(gateway_ports(agent), lambda: PROG, agent.fastpath_changed,
                          query=lambda i: 0)
    guard.check()
    assert agent.health == "failed-closed"
    assert "--no-routing" in agent.message and "cannot withdraw" in agent.message
    store.close()


class SlowApplier(FakeApplier):
    """An apply that takes a while (frr-reload.py) and says when it runs."""

    def __init__(self, log: Log) -> None:
        super().__init__(log)
        self.inside = threading.Event()
        self.release = threading.Event()
        self.slow = False
        self.active = 0
        self.overlaps = 0

    def apply(self, config: str):  # type: ignore[no-untyped-def]
        self.active += 1
        self.overlaps += self.active > 1
        try:
            if self.slow:
                self.inside.set()
                self.release.wait(5)
            return super().apply(config)
        finally:
            self.active -= 1


def test_fail_closed_during_an_apply_shuts_at_once_and_applies_after(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    log = Log()
    applier = SlowApplier(log)
    fast = Fast(log)
    owner = RoutingOwner("gw-a", applier, hostname="h", fast=fast, check_every=0)
    agent = Agent("gw-a", store, LoggingSink(log), IFX, routing=owner)
    _put(store, _objects())
    agent.step(0)
    ports = Ports()
    guard = FastPathGuard(gateway_ports(agent), ports.expected, agent.fastpath_changed,
                          query=ports.query)
    guard.check()
    applier.slow = True
    _put(store, _objects(extra_vpc=True))
    main = threading.Thread(target=agent.step, args=(0,))
    main.start()
    assert applier.inside.wait(5)  # the main loop is inside an FRR apply
    ports.attached["compute0"] = 0
    checker = threading.Thread(target=guard.check)
    checker.start()
    deadline = time.monotonic() + 5
    while not fast.sent and time.monotonic() < deadline:
        time.sleep(0.001)
    assert fast.sent, "the neighbours were not shut while the apply ran"
    assert agent.health == "failed-closed"
    n = len(applier.configs)
    time.sleep(0.05)
    assert len(applier.configs) == n  # the closed configuration waits for the apply
    applier.release.set()
    main.join(5)
    checker.join(5)
    assert applier.overlaps == 0
    assert " neighbor 10.9.0.1 shutdown\n" in applier.configs[-1]
    assert "network 100.66.0.0/16" not in applier.configs[-1] or owner.closed
    assert agent.health == "failed-closed"
    store.close()


def test_the_guard_thread_checks_within_its_period(gw) -> None:
    _store, agent, _owner, _applier, fast, ports, guard, _ = gw
    guard.period = 0.005
    guard.start()
    try:
        deadline = time.monotonic() + 2
        while guard.checks < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        t0 = time.monotonic()
        ports.attached["compute0"] = 0
        while not fast.sent and time.monotonic() < t0 + 2:
            time.sleep(0.001)
        assert fast.sent and time.monotonic() - t0 < 0.5
        assert agent.health == "failed-closed"
    finally:
        guard.stop()


def test_a_shutdown_line_goes_the_direct_path() -> None:
    old = "router bgp 1\n neighbor 10.9.0.1 remote-as 2\nexit\n"
    new = "router bgp 1\n neighbor 10.9.0.1 remote-as 2\n neighbor 10.9.0.1 shutdown\nexit\n"
    d = routing_delta(old, new)
    assert d is not None and d.added == ((("router bgp 1",), "neighbor 10.9.0.1 shutdown"),)
    back = routing_delta(new, old)
    assert back is not None
    assert "no neighbor 10.9.0.1 shutdown" in back.commands()


def test_an_agents_scrape_names_each_metric_family_once(gw) -> None:
    """The watchdog's gauges beside the routing reader's (which has its own
    `crosszone_fastpath_attached{device}`): one HELP line per family, or Prometheus rejects the
    whole scrape."""
    from crosszone.agent.routing import RoutingCollector

    _store, agent, _owner, _applier, _fast, ports, guard, _log = gw
    links = '[{"ifname": "compute0", "xdp": {"prog": {"id": 41}}}]'
    sessions = RoutingCollector(None, run=lambda argv: links)
    agent.metrics.registry.register(sessions)
    guard.check()
    ports.attached["compute0"] = 0
    guard.check()
    text = generate_latest(agent.metrics.registry).decode()
    helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")]
    assert len(helps) == len(set(helps)), sorted(h for h in helps if helps.count(h) > 1)
    assert 'crosszone_fastpath_attached{device="compute0"} 1.0' in text
    assert 'crosszone_fastpath_own_program{interface="compute0"} 0.0' in text
