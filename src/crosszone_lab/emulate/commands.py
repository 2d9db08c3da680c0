"""CLI: `crosszone emulate up|down|status|switch` and `crosszone workload run`."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crosszone.linux import netns, pids
from crosszone.progress import Progress
from crosszone_lab.emulate import (
    control_plane,
    deploy,
    kinds,
    prometheus,
    queue_metrics,
    queues,
    topology,
)
from crosszone_lab.emulate import state as st

TopologyOpt = typer.Option(topology.DEFAULT_TOPOLOGY, "--topology", "-t",
                           help="Topology YAML (default: examples/two-zone.yaml).")


def _need_root() -> None:
    if os.geteuid() != 0:
        raise typer.BadParameter("the emulator creates network namespaces: run as root")


def _load(path: Path) -> topology.TopologySpec:
    try:
        return topology.load(path)
    except topology.TopologyError as exc:
        Console(stderr=True).print(f"[red]invalid topology[/red]\n{exc}")
        raise typer.Exit(2) from None


def _current(default: Path) -> tuple[topology.TopologySpec, str]:
    """Spec of the running deployment (from the state file), else of the given file."""
    state = st.load()
    if state is not None:
        return topology.parse(state.spec, source=str(st.STATE_FILE)), state.topology
    return _load(default), str(default)


def status_table(dep: deploy.Deployment) -> Table:
    """Namespaces, daemons and the routers' ECMP sets."""
    state = st.load()
    table = Table(title="crosszone emulate status")
    table.add_column("item")
    table.add_column("value")
    existing = set(netns.list_namespaces(dep.ex, topology.PREFIX))
    table.add_row("namespaces", f"{len(set(dep.plan.namespaces) & existing)}"
                  f"/{len(dep.plan.namespaces)} present")
    dead = [f for f in deploy.pidfiles(dep.plan) if not pids.pidfile_alive(f)]
    table.add_row("daemons", "all running" if not dead else f"{len(dead)} not running")
    table.add_row("active set", state.active if state else "-")
    table.add_row("fast path", ", ".join(f"{k}={'attached' if v else 'no'}"
                                         for k, v in (state.fastpath if state else {}).items())
                  or "none attached")
    cp = control_plane.describe(dep.plan)
    if cp:
        running = sum(a["running"] for a in cp["agents"].values())
        table.add_row("control plane", f"controller {cp['controller']['url']} "
                      f"({'running' if cp['controller']['running'] else 'not running'}), "
                      f"{running}/{len(cp['agents'])} agents running")
        table.add_row("prometheus", f"{prometheus.url()} ("
                      f"{'running' if prometheus.pid() is not None else 'not running'})")
        table.add_row("dashboard", control_plane.controller_url() + "/dashboard")
    qm = queue_metrics.describe(dep.plan).get("queue_metrics")
    if isinstance(qm, dict):
        table.add_row("queue exporter", f"{qm['url']} "
                      f"({'running' if qm['running'] else 'not running'})")
    by_addr = {f"g{g.index}": g.name for g in dep.plan.gateways}
    if existing:
        c, s = dep.route_hops()
        table.add_row("compute router -> anycast VTEP",
                      ", ".join(sorted(by_addr.get(a, a) for a in c)) or "no route")
        table.add_row("storage router -> VPC 1 prefix",
                      ", ".join(sorted(by_addr.get(a, a) for a in s)) or "no route")
    return table


def status_json(dep: deploy.Deployment) -> dict[str, object]:
    """`emulate status --json` (and `emulate up --json`)."""
    c, s = dep.route_hops()
    state = st.load()
    names = {f"g{g.index}": g.name for g in dep.plan.gateways}
    return {"up": state is not None and state.complete,
            "active": state.active if state else None,
            "compute_nexthops": sorted(names.get(x, x) for x in c),
            "storage_nexthops": sorted(names.get(x, x) for x in s),
            **control_plane.describe(dep.plan), **_observability(dep),
            **queue_metrics.describe(dep.plan)}


def _observability(dep: deploy.Deployment) -> dict[str, object]:
    """Prometheus and the dashboard, when the deployment has a control plane."""
    if not control_plane.gateways(dep.plan):
        return {}
    return {**prometheus.describe(True),
            "dashboard": {"url": control_plane.controller_url() + "/dashboard",
                          "charts": str(control_plane.charts_dir())}}


def _loopback_port(listen: str) -> int:
    """The port of `127.0.0.1:PORT` (ValueError for any other address)."""
    host, _, port = listen.rpartition(":")
    if host != "127.0.0.1" or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {listen!r}: want 127.0.0.1:PORT (loopback only)")
    return int(port)


