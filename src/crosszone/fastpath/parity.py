"""Parity of an attached gateway: do its maps, read back from the kernel, hold what its intent
compiles to? A migration moves traffic onto a gateway only when they do (`crosszone migrate`).

The comparison is the programming path run backwards: bind the compiled tables to the gateway's
ifindexes (inside its namespace), encode them, read the pinned maps through the one sink, and
diff. An empty diff is parity; otherwise the entries that would be put or deleted, per map, say
where the kernel drifted from the intent.
"""

from __future__ import annotations

import socket
from pathlib import Path

from crosszone.compile.diff import diff_entries
from crosszone.compile.encode import bind_ports, encode_tables
from crosszone.compile.tables import Tables
from crosszone.fastpath.deploy import pinned_maps
from crosszone.fastpath.sink import MapSink
from crosszone.linux.netns import in_netns


def drift(tables: Tables, pin_dir: str | Path, netns: str | None) -> dict[str, int]:
    """Entries that differ between the pinned maps and `tables`, per map ({} = parity)."""
    with in_netns(netns):
        bound = bind_ports(tables, socket.if_nametoindex)
    want = encode_tables(bound)
    maps = pinned_maps(pin_dir)
    try:
        have = MapSink(maps).read(want)
    finally:
        maps.close()
    out: dict[str, int] = {}
    for op in diff_entries(have, want):
        out[op.map] = out.get(op.map, 0) + len(op)
    return out
