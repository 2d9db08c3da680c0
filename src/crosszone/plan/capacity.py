"""Gateway tier sizing: how many devices of each platform carry a peak demand, and what they cost.

The rule is the one docs/architecture.md states for x86 gateways and applies to every platform:

    devices = ceil(demand x (1 + headroom) / capacity per device) + spares

With the default 10 % headroom this gives the published figures: 1 Tbps -> 22 x86 gateways or one
Tofino-class gateway; 2 Tbps -> 44 or 2 (two offload gateways give 3.2 Tbps, enough for the
2.5 Tbps peak of 50 GPU servers too).

A device's capacity depends on the packet-size mix: quoted bit rates hold for large frames, while a
packet-rate ceiling (software per-packet cost, a switch pipeline's packet rate) bites for small
ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from crosszone.plan.catalog import Catalog, FixedPlatform, XdpServerPlatform
from crosszone.plan.units import PlanInputError, ceil_devices, parse_bytes, require_non_negative

__all__ = [
    "DEFAULT_HEADROOM",
    "CapacityPlan",
    "DeviceCapacity",
    "PacketMix",
    "PlatformPlan",
    "device_capacity",
    "parse_packet_mix",
    "plan_capacity",
    "plan_platform",
]

# docs/architecture.md: devices = ceil(demand / 50 Gbps x 1.1), i.e. 10 % headroom.
DEFAULT_HEADROOM = 0.10

# Preamble (8 B) plus minimum inter-frame gap (12 B): wire bytes a port spends per frame beyond the
# frame itself, which is why a 100GbE port forwards fewer frame bits than 100 Gbps at small sizes.
ETHERNET_WIRE_OVERHEAD_B = 20

# Ethernet frames are 64 B at least; jumbo frames on VXLAN underlays reach 9216 B.
_MIN_FRAME_B, _MAX_FRAME_B = 64, 9216

# Simple IMIX (7 x 64 B, 4 x 576 B, 1 x 1514 B by packet count), a common benchmark mix.
_NAMED_MIXES = {"imix": "64:7,576:4,1514:1", "large": "1514:1", "small": "64:1"}


@dataclass(frozen=True)
class PacketMix:
    """Frame sizes (bytes) and their shares of the packet count (summing to 1)."""

    sizes: tuple[float, ...]
    shares: tuple[float, ...]

    @property
    def mean_bytes(self) -> float:
        """Mean frame size, weighted by packet count."""
        return sum(s * w for s, w in zip(self.sizes, self.shares, strict=True))

    def describe(self) -> str:
        """Render as '64:0.58,576:0.33,1514:0.08'."""
        return ",".join(f"{s:g}:{w:.3g}" for s, w in zip(self.sizes, self.shares, strict=True))


_MIX_ITEM = re.compile(r"^\s*([^:]+?)\s*(?::\s*([^:]+?)\s*)?$")


def parse_packet_mix(text: str, source: str = "--packet-mix") -> PacketMix:
    """Parse '1514', 'imix' or '64:7,576:4,1514:1' (size:weight by packet count) into a mix."""
    spec = _NAMED_MIXES.get(text.strip().lower(), text)
    sizes: list[float] = []
    weights: list[float] = []
    for item in spec.split(","):
        match = _MIX_ITEM.match(item)
        if match is None or not item.strip():
            raise PlanInputError(source, "", f"cannot read {item!r}; write size:weight, e.g. 64:7")
        size = parse_bytes(match.group(1), source, f"size {match.group(1)!r}")
        if not _MIN_FRAME_B <= size <= _MAX_FRAME_B:
            raise PlanInputError(
                source,
                f"size {match.group(1)!r}",
                f"frame size must be {_MIN_FRAME_B}..{_MAX_FRAME_B} bytes",
            )
        weight_text = match.group(2) or "1"
        try:
            weight = float(weight_text)
        except ValueError:
            raise PlanInputError(source, f"weight {weight_text!r}", "not a number") from None
        require_non_negative(weight, source, f"weight {weight_text!r}", weight_text)
        sizes.append(size)
        weights.append(weight)
    total = sum(weights)
    if not total > 0:
        raise PlanInputError(source, "", "weights sum to zero")
    return PacketMix(tuple(sizes), tuple(w / total for w in weights))


@dataclass(frozen=True)
class DeviceCapacity:
    """What one device forwards for a packet mix, and which limit binds."""

    gbps: float
    limit: str


def device_capacity(platform: FixedPlatform | XdpServerPlatform, mix: PacketMix) -> DeviceCapacity:
    """Forwarding capacity of one device of `platform` for `mix`, in Gbps of frame bits."""
    frame_bits = mix.mean_bytes * 8
    limits: dict[str, float] = {}
    if isinstance(platform, FixedPlatform):
        limits["rated"] = platform.gbps_per_device
        if platform.mpps_per_device is not None:
            limits["packet rate"] = platform.mpps_per_device * 1e6 * frame_bits / 1e9
    else:
        # XDP's per-packet cost is dominated by header parsing and map lookups, not by payload
        # length (the frame is not copied), so ns_per_pkt measured at one size is used for all.
        pps_per_core = 1e9 / platform.ns_per_pkt
        limits["cores"] = platform.cores * pps_per_core * frame_bits / 1e9
        wire_share = mix.mean_bytes / (mix.mean_bytes + ETHERNET_WIRE_OVERHEAD_B)
        # Each forwarded frame enters on one port and leaves on another; ports are full duplex, so
        # the ports together forward (ports x speed) of traffic.
        limits["nic ports"] = platform.nic_ports * platform.port_gbps * wire_share
        # Every forwarded byte is DMAed into memory and back out: once per PCIe direction.
        limits["pcie"] = platform.pcie_gbps
    limit = min(limits, key=lambda k: limits[k])
    return DeviceCapacity(gbps=limits[limit], limit=limit)


@dataclass(frozen=True)
class PlatformPlan:
    """The tier of one platform sized for the demand."""

    name: str
    model: str
    devices: int
    spares: int
    capacity_gbps: float
    limit: str
    rack_u: float
    power_w: float
    price: float  # per device, in the plan's currency
    cost: float  # the whole tier (devices x price)
    utilisation: float
    headroom_left: float
    utilisation_degraded: float
    sources: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the schema of `crosszone plan --json`)."""
        return {
            "name": self.name,
            "model": self.model,
            "devices": self.devices,
            "spares": self.spares,
            "capacity_gbps_per_device": round(self.capacity_gbps, 3),
            "capacity_limit": self.limit,
            "tier_capacity_gbps": round(self.capacity_gbps * self.devices, 3),
            "rack_u": self.rack_u,
            "power_w": self.power_w,
            "price": self.price,
            "cost": self.cost,
            "utilisation": round(self.utilisation, 4),
            "headroom_left": round(self.headroom_left, 4),
            "utilisation_degraded": round(self.utilisation_degraded, 4),
            "sources": dict(self.sources),
        }


