"""The repository stands alone: no file refers to design notes outside it, and every
`docs/...` file that a page of documentation names exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Names of notes that live outside the repository; a reference to one is a dead link for users.
OUTSIDE = re.compile(r"\.\./shared|ARCHITECTURE\.md|CONVENTIONS\.md|KERNEL-NOTES")
DOC_LINK = re.compile(r"\bdocs/[A-Za-z0-9_./-]+\.(?:md|png|svg|json)")


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    text_suffixes = {".py", ".md", ".yaml", ".yml", ".c", ".h", ".toml", ".cfg", ".txt", ""}
    return [ROOT / f for f in out.splitlines()
            if Path(f).suffix in text_suffixes and (ROOT / f).is_file()]


def test_nothing_refers_outside_the_repository() -> None:
    bad = []
    for f in _tracked():
        if f == Path(__file__).resolve():
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "references to notes outside the repository:\n" + "\n".join(bad)


def test_every_named_doc_exists() -> None:
    missing = []
    for f in _tracked():
        if f.suffix != ".md":
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for link in DOC_LINK.findall(line):
                if not (ROOT / link).exists():
                    missing.append(f"{f.relative_to(ROOT)}:{n}: {link}")
    assert not missing, "docs named but not in the repository:\n" + "\n".join(missing)


def test_the_patterns_catch_what_they_should() -> None:
    assert OUTSIDE.search("see ../shared/ARCHITECTURE.md")
    assert OUTSIDE.search("(KERNEL-NOTES: veth)")
    assert not OUTSIDE.search("see docs/architecture.md")
    assert DOC_LINK.findall("`docs/emulate.md` and docs/img/plan.png.") == [
        "docs/emulate.md", "docs/img/plan.png"]
