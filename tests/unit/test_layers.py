"""The package layering of docs/architecture.md: no package imports one above it.

The layers are read from the diagram in docs/architecture.md ("## Layers"), so the page and the
check cannot drift apart: one row per rank, the top row highest, packages on one row siblings.
Walks every import under src/crosszone (the product) and src/crosszone_lab (the lab), module level
and inside functions, absolute and relative, and fails on an upward or unknown edge, naming the
file and line. The product never imports the lab (a gateway installs it without the lab's
dependencies); the lab may import any of the product.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "crosszone"
LAB = SRC.parent / "crosszone_lab"

ARCHITECTURE = SRC.parents[1] / "docs" / "architecture.md"
_NAME = re.compile(r"[a-z_]+(?:/|\.py)")


def diagram_rows(text: str, title: str) -> list[tuple[str, ...]]:
    """The rows of one part of the layer diagram in docs/architecture.md's "## Layers", top row
    first: the package names that start each row (`plan/`, `cli.py`, `agent/  probe/`), without
    the trailing `/` or `.py`. A row is a line indented by one space; its names are the words
    before the description; lines indented further continue a description."""
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    part = block.split(f"\n {title}", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in part.splitlines()[1:]:
        if not line.startswith(" ") or line.startswith("  "):
            continue
        names = []
        for word in line.split():
            if not _NAME.fullmatch(word):
                break
            names.append(word.removesuffix("/").removesuffix(".py"))
        if names:
            rows.append(tuple(names))
    return rows


_TEXT = ARCHITECTURE.read_text()
#: Lowest first; a package may import its own rank or any lower one. Packages on one rank are
#: siblings that may not import each other (the tuple form). Read from the diagram.
LAYERS: tuple[tuple[str, ...], ...] = tuple(reversed(diagram_rows(_TEXT, "src/crosszone (")))
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
#: The lab's layers, the same way; any lab module may import any product package.
LAB_LAYERS: tuple[tuple[str, ...], ...] = tuple(
    reversed(diagram_rows(_TEXT, "src/crosszone_lab (")))
LAB_RANK = {pkg: i for i, layer in enumerate(LAB_LAYERS) for pkg in layer}


def _package(path: Path, root: Path) -> str:
    return path.relative_to(root).parts[0].removesuffix(".py")


def _imports(path: Path, root: Path, top: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every crosszone or crosszone_lab import in one file of the
    package `top` rooted at `root`."""
    rel = path.relative_to(root)
    here = [top, *rel.parts[:-1]]
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
            if mod in ("crosszone", "crosszone_lab"):
                out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return [(line, m) for line, m in out
            if "." in m and m.split(".")[0] in ("crosszone", "crosszone_lab")]


def _edge(src: str, mod: str, rank: dict[str, int]) -> str | None:
    """Why importing `mod` from package `src` (ranked in `rank`) breaks the layering, or None."""
    dst = mod.split(".")[1]
    if src not in rank or dst not in rank:
        return f"{src} -> {dst} (package not in LAYERS)"
    if dst != src and rank[dst] >= rank[src]:
        return f"{src} -> {mod} (rank {rank[src]} imports rank {rank[dst]})"
    return None


def upward_imports(root: Path = SRC, lab: Path | None = None) -> list[str]:
    """Every import that breaks the layering, as 'file:line: a -> b'. `root` is the product,
    `lab` the lab (default: beside the product)."""
    lab = root.parent / "crosszone_lab" if lab is None else lab
    bad = []
    for path in sorted(root.rglob("*.py")):
        if path.parent == root and path.name == "__init__.py":
            continue
        src = _package(path, root)
        for line, mod in _imports(path, root, "crosszone"):
            where = f"crosszone/{path.relative_to(root)}:{line}"
            if mod.startswith("crosszone_lab"):
                bad.append(f"{where}: {src} -> {mod} (the product imports the lab)")
            elif (why := _edge(src, mod, RANK)) is not None:
                bad.append(f"{where}: {why}")
    for path in sorted(lab.rglob("*.py")) if lab.is_dir() else ():
        if path.parent == lab and path.name == "__init__.py":
            continue
        src = _package(path, lab)
        for line, mod in _imports(path, lab, "crosszone_lab"):
            where = f"crosszone_lab/{path.relative_to(lab)}:{line}"
            if mod.startswith("crosszone_lab") and (why := _edge(src, mod, LAB_RANK)):
                bad.append(f"{where}: {why}")
            elif mod.startswith("crosszone.") and mod.split(".")[1] not in RANK:
                bad.append(f"{where}: {src} -> {mod} (no such product package)")
    return bad


def test_the_diagram_is_read_as_the_layers_it_draws() -> None:
    """The reader itself, on the diagram's form: rows, siblings, continued descriptions."""
    text = ("## Layers\n\n```\n top (the top part)\n cli.py     the command\n"
            " agent/  probe/   two siblings, whose description\n"
            "                  continues: plan/ here is not a row\n"
            " abi/  linux/  progress.py\n                  the bottom row\n\n"
            " other (another part)\n x/  y\n```\n")
    assert diagram_rows(text, "top (") == [("cli",), ("agent", "probe"),
                                           ("abi", "linux", "progress")]


def test_the_diagram_has_the_layers_the_code_needs() -> None:
    """Both parts of the diagram were found, each package once, with the product's known
    bottom and top (a diagram the reader could not parse would make every check vacuous)."""
    for layers in (LAYERS, LAB_LAYERS):
        names = [n for row in layers for n in row]
        assert len(names) == len(set(names)) and len(layers) >= 5, layers
    assert LAYERS[0] == ("abi", "linux", "progress") and LAYERS[-1] == ("cli",)
    assert LAB_LAYERS[-1] == ("demo",)


