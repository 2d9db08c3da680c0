"""The catalog of gateway platforms: what one device forwards, occupies, draws and costs.

A catalog is YAML (see examples/catalog.yaml). It is validated completely and then frozen: unknown
keys, wrong types and missing fields are errors, and every figure must name its source in the
platform's `sources` map, because a capacity plan is only as good as the numbers it is built on and
a reader must be able to tell a datasheet figure from a placeholder.

Prices are in the catalog's one `currency` (an ISO 4217 code): the figures a catalog cites come in
whatever currency their source used, and converting them would add an exchange rate nobody quoted.
`cost_baseline` names the platform the others' hardware cost is compared with (the legacy tier).

Two platform models exist:
- `fixed`: a device with a quoted forwarding rate (x86 software gateway, Tofino-class switch).
- `xdp-server`: a commodity server running the crosszone XDP fast path, whose rate is derived from
  a measured per-core cost (ns per packet, from `crosszone bench fastpath`) and bounded by its NIC
  ports and PCIe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from crosszone.intent import strict_yaml
from crosszone.plan.units import PlanInputError, validation_failure

__all__ = [
    "Catalog",
    "FixedPlatform",
    "Platform",
    "TableLimits",
    "XdpServerPlatform",
    "apply_fastpath_bench",
    "load_catalog",
    "read_fastpath_bench",
]

_FROZEN = ConfigDict(extra="forbid", frozen=True, strict=False)


class TableLimits(BaseModel):
    """Entry counts a platform's forwarding tables hold; None means bounded only by memory."""

    model_config = _FROZEN

    vpcs: Annotated[int, Field(ge=0)] | None
    routes: Annotated[int, Field(ge=0)] | None
    hosts: Annotated[int, Field(ge=0)] | None


class _PlatformBase(BaseModel):
    """Fields every platform carries."""

    model_config = _FROZEN

    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    rack_u: Annotated[float, Field(gt=0)]
    power_w: Annotated[float, Field(ge=0)]
    # Per device, in the catalog's `currency`.
    price: Annotated[float, Field(ge=0)]
    tables: TableLimits
    sources: dict[str, Annotated[str, Field(min_length=1)]]
    if TYPE_CHECKING:
        # Each subclass declares its own Literal tag (the union's discriminator); declared here
        # for the type checker only, so that pydantic's fields and their order stay as they are.
        model: str

    # Fields that are figures (numbers someone measured or quoted) and so need a source.
    _FIGURES: ClassVar[tuple[str, ...]] = ("rack_u", "power_w", "price", "tables")

    @model_validator(mode="after")
    def _every_figure_has_a_source(self) -> _PlatformBase:
        figures = self._figure_names()
        for key in self.sources:
            if key not in figures:
                raise ValueError(
                    f"sources.{key}: not a figure of a {self.model_name()} platform "
                    f"(figures: {', '.join(figures)})"
                )
        for key in figures:
            if getattr(self, key) is not None and key not in self.sources:
                raise ValueError(f"sources.{key}: missing; every figure must name its source")
        return self

    def _figure_names(self) -> tuple[str, ...]:
        return self._FIGURES

    def model_name(self) -> str:
        """The platform model tag ('fixed' or 'xdp-server')."""
        return str(self.model)


class FixedPlatform(_PlatformBase):
    """A device with a quoted forwarding rate (and optionally a packet-rate ceiling)."""

    model: Literal["fixed"]
    gbps_per_device: Annotated[float, Field(gt=0)]
    mpps_per_device: Annotated[float, Field(gt=0)] | None = None

    def _figure_names(self) -> tuple[str, ...]:
        return self._FIGURES + ("gbps_per_device", "mpps_per_device")


class XdpServerPlatform(_PlatformBase):
    """A server running the crosszone XDP fast path; rate = cores x per-core packet rate, capped."""

    model: Literal["xdp-server"]
    ns_per_pkt: Annotated[float, Field(gt=0)]
    bench_scenario: Annotated[str, Field(min_length=1)] = "ipv4_decap_1m_routes"
    cores: Annotated[int, Field(gt=0)]
    nic_ports: Annotated[int, Field(gt=0)]
    port_gbps: Annotated[float, Field(gt=0)]
    pcie_gbps: Annotated[float, Field(gt=0)]

    def _figure_names(self) -> tuple[str, ...]:
        return self._FIGURES + ("ns_per_pkt", "cores", "nic_ports", "port_gbps", "pcie_gbps")


