"""Parity of an attached gateway: do its maps, read back from the kernel, hold what its intent
compiles to? A migration moves traffic onto a gateway only when they do (`crosszone migrate`).

The comparison is the programming path run backwards: the caller compiles the intent into map
entries exactly as the gateway's agent does; the pinned maps are read through the one sink and
diffed against them. An empty diff is parity; otherwise the entries that would be put or
deleted, per map, say where the kernel drifted from the intent.
"""

from __future__ import annotations

from pathlib import Path

from crosszone.compile.diff import Entries, diff_entries
from crosszone.fastpath.deploy import pinned_maps
from crosszone.fastpath.sink import MapSink


def drift(want: Entries, pin_dir: str | Path) -> dict[str, int]:
    """Entries that differ between the pinned maps and `want`, per map ({} = parity)."""
    maps = pinned_maps(pin_dir)
    try:
        have = MapSink(maps).read(want)
    finally:
        maps.close()
    out: dict[str, int] = {}
    for op in diff_entries(have, want):
        out[op.map] = out.get(op.map, 0) + len(op)
    return out
