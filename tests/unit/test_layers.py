"""The package layering of docs/architecture.md: no package imports one above it.

Walks every import under src/crosszone (module level and inside functions, absolute and
relative) and fails on an upward or unknown edge, naming the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "crosszone"

#: Lowest first; a package may import its own rank or any lower one. Packages on one rank are
#: siblings that may not import each other (the tuple form).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("abi", "linux", "progress"),
    ("intent",),
    ("compile",),
    ("store",),
    ("fastpath",),
    ("agent",),
    ("migrate",),
    ("control",),
    ("workload",),
    ("emulate",),
    ("plan",),
    ("bench",),
    ("demo", "cli"),
)
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _package(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every crosszone import in one file."""
    rel = path.relative_to(SRC)
    here = ["crosszone", *rel.parts[:-1]]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            # `from crosszone import emulate` names the package in the alias, not the module
            if mod == "crosszone":
                out += [(node.lineno, f"crosszone.{a.name}") for a in node.names]
    return [(line, m) for line, m in out if m.startswith("crosszone.")]


def upward_imports(root: Path = SRC) -> list[str]:
    """Every import that breaks the layering, as 'file:line: a -> b'."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        if path.parent == root and path.name == "__init__.py":
            continue
        src = _package(path)
        for line, mod in _imports(path):
            dst = mod.split(".")[1]
            where = f"{path.relative_to(root)}:{line}"
            if src not in RANK or dst not in RANK:
                bad.append(f"{where}: {src} -> {dst} (package not in LAYERS)")
            elif dst != src and RANK[dst] >= RANK[src]:
                bad.append(f"{where}: {src} -> {mod} (rank {RANK[src]} imports rank {RANK[dst]})")
    return bad


def test_no_upward_imports() -> None:
    bad = upward_imports()
    assert not bad, "imports against the layering (docs/architecture.md):\n" + "\n".join(bad)


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {p.stem for p in SRC.glob("*.py") if p.name != "__init__.py"}
    assert packages <= set(RANK), f"add to LAYERS: {sorted(packages - set(RANK))}"


@pytest.mark.parametrize(
    ("importer", "code", "ok"),
    [
        ("intent/x.py", "from crosszone.abi import layout\n", True),
        ("intent/x.py", "from crosszone.fastpath import layout\n", False),
        ("compile/x.py", "import crosszone.agent.agent\n", False),
        ("agent/x.py", "def f():\n    from crosszone.control import store\n", False),
        ("fastpath/testing/x.py", "from ...intent import loader\n", True),
        ("intent/x.py", "from ..fastpath import maps\n", False),
        ("emulate/x.py", "from crosszone import bench\n", False),
        ("workload/x.py", "from crosszone.workload import worker\n", True),
    ],
)
def test_the_walk_catches_upward_imports(tmp_path: Path, importer: str, code: str,
                                         ok: bool) -> None:
    """The checker itself: it sees function-level and relative imports."""
    f = tmp_path / importer
    f.parent.mkdir(parents=True)
    f.write_text(code)
    global SRC
    saved, SRC = SRC, tmp_path
    try:
        assert (upward_imports(tmp_path) == []) is ok
    finally:
        SRC = saved
