"""Where the compiled BPF objects are.

A repository checkout loads what `make build` put in `build/` at the repository root. An installed
wheel carries the product's objects inside the package, in `crosszone/bpf_objects/`: building the
wheel compiles them with the Makefile's rules and puts them there (setup.py). One place for the
path, so that moving a module never changes which object it loads.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve()
#: The repository root, when this file is a checkout's src/crosszone/abi/objects.py.
ROOT = _HERE.parents[3]
#: The objects of an installed package (the product's only: the lab's are built in a checkout).
PACKAGED_DIR = _HERE.parents[1] / "bpf_objects"


def is_checkout() -> bool:
    """Whether this package runs from a repository checkout (src/ layout beside the Makefile),
    not from an installed wheel."""
    return (ROOT / "Makefile").is_file() and _HERE.parents[2] == ROOT / "src"


#: build/ in a checkout, the package's bpf_objects/ in an installed wheel.
BUILD_DIR = ROOT / "build" if is_checkout() else PACKAGED_DIR


def object_path(name: str) -> Path:
    """BUILD_DIR/NAME (NAME with or without the .o suffix)."""
    return BUILD_DIR / (name if name.endswith(".o") else f"{name}.o")