def _deployment_queues() -> tuple[list[queue_metrics.Port], dict[str, str]]:
    """The running deployment's shaped ports and its class names (ValueError saying what is
    missing)."""
    state = st.load()
    if state is None:
        raise ValueError(f"no deployment ({st.STATE_FILE} missing or unreadable): "
                         "run `crosszone emulate up`")
    p = topology.plan(topology.parse(state.spec, source=str(st.STATE_FILE)))
    ports = queue_metrics.shaped_ports(p)
    if not ports:
        raise ValueError("the deployment's topology has no `queues:`: no queue to export")
    names = queues.class_names(p.spec.policy.small_dscp, p.spec.policy.bulk_dscp)
    return ports, names


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add the `emulate` and `workload` groups."""
    emulate = typer.Typer(help="Emulated two-zone deployment in network namespaces.",
                          no_args_is_help=True)
    workload = typer.Typer(help="AI training storage traffic over the emulated deployment.",
                           no_args_is_help=True)
    app.add_typer(emulate, name="emulate")
    app.add_typer(workload, name="workload")

    @emulate.command("up")
    def up(topology_file: Path = TopologyOpt, verbose: bool = False,
           as_json: bool = typer.Option(False, "--json",
                                        help="Print the status as JSON (progress: stderr).")
           ) -> None:
        """Build the deployment (idempotent); progress on stderr."""
        _need_root()
        spec = _load(topology_file)
        dep = deploy.make(spec, netns.Executor(verbose=verbose), str(topology_file))
        try:
            with Progress("emulate up") as progress:
                dep.up(log=progress.step)
        except (deploy.DeployError, netns.CommandFailed) as exc:
            Console(stderr=True).print(f"[red]up failed:[/red] {exc}\n"
                                       "(run `crosszone emulate down` to clean)")
            raise typer.Exit(1) from None
        if as_json:
            print(json.dumps(status_json(dep)))
        else:
            Console().print(status_table(dep))

    @emulate.command("down")
    def down() -> None:
        """Remove everything the emulator made (also after a crash)."""
        _need_root()
        console = Console()
        deploy.down(netns.Executor(), log=lambda m: console.print(f"[cyan]down[/cyan] {m}"))

    @emulate.command("status")
    def status(topology_file: Path = TopologyOpt, as_json: bool = typer.Option(
            False, "--json")) -> None:
        """Show what exists and where the routers send traffic."""
        _need_root()
        spec, path = _current(topology_file)
        dep = deploy.make(spec, topology_path=path)
        if as_json:
            print(json.dumps(status_json(dep)))
            return
        Console().print(status_table(dep))

    @emulate.command("queue-metrics")
    def queue_metrics_cmd(listen: str = typer.Option(
            queue_metrics.target(), "--listen",
            help="127.0.0.1:PORT to serve /metrics on (loopback only).")) -> None:
        """Export the shaped queues' per-class counters to Prometheus (`emulate up` starts
        this when the topology has `queues:`; it runs until stopped)."""
        try:
            lport = _loopback_port(listen)
            _need_root()
            ports, names = _deployment_queues()
        except ValueError as exc:
            Console(stderr=True).print(f"[red]queue-metrics:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from None
        halt = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: halt.set())
        signal.signal(signal.SIGINT, lambda *_: halt.set())
        queue_metrics.serve(ports, names, lport, halt)

    @emulate.command("switch")
    def switch(to: str = typer.Option(..., "--to",
                                      help=" | ".join(kinds.switch_targets()))) -> None:
        """Move traffic between gateway sets by BGP announce/withdraw."""
        _need_root()
        if to not in kinds.switch_targets():
            raise typer.BadParameter(f"--to must be {kinds.describe(kinds.switch_targets())}")
        spec, path = _current(topology.DEFAULT_TOPOLOGY)
        dep = deploy.make(spec, topology_path=path)
        console = Console()
        try:
            dep.switch(to, log=lambda m: console.print(f"[cyan]switch[/cyan] {m}"))
        except deploy.DeployError as exc:
            console.print(f"[red]switch failed:[/red] {exc}")
            raise typer.Exit(1) from None

    @emulate.command("policy")
    def policy(on: bool = typer.Option(..., "--on/--off",
                                       help="mark by flow size (on) or not at all (off)")) -> None:
        """Turn the traffic policy on or off on every gateway (docs/policy.md)."""
        from crosszone_lab.emulate import policy as pol

        _need_root()
        if st.load() is None:
            Console(stderr=True).print("[red]no deployment: run `crosszone emulate up`[/red]")
            raise typer.Exit(1)
        spec, _ = _current(topology.DEFAULT_TOPOLOGY)
        try:
            pol.set_policy(netns.Executor(), topology.plan(spec), on)
        except (deploy.DeployError, netns.CommandFailed) as exc:
            Console(stderr=True).print(f"[red]policy change failed:[/red] {exc}")
            raise typer.Exit(1) from None
        Console().print(f"traffic policy {'on' if on else 'off'}")

    @workload.command("run")
    def run(duration: float = typer.Option(15.0, "--duration", min=1.0, max=600.0),
            as_json: bool = typer.Option(False, "--json"),
            loaders: int = typer.Option(2, "--loaders", min=1, max=16,
                                        help="parallel range readers per endpoint")) -> None:
        """Run the training-storage workload on every GPU host endpoint at once."""
        from crosszone_lab.workload import runner

        _need_root()
        spec, _ = _current(topology.DEFAULT_TOPOLOGY)
        if st.load() is None:
            Console(stderr=True).print("[red]no deployment: run `crosszone emulate up`[/red]")
            raise typer.Exit(1)
        console = Console(stderr=as_json)
        result = runner.run(topology.workload_targets(topology.plan(spec)), duration=duration,
                            loaders=loaders, console=console)
        if as_json:
            print(json.dumps(result.to_json()))
        else:
            console.print(runner.summary_table(result))
        if result.errors:
            raise typer.Exit(1)
