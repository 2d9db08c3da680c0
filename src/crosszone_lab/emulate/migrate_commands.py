"""The emulator's part of `crosszone migrate`: its deployment, for the product's command.

`crosszone migrate` is the product's (crosszone/migrate/commands.py), the same on real gateways
and here. Without `--deployment FILE` it asks the providers tools registered; this module
registers the emulator's: when `crosszone emulate up` has brought a deployment up, the
migration's store is the emulation's controller store (else a file in its run dir) and the
driver is the emulated deployment's.

The driver is the product's (migration.EmulatedAgentDriver: agent_driver.AgentDriver with the
routers' kernels timed beside it): the emulated crosszone gateways' agents own their routing,
as on real gateways. Until every agent reports that it does (`emulate up` waits for it), the
command refuses, saying which.
"""

from __future__ import annotations

import os

import typer

from crosszone.migrate import commands
from crosszone.migrate import engine as eng
from crosszone.migrate.agent_driver import DriverError
from crosszone.store.store import Store
from crosszone_lab.emulate import control_plane, deploy
from crosszone_lab.emulate import state as emu_state
from crosszone_lab.emulate.migration import (
    EmulatedAgentDriver,
    MigrationDriverError,
    agents_manage_routing,
    emulated_agent_driver,
)
from crosszone_lab.emulate.topology import RUN_DIR, parse


def default_store_url() -> str:
    """The emulation's controller store (GET /v1/migration then serves the migration), else a
    file in the emulator's run dir."""
    if (control_plane.CONTROL_DIR / "store.db").exists():
        return control_plane.store_url()
    return f"sqlite://{RUN_DIR / 'migration.db'}"


def _close(driver: eng.Driver) -> None:
    if isinstance(driver, EmulatedAgentDriver):
        driver.close()


def emulator_deployment() -> commands.Deployment | None:
    """The emulated deployment, when `crosszone emulate up` left one (None otherwise: the
    product's command then says what to give)."""
    state = emu_state.load()
    if state is None:
        return None

    def make_driver(store: Store, log: commands.Log) -> eng.Driver:
        if os.geteuid() != 0:
            raise commands.fail("the migration drives the emulated deployment: run as root", 2)
        st = emu_state.load()
        if st is None or not st.complete:
            raise commands.fail("no deployment: run `crosszone emulate up` first")
        dep = deploy.make(parse(st.spec), topology_path=st.topology)
        if not agents_manage_routing(dep):
            raise commands.fail("the emulated crosszone gateways' agents do not all manage "
                                "their routing yet (`crosszone emulate status`; `emulate up` "
                                "waits for it)")
        return emulated_agent_driver(dep, store, log)

    return commands.Deployment(default_store_url(), make_driver,
                               errors=(MigrationDriverError, DriverError),
                               close=_close)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Offer the emulated deployment to `crosszone migrate` (the product registers the group)."""
    commands.add_provider(emulator_deployment)
