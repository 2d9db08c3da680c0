"""CLI: `crosszone migrate plan|start|status|pause|resume|rollback|finish|run`.

The migration state lives in a store (`--store`, default: the emulator's run directory); the
emulated deployment is the driver. Exactly one process, the runner, performs a migration: the
`start` that began it, or a `resume`/`finish` run after it stopped (a held position: paused,
or all traffic moved), or after it was killed. While a runner is alive, the other commands
(and the controller's API) queue a command for it and wait until it took effect.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from crosszone.migrate import engine as eng
from crosszone.migrate.plan import Plan, PlanError, load_guards, parse_dwell, parse_steps
from crosszone.store.store import Store, open_store
from crosszone_lab.emulate import control_plane, deploy
from crosszone_lab.emulate import state as emu_state
from crosszone_lab.emulate.migration import EmulatorDriver, MigrationDriverError
from crosszone_lab.emulate.topology import RUN_DIR, parse
from crosszone_lab.emulate.vty import VtyError

#: States in which a CLI runner stops and hands the decision back to the operator.
HELD = ("paused", "shifted")

StoreOpt = typer.Option(None, "--store", help="Store URL (default: sqlite in the emulator's "
                        "run dir, or the controller's store when the emulator runs one).")
JsonOpt = typer.Option(False, "--json", help="Print JSON.")


def default_store_url() -> str:
    """The emulation's controller store (GET /v1/migration then serves the migration), else a
    file in the emulator's run dir."""
    if (control_plane.CONTROL_DIR / "store.db").exists():
        return control_plane.store_url()
    return f"sqlite://{RUN_DIR / 'migration.db'}"


def _store(url: str | None) -> Store:
    return open_store(url or default_store_url())


def _fail(msg: str, code: int = 1) -> typer.Exit:
    Console(stderr=True).print(f"[red]{msg}[/red]")
    return typer.Exit(code)


def _driver() -> EmulatorDriver:
    if os.geteuid() != 0:
        raise _fail("the migration drives the emulated deployment: run as root", 2)
    state = emu_state.load()
    if state is None or not state.complete:
        raise _fail("no deployment: run `crosszone emulate up` first")
    return EmulatorDriver(deploy.make(parse(state.spec), topology_path=state.topology))


def _print(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(doc))
        return
    c = Console()
    c.print(f"state [bold]{doc['state']}[/bold], step {doc['step']}, "
            f"weight on new gateways {doc['weight_new']}%")
    if doc.get("reason"):
        c.print(f"reason: {doc['reason']}")
    for g in doc.get("guards", []):
        c.print(f"  guard {g['name']}: {g['value']} (limit {g['limit']}) "
                + ("[green]ok[/green]" if g["ok"] else "[red]BREACHED[/red]"))
    for h in doc.get("history", [])[-8:]:
        c.print(f"  {time.strftime('%H:%M:%S', time.localtime(h['t']))} {h['event']} "
                f"step {h['step']} {h['weight_new']}%" + (f" ({h['reason']})"
                                                          if h.get("reason") else ""))


def make_plan(source: str, target: str, canary: str | None, steps: str, dwell: str,
              guards: Path | None) -> Plan:
    """A Plan from the command-line options (PlanError on a bad one)."""
    d = parse_dwell(dwell)
    return Plan(source=source, target=target, canary=canary, steps=parse_steps(steps),
                dwell_s=d, canary_dwell_s=d, limits=load_guards(guards))


def run_engine(engine: eng.Engine, as_json: bool) -> eng.State:
    """Be the runner until the migration is final or held for the operator."""
    try:
        return engine.run(stop=lambda s: s.state in eng.FINAL or s.state in HELD)
    except (MigrationDriverError, VtyError) as exc:
        raise _fail(f"the driver failed: {exc} (the state is kept: `crosszone migrate "
                    "resume` continues from it)") from None
    finally:
        if isinstance(engine.driver, EmulatorDriver):
            engine.driver.close()


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

    @mig.command("plan")
    def plan_cmd(source: str = source_opt, target: str = target_opt,
                 canary: str | None = canary_opt, steps: str = steps_opt,
                 dwell: str = dwell_opt, guards: Path | None = guards_opt,
                 as_json: bool = JsonOpt) -> None:
        """The steps and the checks at each, without changing anything."""
        try:
            plan = make_plan(source, target, canary, steps, dwell, guards)
        except PlanError as exc:
            raise _fail(str(exc), 2) from None
        phases = plan.describe()
        if as_json:
            print(json.dumps({"plan": plan.to_json(), "phases": phases}))
            return
        for ph in phases:
            Console().print(ph)

    @mig.command("start")
    def start(source: str = source_opt, target: str = target_opt,
              canary: str | None = canary_opt, steps: str = steps_opt,
              dwell: str = dwell_opt, guards: Path | None = guards_opt,
              store: str | None = StoreOpt, as_json: bool = JsonOpt) -> None:
        """Parity check, canary, then the steps; runs until all traffic moved (or held)."""
        try:
            plan = make_plan(source, target, canary, steps, dwell, guards)
        except PlanError as exc:
            raise _fail(str(exc), 2) from None
        s = _store(store)
        engine = eng.Engine(s, _driver(), log=lambda m: Console(stderr=True).print(m))
        try:
            engine.start(plan)
        except eng.MigrationError as exc:
            if isinstance(engine.driver, EmulatorDriver):
                engine.driver.close()
            raise _fail(str(exc)) from None
        run_engine(engine, as_json)
        _print(eng.status(s), as_json)

    @mig.command("status")
    def status(store: str | None = StoreOpt, as_json: bool = JsonOpt) -> None:
        """State, step, weight on the new gateways, history, guards."""
        _print(eng.status(_store(store)), as_json)

    def operate(op: str, store: str | None, as_json: bool) -> None:
        s = _store(store)
        try:
            eng.check_op(eng.read_state(s), op)
        except eng.MigrationError as exc:
            raise _fail(str(exc)) from None
        if eng.runner_alive(s, time.time()):
            before = len(eng.read_state(s).history)
            eng.submit(s, op)
            deadline = time.time() + 30
            while time.time() < deadline and len(eng.read_state(s).history) == before:
                time.sleep(0.2)
            _print(eng.status(s), as_json)
            return
        engine = eng.Engine(s, _driver(), log=lambda m: Console(stderr=True).print(m))
        try:
            engine.apply(op)
        except (eng.MigrationError, MigrationDriverError, VtyError) as exc:
            raise _fail(str(exc)) from None
        if op in ("resume", "finish"):
            run_engine(engine, as_json)
        elif isinstance(engine.driver, EmulatorDriver):
            engine.driver.close()
        _print(eng.status(s), as_json)

    for op, doc in (("pause", "Hold the current step (guards still read)."),
                    ("resume", "Continue from the current step (also after a killed runner)."),
                    ("rollback", "All traffic back to the old gateways at once."),
                    ("finish", "Drain the old gateways, verify they are idle, withdraw them.")):
        def command(store: str | None = StoreOpt, as_json: bool = JsonOpt,
                    _op: str = op) -> None:
            operate(_op, store, as_json)
        command.__doc__ = doc
        mig.command(op)(command)

    @mig.command("run")
    def run(store: str | None = StoreOpt) -> None:
        """Be the runner for commands queued through the controller's API (until killed)."""
        engine = eng.Engine(_store(store), _driver(),
                            log=lambda m: Console(stderr=True).print(m))
        try:
            engine.run(stop=lambda _s: False)
        finally:
            if isinstance(engine.driver, EmulatorDriver):
                engine.driver.close()