def test_no_upward_imports() -> None:
    bad = upward_imports()
    assert not bad, "imports against the layering (docs/architecture.md):\n" + "\n".join(bad)


def test_every_package_has_a_layer() -> None:
    for root, rank in ((SRC, RANK), (LAB, LAB_RANK)):
        packages = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
        packages |= {p.stem for p in root.glob("*.py") if p.name != "__init__.py"}
        missing = sorted(packages - set(rank))
        assert not missing, f"add to the layers of {root.name}: {missing}"


@pytest.mark.parametrize(
    ("importer", "code", "ok"),
    [
        ("crosszone/intent/x.py", "from crosszone.abi import layout\n", True),
        ("crosszone/intent/x.py", "from crosszone.fastpath import layout\n", False),
        ("crosszone/compile/x.py", "import crosszone.agent.agent\n", False),
        ("crosszone/agent/x.py", "def f():\n    from crosszone.control import store\n", False),
        ("crosszone/fastpath/testing/x.py", "from ...intent import loader\n", True),
        ("crosszone/intent/x.py", "from ..fastpath import maps\n", False),
        # the product never imports the lab, however it is spelt
        ("crosszone/cli.py", "import crosszone_lab.demo\n", False),
        ("crosszone/plan/x.py", "def f():\n    from crosszone_lab.charts import x\n", False),
        ("crosszone/fastpath/x.py", "from crosszone_lab import pcap_run\n", False),
        # the lab imports the product freely, and its own packages by their layers
        ("crosszone_lab/emulate/x.py", "from crosszone.control import api\n", True),
        ("crosszone_lab/emulate/x.py", "from crosszone_lab import bench\n", False),
        ("crosszone_lab/bench/x.py", "from ..emulate import deploy\n", True),
        ("crosszone_lab/workload/x.py", "from crosszone_lab.workload import worker\n", True),
        ("crosszone_lab/workload/x.py", "from crosszone.emulate import deploy\n", False),
    ],
)
def test_the_walk_catches_upward_imports(tmp_path: Path, importer: str, code: str,
                                         ok: bool) -> None:
    """The checker itself: it sees function-level and relative imports, and the product/lab
    boundary."""
    f = tmp_path / importer
    f.parent.mkdir(parents=True)
    f.write_text(code)
    (tmp_path / "crosszone").mkdir(exist_ok=True)
    assert (upward_imports(tmp_path / "crosszone", tmp_path / "crosszone_lab") == []) is ok


def test_the_product_runs_without_the_lab() -> None:
    """A product install (no crosszone[lab]): every product command answers --help without
    importing the lab, scapy or matplotlib, and a lab command says which extra it needs."""
    blocked = ("crosszone_lab", "scapy", "matplotlib")
    code = (
        "import sys\n"
        f"for m in {blocked!r}: sys.modules[m] = None\n"
        "from typer.testing import CliRunner\n"
        "from crosszone import cli\n"
        "r = CliRunner()\n"
        "for args in (['--help'], ['check', '--help'], ['agent', '--help'],\n"
        "             ['controller', '--help'], ['apply', '--help'], ['status', '--help'],\n"
        "             ['top', '--help'], ['plan', '--help'], ['simulate', '--help'],\n"
        "             ['fastpath', 'attach', '--help'], ['fastpath', 'stats', '--help'],\n"
        "             ['intent', 'migrate', '--help'], ['migrate', 'start', '--help'],\n"
        "             ['migrate', 'plan', '--json']):\n"
        "    res = r.invoke(cli.app, args)\n"
        "    assert res.exit_code == 0, (args, res.output, res.exception)\n"
        "for args in (['demo', '--quick'], ['emulate', 'up'], ['bench', 'fastpath'],\n"
        "             ['fastpath', 'run', '--pcap', 'x']):\n"
        "    res = r.invoke(cli.app, args)\n"
        "    assert res.exit_code == 2, (args, res.output)\n"
        "    assert 'install crosszone[lab]' in ' '.join(res.output.split()), (args, res.output)\n"
        "res = r.invoke(cli.app, ['plan', '--demand', '1Tbps', '--chart', '/nonexistent/x'])\n"
        "assert res.exit_code == 2, res.output\n"
        "assert 'install crosszone[lab]' in ' '.join(res.output.split()), res.output\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=SRC.parents[1], timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def test_the_lab_commands_are_the_listed_ones() -> None:
    """cli.LAB_COMMANDS (what a product install answers for) names what the lab registers."""
    from crosszone import cli

    groups = {"": cli.app, "bench": cli.bench_app}
    from crosszone.fastpath.commands import fastpath_app

    groups["fastpath"] = fastpath_app
    product = {"": {"check", "fastpath", "agent", "controller", "apply", "status", "top", "plan",
                    "simulate", "simulate-validate", "intent", "bench", "migrate", "probe"},
               "bench": set(), "fastpath": {"attach", "detach", "stats"}}
    for group, names in cli.LAB_COMMANDS.items():
        typer_app = groups[group]
        have = {c.name for c in typer_app.registered_commands}
        have |= {g.name for g in typer_app.registered_groups}
        assert have - product[group] == set(names), group


def test_the_lab_extra_lists_what_the_cli_probes() -> None:
    """cli.LAB_REQUIRES are in pyproject.toml's `lab` extra."""
    import tomllib

    from crosszone import cli

    extra = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"].get("lab", [])
    names = {re.split(r"[<>=\[ ;]", req, maxsplit=1)[0].lower() for req in extra}
    assert set(cli.LAB_REQUIRES) <= names