def plan_platform(
    platform: FixedPlatform | XdpServerPlatform,
    demand_gbps: float,
    headroom: float,
    spares: int,
    mix: PacketMix,
) -> PlatformPlan:
    """Size a tier of `platform` for `demand_gbps` with `headroom` and `spares` spare devices."""
    cap = device_capacity(platform, mix)
    # A tier has at least one device even for zero demand: something must announce the anycast VTEP.
    active = max(1, ceil_devices(demand_gbps * (1.0 + headroom) / cap.gbps))
    devices = active + spares
    utilisation = demand_gbps / (devices * cap.gbps)
    return PlatformPlan(
        name=platform.name,
        model=platform.model_name(),
        devices=devices,
        spares=spares,
        capacity_gbps=cap.gbps,
        limit=cap.limit,
        rack_u=devices * platform.rack_u,
        power_w=devices * platform.power_w,
        price=platform.price,
        cost=devices * platform.price,
        utilisation=utilisation,
        headroom_left=1.0 - utilisation,
        # With the spares failed, the remaining devices carry the peak alone.
        utilisation_degraded=demand_gbps / (active * cap.gbps),
        sources=dict(platform.sources),
    )


@dataclass(frozen=True)
class CapacityPlan:
    """Tier sizes of every catalog platform for one demand."""

    demand_gbps: float
    headroom: float
    spares: int
    mix: PacketMix
    platforms: tuple[PlatformPlan, ...]
    currency: str  # of every price and cost (the catalog's)
    # The platform the others' hardware cost is compared with (the catalog's cost_baseline).
    cost_baseline: str | None = None

    def baseline(self) -> PlatformPlan | None:
        """The cost baseline's tier, or None when the catalog names none."""
        for p in self.platforms:
            if p.name == self.cost_baseline:
                return p
        return None

    def cost_ratio(self, platform: PlatformPlan) -> float | None:
        """Tier cost of `platform` over the baseline tier's (None: no baseline, or it is free)."""
        base = self.baseline()
        if base is None or base.cost <= 0:
            return None
        return platform.cost / base.cost

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the schema of `crosszone plan --json`)."""
        platforms = []
        for p in self.platforms:
            entry = p.to_json()
            ratio = self.cost_ratio(p)
            entry["cost_vs_baseline"] = None if ratio is None else round(ratio, 6)
            platforms.append(entry)
        return {
            "demand_gbps": self.demand_gbps,
            "headroom": self.headroom,
            "redundancy": f"N+{self.spares}" if self.spares else "N",
            "packet_mix": self.mix.describe(),
            "mean_frame_bytes": round(self.mix.mean_bytes, 2),
            "currency": self.currency,
            "cost_baseline": self.cost_baseline,
            "platforms": platforms,
        }


def plan_capacity(
    catalog: Catalog,
    demand_gbps: float,
    headroom: float = DEFAULT_HEADROOM,
    spares: int = 0,
    mix: PacketMix | None = None,
) -> CapacityPlan:
    """Size a tier of every catalog platform for `demand_gbps` (peak cross-zone demand)."""
    require_non_negative(demand_gbps, "--demand", "")
    require_non_negative(headroom, "--headroom", "")
    if spares < 0:
        raise PlanInputError(
            "--redundancy", "", f"spare devices must not be negative, got {spares}"
        )
    mix = mix or parse_packet_mix("large")
    plans = tuple(plan_platform(p, demand_gbps, headroom, spares, mix) for p in catalog.platforms)
    return CapacityPlan(
        demand_gbps, headroom, spares, mix, plans, catalog.currency, catalog.cost_baseline
    )