Platform = Annotated[FixedPlatform | XdpServerPlatform, Field(discriminator="model")]


_CURRENCY = re.compile(r"^[A-Z]{3}$")


class Catalog(BaseModel):
    """A validated, frozen list of platforms with unique names, priced in one currency."""

    model_config = _FROZEN

    # ISO 4217 code of every `price` in the catalog (CNY, USD, EUR, ...).
    currency: str
    # The platform whose hardware cost the others are compared with; None: no comparison.
    cost_baseline: str | None = None
    platforms: Annotated[list[Platform], Field(min_length=1)]

    @model_validator(mode="after")
    def _names_and_currency(self) -> Catalog:
        if not _CURRENCY.match(self.currency):
            # A typo here ("RMB", "usd") would otherwise label every cost wrongly.
            raise ValueError(
                f"currency: expected an ISO 4217 code such as CNY or USD, got {self.currency!r}"
            )
        seen: set[str] = set()
        for platform in self.platforms:
            if platform.name in seen:
                raise ValueError(f"platform name {platform.name!r} appears twice")
            seen.add(platform.name)
        if self.cost_baseline is not None and self.cost_baseline not in seen:
            raise ValueError(
                f"cost_baseline: no platform named {self.cost_baseline!r} "
                f"(platforms: {', '.join(p.name for p in self.platforms)})"
            )
        return self


_MODEL_TAGS = ("fixed", "xdp-server")


def load_catalog(text: str, source: str) -> Catalog:
    """Validate catalog YAML text (from `source`, used in messages) into a frozen Catalog."""
    try:
        raw = strict_yaml.load(text, source)  # the one strict dialect
    except strict_yaml.YamlInputError as exc:
        at = f"{source}:{exc.line}" if exc.line else source
        raise PlanInputError(at, "", exc.problem) from None
    if not isinstance(raw, dict):
        raise PlanInputError(
            source, "", "expected a mapping with 'currency' and a 'platforms' list"
        )
    try:
        return Catalog.model_validate(raw)
    except ValidationError as exc:
        raise validation_failure(exc, raw, source, tags=_MODEL_TAGS) from None


def read_fastpath_bench(lines: Iterable[str], source: str) -> dict[str, float]:
    """Map scenario -> ns_per_pkt from `crosszone bench fastpath --json` output (JSON lines).

    Lines without ns_per_pkt (for example the route-programming benchmark) are skipped; blank
    lines are ignored; anything that is not a JSON object is an error naming the line. Where a
    scenario was measured in several modes, the `live_frames` line wins: it includes the
    kernel's per-packet forwarding work, which a gateway core also does.
    """
    rates: dict[str, float] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PlanInputError(source, f"line {number}", f"not JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise PlanInputError(source, f"line {number}", "expected a JSON object")
        if "ns_per_pkt" not in obj:
            continue
        scenario = obj.get("scenario")
        value = obj["ns_per_pkt"]
        if not isinstance(scenario, str):
            raise PlanInputError(source, f"line {number}.scenario", "missing or not a string")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise PlanInputError(
                source, f"line {number}.ns_per_pkt", f"expected a positive number, got {value!r}"
            )
        if scenario in rates and obj.get("mode", "live_frames") != "live_frames":
            continue
        rates[scenario] = float(value)
    return rates


def apply_fastpath_bench(catalog: Catalog, rates: dict[str, float], source: str) -> Catalog:
    """Replace each xdp-server platform's ns_per_pkt by the measured one for its bench_scenario."""
    platforms: list[FixedPlatform | XdpServerPlatform] = []
    for platform in catalog.platforms:
        if isinstance(platform, XdpServerPlatform):
            if platform.bench_scenario not in rates:
                known = ", ".join(sorted(rates)) or "none"
                raise PlanInputError(
                    source,
                    f"scenario {platform.bench_scenario!r}",
                    f"not found (needed by platform {platform.name!r}; scenarios with "
                    f"ns_per_pkt: {known})",
                )
            sources = dict(platform.sources)
            sources["ns_per_pkt"] = f"measured: {source}, scenario {platform.bench_scenario}"
            platform = platform.model_copy(
                update={"ns_per_pkt": rates[platform.bench_scenario], "sources": sources}
            )
        platforms.append(platform)
    return catalog.model_copy(update={"platforms": platforms})
