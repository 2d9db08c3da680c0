"""CLI: `crosszone migrate plan|standby|start|status|pause|resume|rollback|finish|run`.

The same command for a real deployment and for the emulator. What it drives comes from a
*deployment*:

- a real one is described by a file (`--deployment FILE`, or CROSSZONE_MIGRATION): the store,
  the legacy gateways and their adapter, where the agents' metrics are read, the convergence
  tolerance (docs/migrate.md, "On real gateways"); the driver is `agent_driver.AgentDriver`;
- without a file, a provider that a tool registered (`add_provider`) may supply one: the lab's
  emulator registers its own, for a deployment brought up by `crosszone emulate up`.

The migration state lives in the store. Exactly one process, the runner, performs a migration:
the one that holds the runner's lease (engine.py, lease.py): the `start` that began it, or a
`resume`/`finish` run after it stopped (a held position: paused, or all traffic moved), or
after it was killed. While a runner is alive, the other commands (and the controller's API)
queue an operation for it and wait for its answer (done, refused and why, expired); when the
runner died meanwhile (its lease expired), the command withdraws its operation and becomes the
runner itself. A second runner beside a live one refuses, naming the owner, and exits 1.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from crosszone.migrate import engine as eng
from crosszone.migrate import lease as leases
from crosszone.migrate import op_queue
from crosszone.migrate.lease import LeaseError
from crosszone.migrate.plan import (
    DEFAULT_AGENT_LOST_S,
    Plan,
    PlanError,
    load_guards,
    parse_dwell,
    parse_steps,
)
from crosszone.migrate.plan_schema import checked
from crosszone.store.store import Store, open_store

#: States in which a CLI runner stops and hands the decision back to the operator.
HELD = ("paused", "shifted")
#: The store an agent uses by default (`crosszone agent --store`).
DEFAULT_STORE = "sqlite:///var/lib/crosszone/state.db"
DEPLOYMENT_ENV = "CROSSZONE_MIGRATION"
#: How long `migrate finish` runs the drain by default before it hands back (`--timeout`).
FINISH_TIMEOUT = "30m"
#: How often a command that queued an operation reads its answer.
POLL_S = 0.2


@dataclass
class Deployment:
    """What a migration drives: its store and a driver for it.

    make_driver(store, log) builds the engine's Driver; `errors` are the exceptions the driver
    raises when it cannot do a move (reported as one line; the state is kept); close() releases
    what the driver holds."""

    store_url: str | None
    make_driver: Callable[[Store, Log], eng.Driver]
    errors: tuple[type[BaseException], ...] = ()
    close: Callable[[eng.Driver], None] = lambda _d: None
    #: the crosszone gateways (`standby`), when the deployment knows them without the store
    gateways: list[str] = field(default_factory=list)


#: Where a driver says what it is doing.
Log = Callable[[str], None]
#: A provider returns the deployment it knows (None: it has none now).
Provider = Callable[[], "Deployment | None"]
_PROVIDERS: list[Provider] = []


def add_provider(provider: Provider) -> None:
    """Let a tool supply the deployment when no file is given (the lab's emulator does)."""
    if provider not in _PROVIDERS:
        _PROVIDERS.append(provider)


def fail(msg: str, code: int = 1) -> typer.Exit:
    Console(stderr=True).print(f"[red]{escape(msg)}[/red]", highlight=False)
    return typer.Exit(code)


def _log(msg: str) -> None:
    Console(stderr=True).print(escape(msg), highlight=False)


def find_deployment(path: Path | None) -> Deployment | None:
    """The deployment of a file (--deployment, else $CROSSZONE_MIGRATION), else a provider's,
    else None; typer.Exit (2) when the file cannot be used."""
    path = path or (Path(os.environ[DEPLOYMENT_ENV]) if os.environ.get(DEPLOYMENT_ENV)
                    else None)
    if path is not None:
        from crosszone.migrate.deployment_file import DeploymentError, load

        try:
            return load(path)
        except DeploymentError as exc:
            raise fail(str(exc), 2) from None
    for provider in _PROVIDERS:
        dep = provider()
        if dep is not None:
            return dep
    return None


def deployment(path: Path | None) -> Deployment:
    """find_deployment, or typer.Exit (2) saying what to give when there is none."""
    dep = find_deployment(path)
    if dep is not None:
        return dep
    raise fail("no deployment to migrate: give --deployment FILE (docs/migrate.md, \"On real "
                "gateways\"), or bring up the emulator (`crosszone emulate up`)", 2)


def _store(url: str | None, dep: Deployment | None) -> Store:
    try:
        return open_store(url or (dep.store_url if dep else None)
                          or os.environ.get("CROSSZONE_STORE") or DEFAULT_STORE)
    except ValueError as exc:
        raise fail(f"--store: {exc}", 2) from None


def _print(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(doc))
        return
    c = Console()
    c.print(f"state [bold]{doc['state']}[/bold], step {doc['step']}, "
            f"weight on new gateways {doc['weight_new']}%")
    if doc.get("error"):
        c.print(f"[red]error: {escape(str(doc['error']))}[/red]", highlight=False)
    if doc.get("reason"):
        c.print(f"reason: {escape(str(doc['reason']))}", highlight=False)
    for gw, why in sorted((doc.get("lost") or {}).items()):
        c.print(f"[red]lost gateway {escape(str(gw))}[/red] (drained): {escape(str(why))}",
                highlight=False)
    for g in doc.get("guards", []):
        c.print(f"  guard {g['name']}: {g['value']} (limit {g['limit']}) "
                + ("[green]ok[/green]" if g["ok"] else "[red]BREACHED[/red]"))
    for h in doc.get("history", [])[-8:]:
        extra = ""
        if h.get("converge_ms") is not None:
            extra = f" converge {h['converge_ms']} ms"
            if h.get("share") is not None:
                extra += f", share {h['share']}%" + ("" if h.get("share_reached")
                                                     else " (not reached)")
        c.print(escape(f"  {time.strftime('%H:%M:%S', time.localtime(h['t']))} {h['event']} "
                       f"step {h['step']} {h['weight_new']}%{extra}"
                       + (f" ({h['reason']})" if h.get("reason") else "")), highlight=False)


def make_plan(source: str, target: str, canary: str | None, steps: str, dwell: str,
              guards: Path | None, agent_lost: str | None = None) -> Plan:
    """A Plan from the command-line options (PlanError on a bad one)."""
    d = parse_dwell(dwell)
    lost = DEFAULT_AGENT_LOST_S
    if agent_lost is not None:
        try:
            lost = parse_dwell(agent_lost)
        except PlanError as exc:
            raise PlanError(str(exc).replace("--dwell", "--agent-lost")) from None
    return checked(Plan(source=source, target=target, canary=canary, steps=parse_steps(steps),
                        dwell_s=d, canary_dwell_s=d, agent_lost_s=lost,
                        limits=load_guards(guards)))


class _Runner:
    """An engine over a deployment's driver, closed once done."""

    def __init__(self, store: Store, dep: Deployment) -> None:
        self.dep = dep
        self.driver = dep.make_driver(store, _log)
        self.engine = eng.Engine(store, self.driver, log=_log)
        beat = getattr(self.driver, "beat", None)
        if beat is not None:  # a move that waits keeps the heartbeat (agent_driver)
            self.driver.beat = self.engine.heartbeat  # type: ignore[attr-defined]

    def run(self, timeout: float | None = None,
            stop: Callable[[eng.State], bool] = lambda s: s.state in eng.FINAL + HELD
            ) -> eng.State:
        """Be the runner until `stop` (by default: the migration is final or held for the
        operator) or `timeout` seconds passed."""
        try:
            return self.engine.run(stop=stop, timeout=timeout)
        except self.dep.errors as exc:
            raise fail(f"the driver failed: {exc} (the state is kept: `crosszone migrate "
                        "resume` continues from it)") from None
        except LeaseError as exc:
            raise fail(str(exc)) from None

    def acquire(self) -> None:
        """Take the runner's lease (exit 1 naming the owner of a live one)."""
        try:
            self.engine.acquire()
        except LeaseError as exc:
            raise fail(str(exc)) from None

    def close(self) -> None:
        self.dep.close(self.driver)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add the `migrate` group."""
    mig = typer.Typer(help="Move traffic from legacy to crosszone gateways: canary, weighted "
                      "steps, guards, rollback, drain (docs/migrate.md).", no_args_is_help=True)
    app.add_typer(mig, name="migrate")

    source_opt = typer.Option("legacy", "--from", help="Gateway kind that carries traffic now.")
    target_opt = typer.Option("crosszone", "--to", help="Gateway kind to move traffic to.")
    canary_opt = typer.Option(None, "--canary", help="VPC whose storage-facing prefixes the new "
                              "gateways serve alone first (a VPC without production traffic).")
    steps_opt = typer.Option("1,10,25,50,100", "--steps", help="Percent on the new gateways.")
    dwell_opt = typer.Option("30s", "--dwell", help="How long each step holds its guards.")
    guards_opt = typer.Option(None, "--guards", help="YAML: guard name -> limit.")
    lost_opt = typer.Option(None, "--agent-lost", help="How long a crosszone gateway may give "
                            "no sign of life (status, metrics) before it is lost: drained and "
                            f"the migration rolled back (default {DEFAULT_AGENT_LOST_S:g}s).")
    store_opt = typer.Option(None, "--store", help="Store URL (default: the deployment's, else "
                             f"CROSSZONE_STORE, else {DEFAULT_STORE}).")
    dep_opt = typer.Option(None, "--deployment", help="The deployment to migrate (YAML: "
                           "legacy gateways and adapter, agents' metrics; docs/migrate.md). "
                           f"Default: ${DEPLOYMENT_ENV}, else the emulator's.")
    json_opt = typer.Option(False, "--json", help="Print JSON.")

    @mig.command("plan")
    def plan_cmd(source: str = source_opt, target: str = target_opt,
                 canary: str | None = canary_opt, steps: str = steps_opt,
                 dwell: str = dwell_opt, guards: Path | None = guards_opt,
                 agent_lost: str | None = lost_opt, as_json: bool = json_opt) -> None:
        """The steps and the checks at each, without changing anything."""
        try:
            plan = make_plan(source, target, canary, steps, dwell, guards, agent_lost)
        except PlanError as exc:
            raise fail(str(exc), 2) from None
        phases = plan.describe()
        if as_json:
            print(json.dumps({"plan": plan.to_json(), "phases": phases}))
            return
        for ph in phases:
            Console().print(ph)

    @mig.command("standby")
    def standby_cmd(store: str | None = store_opt, dep_file: Path | None = dep_opt,
                    gateways: list[str] = typer.Option(None, "--gateway", help="A crosszone "
                                                       "gateway (repeat; default: every "
                                                       "gateway of the intent).")) -> None:
        """Put the crosszone gateways on standby before a migration: BGP sessions up,
        nothing announced, so that they take no traffic until the migration gives them some."""
        from crosszone.migrate.agent_driver import agent_gateways, standby

        dep = find_deployment(dep_file) if store is None or dep_file else None
        s = _store(store, dep)
        names = list(gateways or []) or (dep.gateways if dep else []) or agent_gateways(s)
        if not names:
            raise fail("no crosszone gateway: the store holds no intent (crosszone apply) "
                        "and none was given (--gateway)")
        state = eng.read_state(s)
        if state.state in eng.ACTIVE:
            raise fail(f"a migration is under way (state {state.state}): standby would take "
                        "its traffic off the crosszone gateways")
        rev = standby(s, names)
        _log(f"standby (routing revision {rev}): {', '.join(names)} announce nothing until "
             "a migration moves traffic to them")

    @mig.command("start")
    def start(source: str = source_opt, target: str = target_opt,
              canary: str | None = canary_opt, steps: str = steps_opt,
              dwell: str = dwell_opt, guards: Path | None = guards_opt,
              agent_lost: str | None = lost_opt,
              store: str | None = store_opt, dep_file: Path | None = dep_opt,
              as_json: bool = json_opt) -> None:
        """Parity check, canary, then the steps; runs until all traffic moved (or held, or
        rolled back: a lost gateway or a guard breach, exit 0, `status` says why)."""
        try:
            plan = make_plan(source, target, canary, steps, dwell, guards, agent_lost)
        except PlanError as exc:
            raise fail(str(exc), 2) from None
        dep = deployment(dep_file)
        s = _store(store, dep)
        runner = _Runner(s, dep)
        try:
            runner.acquire()
            try:
                runner.engine.start(plan)
            except (eng.MigrationError, LeaseError) as exc:
                raise fail(str(exc)) from None
            except dep.errors as exc:
                raise fail(f"the driver failed: {exc}") from None
            runner.run()
        finally:
            runner.engine.release()
            runner.close()
        _print(eng.status(s), as_json)

    @mig.command("status")
    def status(store: str | None = store_opt, dep_file: Path | None = dep_opt,
               as_json: bool = json_opt) -> None:
        """State, step, weight on the new gateways, history, guards."""
        dep = find_deployment(dep_file) if store is None else None
        _print(eng.status(_store(store, dep)), as_json)

    def operate(op: str, store: str | None, dep_file: Path | None, as_json: bool,
                timeout: float | None = None) -> None:
        dep = deployment(dep_file) if store is None or dep_file else None
        s = _store(store, dep)
        try:
            eng.check_op(eng.read_state(s), op)
        except eng.MigrationError as exc:
            raise fail(str(exc)) from None
        if eng.runner_alive(s, time.time()):
            answer = _queue_and_wait(s, op)
            if answer is not None:
                _print(eng.status(s), as_json)
                if answer["status"] != op_queue.DONE:
                    raise fail(f"{op} {answer['status']}: {answer.get('why')}")
                return
            _log(f"the runner stopped before it took the {op} (its lease expired): this "
                 "command performs it and runs the migration itself")
        runner = _Runner(s, dep or deployment(dep_file))
        st = None
        try:
            runner.acquire()
            try:
                runner.engine.apply(op)
            except (eng.MigrationError, LeaseError) as exc:
                raise fail(str(exc)) from None
            except runner.dep.errors as exc:
                raise fail(f"the driver failed: {exc}") from None
            if op in ("resume", "finish"):
                st = runner.run(timeout)
        finally:
            runner.engine.release()
            runner.close()
        _print(eng.status(s), as_json)
        if op == "finish" and st is not None and st.state == "draining":
            raise fail(f"the drain did not end within {timeout:g} s (--timeout): the "
                       f"{st.the_plan.source} gateways still forwarded; the migration stays "
                       "draining: `finish` again goes on, `rollback` ends it")

    for op, doc in (("pause", "Hold the current step (guards still read)."),
                    ("resume", "Continue from the current step (also after a killed runner)."),
                    ("rollback", "All traffic back to the old gateways at once.")):
        def command(store: str | None = store_opt, dep_file: Path | None = dep_opt,
                    as_json: bool = json_opt, _op: str = op) -> None:
            operate(_op, store, dep_file, as_json)
        command.__doc__ = doc
        mig.command(op)(command)

    @mig.command("finish")
    def finish(store: str | None = store_opt, dep_file: Path | None = dep_opt,
               as_json: bool = json_opt,
               timeout: str = typer.Option(FINISH_TIMEOUT, "--timeout", help="How long this "
                                           "command runs the drain before it hands back "
                                           "(exit 1, the migration still draining).")) -> None:
        """Drain the old gateways, verify they are idle, withdraw them."""
        try:
            limit = parse_dwell(timeout)
        except PlanError as exc:
            raise fail(str(exc).replace("--dwell", "--timeout"), 2) from None
        operate("finish", store, dep_file, as_json, limit)

    @mig.command("ops")
    def ops(store: str | None = store_opt, dep_file: Path | None = dep_opt,
            as_json: bool = json_opt) -> None:
        """The last operations queued for the runner and what became of each."""
        dep = find_deployment(dep_file) if store is None else None
        docs = op_queue.recent(_store(store, dep), time.time(), n=20)
        if as_json:
            print(json.dumps(docs))
            return
        for d in docs:
            Console().print(escape(f"{d['id']} {d.get('op', '?')} {d['status']}"
                                   + (f": {d['why']}" if d.get("why") else "")),
                            highlight=False)

    @mig.command("run")
    def run(store: str | None = store_opt, dep_file: Path | None = dep_opt) -> None:
        """Be the runner for commands queued through the controller's API (until killed)."""
        dep = deployment(dep_file)
        runner = _Runner(_store(store, dep), dep)
        try:
            runner.acquire()
            runner.run(stop=lambda _s: False)
        finally:
            runner.engine.release()
            runner.close()


def _queue_and_wait(store: Store, op: str) -> dict[str, Any] | None:
    """Queue `op` for the live runner and wait for its answer; None when the runner died
    before taking it (its lease expired; the operation is withdrawn: the caller acts)."""
    try:
        doc = eng.submit(store, op)
    except eng.MigrationError as exc:
        raise fail(str(exc)) from None
    while True:
        now = time.time()
        ans = op_queue.read(store, doc["id"], now) or {"status": op_queue.REFUSED,
                                                       "why": "its document was removed"}
        if ans["status"] in op_queue.ANSWERED:
            return ans
        live = leases.alive(store, now)
        if live is None or live["owner"]["nonce"] != doc["runner"]:
            if op_queue.withdraw(store, doc["id"], now, "its runner stopped before taking it"):
                return None
            if ans["status"] == op_queue.RUNNING:
                return {"status": "unanswered", "why": "the runner stopped while performing it: "
                        "`crosszone migrate status` says where the migration stands"}
        time.sleep(POLL_S)
