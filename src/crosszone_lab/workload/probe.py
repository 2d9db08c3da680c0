"""The emulator's guard and canary reads: the product's byte-exact reads
(`crosszone.probe.http_read`), opened from inside an endpoint's namespace.

A migration checks each step with reads from every compute endpoint to every storage node, in
both families, each on a fresh TCP connection. The read itself (two deadlines, DSCP from the
SYN on, exact body) is the product's, which the `crosszone probe` daemon uses on real hosts;
this module keeps the emulator's shape of it: a target names its endpoint's namespace and the
document's bytes (the emulator generates them, `storage.meta_document`), and a failed read
names the namespace it came from.

Sockets are opened in the endpoint's namespace with setns from a thread of this process (no
`ip netns exec` and no new interpreter per read: a round of 32 reads costs milliseconds of CPU,
which matters on a box whose two cores also run the network under test). The emulator sends
its reads in the queues' first class (`dscp`) where the topology has queues, and the storage
nodes answer in the class the SYN came in (`tcp_reflect_tos`, emulate/queues.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crosszone.probe import http_read

CONNECT_S = http_read.CONNECT_S
RESPONSE_S = http_read.RESPONSE_S


@dataclass(frozen=True)
class Target:
    """One read: from namespace `ns` (source `source`, optional), GET `path` from `server`."""

    ns: str
    server: str
    path: str
    expect: bytes
    source: str | None = None
    port: int = 80
    dscp: int = 0  # of every segment the probe sends, its SYN included (0 to 63)

    def product(self) -> http_read.Target:
        """The same read as the product describes it."""
        return http_read.Target(self.server, self.path, http_read.Expected.of(self.expect),
                                port=self.port, source=self.source, ns=self.ns or None,
                                dscp=self.dscp)


@dataclass(frozen=True)
class Outcome:
    """How one read went."""

    target: Target
    ok: bool
    ms: float
    error: str = ""


def _connect(t: Target, timeout: float) -> object:
    """The read's connection (tests check its marking)."""
    return http_read.connect(t.product(), timeout)


def _outcome(t: Target, o: http_read.Outcome) -> Outcome:
    return Outcome(t, o.ok, o.ms, f"{t.ns} -> {o.error}" if o.error else "")


def read_once(t: Target, connect_s: float = CONNECT_S, response_s: float = RESPONSE_S
              ) -> Outcome:
    """GET t.path over a fresh connection (http_read.read_once)."""
    return _outcome(t, http_read.read_once(t.product(), connect_s, response_s))


def run_round(targets: Sequence[Target], connect_s: float = CONNECT_S,
              response_s: float = RESPONSE_S, parallel: int = 8) -> list[Outcome]:
    """Every target once, `parallel` at a time."""
    done = http_read.run_round([t.product() for t in targets], connect_s, response_s, parallel)
    return [_outcome(t, o) for t, o in zip(targets, done)]


def p99_ms(outcomes: Sequence[Outcome]) -> float:
    """Nearest-rank p99 latency of the successful reads (0 when there are none)."""
    return http_read.p99_ms([o.ms for o in outcomes if o.ok])
