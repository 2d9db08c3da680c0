"""The probes' verdicts as the migration's guards read them from the store.

Each probe (`crosszone probe`, one per host in the canary VPC and in a production VPC) keeps
one document under `probe/<name>`:

    {"role": "canary" | "production", "updated": <epoch s>,
     "reads": <reads so far>, "errors": <failed reads so far>, "p99_ms": <p99 of its last round>}

`reads` and `errors` only grow (a restarted probe starts again from 0), so a reader takes the
difference since its previous reading and misses nothing between two guard ticks. A probe whose
document is older than `stale_s` (or three of its own `interval_s`, whichever is longer), or
that says it `stopped`, counts as one failed read per reading: a probe that stopped reporting
must not look like a probe that saw nothing wrong. The probe role writes these documents
(`crosszone probe`, probe/report.py, which carries more: each read's verdict); this reader
needs only the fields above.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crosszone.migrate.agent_driver import ProbeRound
from crosszone.store.store import Store

PROBE = "probe/"
#: A probe document older than this (seconds) is a probe that stopped.
STALE_S = 15.0


@dataclass
class StoreProbes:
    """Probes' verdicts since the previous reading, per role (agent_driver.Probes)."""

    store: Store
    wall: Callable[[], float] = time.time
    stale_s: float = STALE_S
    _seen: dict[str, tuple[int, int]] = field(default_factory=dict)

    def documents(self) -> dict[str, dict[str, Any]]:
        """Every probe's document, by name (unreadable ones left out)."""
        items, _ = self.store.get_prefix(PROBE)
        out = {}
        for k, v in items.items():
            try:
                doc = json.loads(v)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out[k[len(PROBE):]] = doc
        return out

    def read(self, role: str) -> ProbeRound | None:
        """Reads and failures of `role`'s probes since the previous call, and the worst p99;
        None when no probe of that role has ever reported."""
        now = self.wall()
        reads = errors = 0
        p99 = 0.0
        found = False
        for name, doc in sorted(self.documents().items()):
            if doc.get("role") != role:
                continue
            found = True
            try:
                n, e = int(doc.get("reads", 0)), int(doc.get("errors", 0))
                age = now - float(doc.get("updated", 0))
                last = float(doc.get("p99_ms", 0.0))
                stale = max(self.stale_s, 3 * float(doc.get("interval_s", 0) or 0))
            except (TypeError, ValueError):
                errors += 1
                continue
            if age > stale or doc.get("stopped") is True:
                errors += 1
                reads += 1
                continue
            n0, e0 = self._seen.get(name, (n, e))
            if n < n0 or e < e0:  # the probe restarted: its counters began again
                n0, e0 = 0, 0
            self._seen[name] = (n, e)
            reads += n - n0
            errors += e - e0
            p99 = max(p99, last)
        return ProbeRound(reads, errors, p99) if found else None
