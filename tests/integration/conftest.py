"""Fixtures for the emulator's integration tests: a small deployment and traffic probes.

Each test module brings up its own deployment (module scope) and takes it down in `finally`,
even when the module fails. Every traffic scenario runs through each gateway kind it names; a
kind that cannot carry traffic fails the test (emulate_helpers.require), it is never replaced by
another kind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from emulate_helpers import deployed

from crosszone_lab.emulate import deploy, topology

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "emulate-small.yaml"
MIGRATE = ROOT / "examples" / "migrate.yaml"


def _skip_unless_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("integration tests need root (network namespaces, FRR, XDP)")


@pytest.fixture(scope="module")
def deployment() -> Iterator[deploy.Deployment]:
    """The small deployment, up for the whole module, always taken down."""
    _skip_unless_root()
    spec = topology.load(SMALL)
    with deployed(spec, SMALL) as d:
        yield d


@pytest.fixture(scope="module")
def migrate_deployment() -> Iterator[deploy.Deployment]:
    """examples/migrate.yaml (legacy and crosszone gateways, two VPCs, IPv6), up for the whole
    module, always taken down: the migration tests' deployment."""
    _skip_unless_root()
    spec = topology.load(MIGRATE)
    with deployed(spec, MIGRATE) as d:
        yield d
