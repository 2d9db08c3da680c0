"""Test tiers by directory: unit (no root), fastpath (BPF test runs), integration (namespaces).

Privileged tiers skip with a clear reason when not root; CI runs as root, so they run there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
ROOT = TESTS.parent
BUILD = ROOT / "build"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier and skip privileged tiers for non-root users."""
    not_root = os.geteuid() != 0
    for item in items:
        tier = Path(str(item.fspath)).relative_to(TESTS).parts[0]
        if tier in ("unit", "fastpath", "integration"):
            item.add_marker(getattr(pytest.mark, tier))
        if tier in ("fastpath", "integration") and not_root:
            item.add_marker(pytest.mark.skip(reason=f"{tier} tests need root (BPF, netns)"))


@pytest.fixture(scope="session")
def bpffs() -> Path:
    """The root namespace's BPF filesystem, mounted if needed."""
    path = Path("/sys/fs/bpf")
    if not os.path.ismount(path):
        os.system("mount -t bpf bpf /sys/fs/bpf")
    return path


@pytest.fixture(scope="session")
def gateway_object() -> Path:
    """The compiled gateway object (make build)."""
    obj = BUILD / "xdp_gateway.o"
    if not obj.exists():
        pytest.fail("build/xdp_gateway.o missing: run `make build` (make test does)")
    return obj
