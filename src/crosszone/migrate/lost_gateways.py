"""Crosszone gateways lost during a migration: how the runner tells, and which gateway a guard
breach points at.

A crosszone gateway is **lost** when

- its agent reports `health: "failed-closed"` in `status/<gateway>` (its fast path is not its
  own program: it withdrew its announcements itself and says which interface): at once;
- it gave no sign of life for the plan's `agent_lost_s` (20 s by default): no status written
  (`updated`) and its metrics endpoint not answering. An idle agent writes its status only
  every 30 s, so a stale status alone proves nothing: the runner reads the metrics before it
  counts the gateway lost (a killed gateway: its agent and its metrics gone with it);
- it did not apply a move's routing object within the deployment's `apply_timeout_s` (when one
  is set).

The driver drains a lost gateway at once (its routing object `withdraw`; nothing waits for its
agent to confirm) and leaves it out of every later move; the engine records it (`lost` in the
state, a `gateway_lost` history entry) and rolls the migration back over the other gateways
(docs/migrate.md, "A gateway lost mid-step", says why a rollback and not a pause).

A guard breach is **attributed** to one gateway (`attribute`) when the driver's reading at the
breach points at it alone among at least two gateways read: it is the only one whose fast-path
drops rose, whose BGP or BFD sessions were down or whose agent was unhealthy; or, when none
shows any of these, the only target gateway that forwarded nothing while every other one
forwarded at least a share window's worth of packets. The breach then drains that gateway as a
lost one instead of only stepping every gateway back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

#: The health an agent reports when its fast path is not its own and it withdrew itself.
FAILED_CLOSED = "failed-closed"
#: A silent gateway's metrics are read at most this often (seconds) to tell whether it is lost.
ASK_EVERY_S = 1.0


def failed_closed(status: dict[str, Any]) -> str | None:
    """Why a gateway is lost from its agent's status alone (failed-closed), else None."""
    if status.get("health") != FAILED_CLOSED:
        return None
    why = "its agent reports failed-closed"
    if status.get("message"):
        why += f": {status['message']}"
    fp = status.get("fastpath")
    if isinstance(fp, dict) and fp.get("ok") is False:
        detail = {k: v for k, v in fp.items() if k != "ok"}
        if detail:
            why += f" (fastpath {detail})"
    return why[:300]


@dataclass
class Liveness:
    """When each gateway last gave a sign of life (wall clock: its status's `updated`, or a
    metrics page the runner read), and when the runner last asked a silent one."""

    seen: dict[str, float] = field(default_factory=dict)
    asked: dict[str, float] = field(default_factory=dict)

    def saw(self, gateway: str, t: float) -> None:
        """A sign of life at `t` (a metrics page read)."""
        self.seen[gateway] = max(t, self.seen.get(gateway, t))

    def last(self, gateway: str, status: dict[str, Any], now: float) -> float:
        """The last sign of life; a gateway never seen counts from the first look (a runner
        that just started does not take every idle agent's 30 s heartbeat for silence)."""
        t = self.seen.setdefault(gateway, now)
        updated = status.get("updated")
        if isinstance(updated, int | float) and not isinstance(updated, bool) and \
                math.isfinite(updated):
            t = max(t, float(updated))
        return t

    def should_ask(self, gateway: str, now: float) -> bool:
        """Whether a silent gateway's metrics may be read now (at most every ASK_EVERY_S)."""
        if now - self.asked.get(gateway, -math.inf) < ASK_EVERY_S:
            return False
        self.asked[gateway] = now
        return True


def attribute(evidence: dict[str, list[str]], forwarded: dict[str, int],
              min_packets: int) -> dict[str, str]:
    """The one gateway a guard breach points at: gateway -> why (empty: none, or several).

    `evidence`: for every gateway read at the breach, what was wrong with it (drops that rose,
    sessions down, an unhealthy agent; empty: nothing). `forwarded`: packets each target
    gateway that should carry traffic forwarded since the previous reading."""
    if len(evidence) < 2:
        return {}  # a single gateway read: nothing to tell it apart from
    marked = [g for g, e in evidence.items() if e]
    if len(marked) == 1:
        gw = marked[0]
        others = ", ".join(sorted(g for g in evidence if g != gw))
        return {gw: f"{'; '.join(evidence[gw])}, while {others} showed nothing"}
    if marked or len(forwarded) < 2:
        return {}
    idle = [g for g, n in forwarded.items() if n <= 0]
    busy = [g for g, n in forwarded.items() if n >= min_packets]
    if len(idle) == 1 and len(idle) + len(busy) == len(forwarded):
        gw = idle[0]
        return {gw: "forwarded nothing since the previous reading, while "
                    + ", ".join(f"{g} forwarded {forwarded[g]}" for g in sorted(busy))}
    return {}
