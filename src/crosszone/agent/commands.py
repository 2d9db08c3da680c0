"""`crosszone agent --gateway NAME`: run one gateway's agent."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape


def agent_cmd(
    gateway: str = typer.Option(..., "--gateway", help="Gateway name in the intent."),
    store: str = typer.Option("sqlite:///var/lib/crosszone/state.db", "--store",
                              envvar="CROSSZONE_STORE",
                              help="sqlite:///path.db, etcd://[user@]h:p[,h:p...] or "
                                   "etcds://... (password: CROSSZONE_ETCD_PASSWORD[_FILE])."),
    pin_dir: Path = typer.Option(None, "--pin-dir",
                                 help="bpffs directory of the pins (default "
                                      "/sys/fs/bpf/crosszone/<gateway>)."),
    netns: str = typer.Option("", "--netns", help="Network namespace of the interfaces."),
    metrics: str = typer.Option("127.0.0.1:9470", "--metrics",
                                help="host:port of the Prometheus endpoint ('' = none)."),
    once: bool = typer.Option(False, "--once",
                              help="Reconcile once and exit (an upgrade's reattach): the result "
                                   "is printed; status/<gateway> stays the running agent's."),
    state_file: Path = typer.Option(None, "--state-file",
                                    help="Stable ids and last revision (default "
                                         "/run/crosszone/agent/<pin dir>.json: it lives as "
                                         "long as the pins, and bpffs holds no plain files)."),
    reattach: bool = typer.Option(False, "--reattach",
                                  help="Load and attach the program even if pinned (an "
                                       "upgrade); the pinned maps are kept."),
    frr_vty: Path = typer.Option(None, "--frr-vty",
                                 help="FRR's vty socket directory (FRR started with "
                                      "--vty_socket DIR): the host's routing and the BGP and "
                                      "BFD session gauges (crosszone_bgp_session_up, ...)."),
    routing: bool = typer.Option(True, "--routing/--no-routing",
                                 help="Own the host's FRR configuration when the gateway's "
                                      "intent has bgp: (docs/routing.md)."),
    frr_pathspace: str = typer.Option("", "--frr-pathspace",
                                      help="FRR started with -N NAME (per-namespace FRR); "
                                           "default: the system's FRR."),
    frr_config: Path = typer.Option(None, "--frr-config",
                                    help="Where the rendered FRR configuration is kept, "
                                         "a file named frr.conf (default /etc/frr/frr.conf; "
                                         "DIR/frr.conf with --frr-vty DIR, "
                                         "/etc/frr/NAME/frr.conf with --frr-pathspace)."),
    frr_rundir: Path = typer.Option(Path("/var/run/frr"), "--frr-rundir",
                                    help="frr-reload.py's directory for temporary files."),
) -> None:
    """Attach the fast path if needed, then keep its maps equal to the store's intent."""
    import signal

    from prometheus_client import start_http_server

    from crosszone.agent.agent import (
        Agent,
        default_state_file,
        ensure_attached,
        fastpath_guard,
        fastpath_hooks,
        ifindex_in,
    )
    from crosszone.agent.frr_apply import FrrTarget
    from crosszone.agent.routing import RoutingCollector, vty_asker
    from crosszone.agent.routing_owner import routing_owner
    from crosszone.fastpath.deploy import pinned_maps
    from crosszone.fastpath.sink import MapSink
    from crosszone.store.store import open_store

    try:  # before anything is attached: a bad option changes nothing
        target = FrrTarget(pathspace=frr_pathspace or None, vty_socket=frr_vty,
                           config_file=frr_config, rundir=frr_rundir)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--frr-config") from None
    pins = pin_dir or Path("/sys/fs/bpf/crosszone") / gateway
    console = Console(stderr=True)
    try:
        st = open_store(store)
    except ValueError as exc:  # a bad URL, a missing password or TLS file: named in exc
        console.print(f"[red]error:[/red] --store: {escape(str(exc))}", highlight=False,
                      soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(escape(f"agent {gateway}: store {store}, pins {pins}"), highlight=False)
    # A missing or invalid intent on the first start: wait for a valid one, saying why.
    ensure_attached(st, gateway, pins, netns or None, reattach=reattach,
                    on_wait=lambda health, why: console.print(
                        f"health {health} {escape(why)}", highlight=False))
    maps = pinned_maps(pins)
    sink = MapSink(maps, netns or None)
    agent = Agent(gateway, st, sink, ifindex_in(netns or None),
                  state_file=state_file or default_state_file(pins), read_actual=sink.read)
    fastpath_hooks(agent, maps)
    frr = routing or frr_vty
    sessions = RoutingCollector(netns or None, ask=vty_asker(target.sockets) if frr else None)
    sessions.start()  # read in its own thread: a scrape never waits for FRR
    agent.metrics.registry.register(sessions)
    if routing:
        agent.routing = routing_owner(gateway, target, sessions.snapshot)
        agent.metrics.registry.register(agent.routing)
    if metrics:
        agent.metrics_address = metrics  # in its status: where the migration reads them
        host, _, port = metrics.rpartition(":")
        start_http_server(int(port), addr=host or "127.0.0.1", registry=agent.metrics.registry)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    last = None
    # a one-shot run reports on the terminal only: status/<gateway> and the fast path's
    # watchdog belong to the gateway's running agent (an upgrade's reattach runs beside it)
    agent.publish = not once
    # every 20 ms: the pinned program on every port, or the gateway fails closed (issue 25)
    guard = None if once else fastpath_guard(agent, pins, netns or None)
    if guard is not None:
        from crosszone.agent.fastpath_guard import PortForwarding

        agent.port_forwarding = PortForwarding()  # written from the guard's thread, in netns
        agent.watch_fastpath(guard)
    while not stop["now"]:
        res = agent.step(timeout=0.5)
        if res is not None:
            console.print(escape(f"revision {res.revision}: {res.mode}, {res.puts} puts, "
                                 f"{res.deletes} deletes in {res.seconds * 1000:.1f} ms"
                                 + (f" ({res.error})" if res.error else "")), highlight=False)
        if agent.health != last:
            console.print(escape(f"health {agent.health} {agent.message}"), highlight=False)
            last = agent.health
        if once and agent.started:
            break
    if guard is not None:
        guard.stop()
    agent.report(force=True)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add the agent command."""
    app.command("agent")(agent_cmd)
