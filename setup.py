"""The wheel carries the product's BPF objects: building it compiles them with the Makefile's rules
(`make product-objects`) and puts them in the package, crosszone/bpf_objects/, where
crosszone/abi/objects.py finds them at run time. It also carries the systemd units
(crosszone/systemd/, from packaging/systemd/: docs/deploy.md) and the repository's examples for
the lab (crosszone_lab/examples/: the demo's intent). Everything else is in pyproject.toml.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithObjects(build_py):
    """build_py, then the compiled product objects, the units and the examples into the built
    package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install is a checkout: it loads build/ (make build)
        lib = Path(self.build_lib)
        with tempfile.TemporaryDirectory(prefix="crosszone-objects-") as tmp:
            # BUILD=tmp: the Makefile's own rules and flags, nothing written into the tree.
            subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", f"BUILD={tmp}",
                            "product-objects"], check=True)
            objects = sorted(Path(tmp).glob("*.o"))
            if not objects:
                raise RuntimeError("make product-objects built no object")
            dest = lib / "crosszone" / "bpf_objects"
            dest.mkdir(parents=True, exist_ok=True)
            for obj in objects:
                shutil.copy2(obj, dest / obj.name)
        units = lib / "crosszone" / "systemd"
        units.mkdir(parents=True, exist_ok=True)
        for unit in sorted((ROOT / "packaging" / "systemd").glob("*.service")):
            shutil.copy2(unit, units / unit.name)
        examples = lib / "crosszone_lab" / "examples"
        shutil.rmtree(examples, ignore_errors=True)
        shutil.copytree(ROOT / "examples", examples)


def _fresh_build_base() -> str:
    """A build directory of this run only, removed at exit. setuptools' default is the tree's
    build/, which holds the BPF objects of `make build`, and a module deleted from src/ would
    stay in its copy there and reach the next wheel."""
    base = tempfile.mkdtemp(prefix="crosszone-wheel-")
    atexit.register(shutil.rmtree, base, True)
    return base


setup(cmdclass={"build_py": BuildPyWithObjects},
      options={"build": {"build_base": _fresh_build_base()}})
