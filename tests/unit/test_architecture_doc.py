"""docs/architecture.md names what the code has: the program's headers, the files it points at,
and the functions of the control path. (The layer diagram is checked by test_layers.py, which
reads its layers from it.)
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BPF = ROOT / "src" / "crosszone" / "fastpath" / "bpf"
ENTRY = "xdp_gateway.c"
#: Where a path the page writes short is looked for: `bpf/slots.h`, `emulate/kinds.py`, ...
BASES = (ROOT, ROOT / "src" / "crosszone", ROOT / "src" / "crosszone_lab",
         ROOT / "src" / "crosszone" / "fastpath", BPF)


def program_files(entry: str = ENTRY, bpf: Path = BPF) -> set[str]:
    """The entry point and every header of the directory it includes, transitively."""
    seen: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in seen or not (bpf / name).exists():
            continue
        seen.add(name)
        todo += re.findall(r'^#include "([^"]+)"', (bpf / name).read_text(), re.M)
    return seen


def program_paragraph(text: str) -> str:
    """The paragraph of the page that says what the program is built from."""
    start = text.index(f"The program is `src/crosszone/fastpath/bpf/{ENTRY}`")
    return text[start:text.index("\n\n", start)]


def test_the_page_names_every_file_of_the_product_program() -> None:
    named = set(re.findall(r"`(?:src/crosszone/fastpath/bpf/)?([a-z0-9_]+\.[ch])`",
                           program_paragraph(ARCHITECTURE.read_text())))
    built = program_files()
    assert {"gateway.h", "maps.h", "route.h"} <= built  # the walk itself found the program
    assert named == built, (f"named but not built from: {sorted(named - built)}; "
                            f"built from but not named: {sorted(built - named)}")


def test_every_path_the_page_names_exists() -> None:
    paths = [p for p in re.findall(r"`([\w./-]+)`", ARCHITECTURE.read_text())
             if re.fullmatch(r"[\w.-]+(/[\w.-]+)*(\.(py|h|c|md|yaml)|/)", p)
             and not p.startswith("kernel/")]  # the Linux source tree
    assert len(paths) > 30
    missing = [p for p in paths if not any((base / p).exists() for base in BASES)]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_control_path_names_functions_that_exist() -> None:
    text = ARCHITECTURE.read_text()
    block = text.split("## Control path", 1)[1].split("```", 2)[1]
    names = re.findall(r"-> ((?:[a-z_]+\.)+[A-Za-z_]+)", block)
    assert len(names) == 5, names
    for name in names:
        module, _, attr = f"crosszone.{name}".rpartition(".")
        parent = importlib.import_module(module)
        if hasattr(parent, "__path__") and importlib.util.find_spec(f"{module}.{attr}"):
            continue  # a module: compile.encode
        assert hasattr(parent, attr), name
