"""Do the forwarding tables fit? VPC, route and host counts against each platform's table limits.

A gateway that runs out of table space does not drop the excess: the fast path misses and hands the
packet to the slow path (XDP_PASS to the kernel on crosszone-xdp, the control CPU on a switch),
which forwards orders of magnitude slower. So the answer per platform is not just "fits / does not
fit" but the share of entries that would live on the slow path. With no knowledge of which entries
are hot, that share is reported per table as overflow / needed, i.e. assuming traffic spreads evenly
over entries; a skewed workload that keeps its hot entries in the fast table fares better."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crosszone.plan.catalog import Catalog
from crosszone.plan.units import PlanInputError

__all__ = ["TABLES", "PlatformFit", "TableCounts", "TableFit", "counts_from_intent", "fit_tables"]

TABLES = ("vpcs", "routes", "hosts")


@dataclass(frozen=True)
class TableCounts:
    """Entries the deployment needs in each table."""

    vpcs: int
    routes: int
    hosts: int

    @classmethod
    def from_mapping(cls, counts: dict[str, Any], source: str) -> TableCounts:
        """Build from {'vpcs': n, 'routes': n, 'hosts': n}, checking every value."""
        values: dict[str, int] = {}
        for name in TABLES:
            if name not in counts:
                raise PlanInputError(source, name, "count is missing")
            value = counts[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlanInputError(source, name, f"expected a whole number, got {value!r}")
            if value < 0:
                raise PlanInputError(source, name, f"must not be negative, got {value}")
            values[name] = value
        return cls(**values)

    def get(self, name: str) -> int:
        """Count for table `name`."""
        return int(getattr(self, name))


@dataclass(frozen=True)
class TableFit:
    """One table of one platform: limit, need and the share that would overflow."""

    table: str
    needed: int
    limit: int | None

    @property
    def overflow(self) -> int:
        """Entries beyond the limit (0 when memory-bound)."""
        return 0 if self.limit is None else max(0, self.needed - self.limit)

    @property
    def fits(self) -> bool:
        """Whether every entry fits in the fast-path table."""
        return self.overflow == 0

    @property
    def slow_path_share(self) -> float:
        """Share of this table's entries left to the slow path."""
        return self.overflow / self.needed if self.needed else 0.0

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "needed": self.needed,
            "limit": self.limit,
            "fits": self.fits,
            "overflow": self.overflow,
            "slow_path_share": round(self.slow_path_share, 6),
        }


@dataclass(frozen=True)
class PlatformFit:
    """All tables of one platform."""

    name: str
    tables: tuple[TableFit, ...]

    @property
    def fits(self) -> bool:
        """Whether all tables fit."""
        return all(t.fits for t in self.tables)

    @property
    def worst_slow_path_share(self) -> float:
        """The largest per-table slow-path share: a packet needs every table it touches."""
        return max((t.slow_path_share for t in self.tables), default=0.0)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "name": self.name,
            "fits": self.fits,
            "slow_path_share": round(self.worst_slow_path_share, 6),
            "tables": {t.table: t.to_json() for t in self.tables},
        }


def fit_tables(catalog: Catalog, counts: TableCounts) -> tuple[PlatformFit, ...]:
    """Check `counts` against every platform's table limits."""
    fits = []
    for platform in catalog.platforms:
        tables = tuple(
            TableFit(name, counts.get(name), getattr(platform.tables, name)) for name in TABLES
        )
        fits.append(PlatformFit(platform.name, tables))
    return tuple(fits)


def counts_from_intent(path: str) -> TableCounts:
    """Table counts of an intent file (either version)."""
    from crosszone.intent.cluster import load_cluster, table_counts

    try:
        counts = table_counts(load_cluster(path))
    except (OSError, ValueError) as exc:
        # The intent plane raises its own error type (a ValueError) with a precise message.
        raise PlanInputError(path, "", str(exc)) from None
    return TableCounts.from_mapping(counts, path)
