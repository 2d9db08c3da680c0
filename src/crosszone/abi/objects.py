"""Where the compiled BPF objects are: `make build` puts them in `build/` at the repository root.

One place for the path, so that moving a module never changes which object it loads.
"""

from __future__ import annotations

from pathlib import Path

#: The repository root (src/crosszone/abi/objects.py -> three levels up from the package).
ROOT = Path(__file__).resolve().parents[3]
BUILD_DIR = ROOT / "build"


def object_path(name: str) -> Path:
    """build/NAME (NAME with or without the .o suffix)."""
    return BUILD_DIR / (name if name.endswith(".o") else f"{name}.o")
