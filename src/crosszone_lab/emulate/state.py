"""The emulator's record of what exists, under /run/crosszone-emulate/state.json.

It is written before anything is created and updated as things come up, so `down` after a crash
or Ctrl-C knows what to remove. `down` does not trust it alone: it also sweeps every namespace
with the `czemu-` prefix and the pin root.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crosszone_lab.emulate import kinds
from crosszone_lab.emulate.topology import RUN_DIR

STATE_FILE = RUN_DIR / "state.json"


@dataclass
class State:
    topology: str
    spec: dict[str, Any]
    namespaces: list[str] = field(default_factory=list)
    pidfiles: list[str] = field(default_factory=list)
    pin_dirs: list[str] = field(default_factory=list)
    active: str = field(default_factory=kinds.default)  # a switch target (kinds.switch_targets)
    # gateway -> attached, for gateways of a kind that attaches (crosszone's fast path)
    fastpath: dict[str, bool] = field(default_factory=dict)
    complete: bool = False


def load(path: Path = STATE_FILE) -> State | None:
    """The recorded state, or None if there is none (or it is unreadable)."""
    try:
        data = json.loads(path.read_text())
        return State(**data)
    except (OSError, json.JSONDecodeError, TypeError):
        return None


def save(state: State, path: Path = STATE_FILE) -> None:
    """Write atomically (rename), so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2, sort_keys=True))
    os.replace(tmp, path)


def clear(path: Path = STATE_FILE) -> None:
    """Forget the state."""
    path.unlink(missing_ok=True)
