"""Quantities a planner types (rates, sizes, durations, shares) and the plan plane's one error type.

Every user-facing input of `crosszone plan` and `crosszone simulate` goes through these parsers, so
a wrong unit or a negative demand is reported once, the same way, naming where it came from (a CLI
option, or a file and a field). Units are explicit on purpose: a bare `2000` could be Gbps or Mbps,
and guessing is how capacity plans end up off by a factor of 1000."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

__all__ = [
    "PlanInputError",
    "ceil_devices",
    "parse_bytes",
    "parse_duration_s",
    "parse_rate_gbps",
    "parse_redundancy",
    "parse_share",
    "require_non_negative",
    "validation_failure",
]


class PlanInputError(ValueError):
    """A user input to plan or simulate is wrong; the message names the source and the field."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.reason = message
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")


# Decimal prefixes for bit rates: network rates are always powers of ten (100GbE is 100e9 bit/s).
_RATE_UNITS_GBPS = {
    "bps": 1e-9,
    "kbps": 1e-6,
    "mbps": 1e-3,
    "gbps": 1.0,
    "tbps": 1e3,
    "pbps": 1e6,
}

# Byte sizes: both SI (kB, MB, GB) and binary (KiB, MiB, GiB), because storage vendors quote the
# former and operating systems report the latter.
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}

_DURATION_UNITS_S = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}

_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z/%]*)\s*$")


def _split(text: str, source: str, field: str) -> tuple[float, str]:
    """Split '2.5 Tbps' into (2.5, 'tbps'); reject anything that is not number-then-unit."""
    match = _QUANTITY.match(text)
    if match is None:
        raise PlanInputError(source, field, f"cannot read {text!r} as a number with a unit")
    value = float(match.group(1))
    if not math.isfinite(value):
        raise PlanInputError(source, field, f"{text!r} is not a finite number")
    return value, match.group(2).lower()


def require_non_negative(value: float, source: str, field: str, text: object = None) -> float:
    """Return value, or raise if it is negative or not finite."""
    shown = text if text is not None else value
    if not math.isfinite(value):
        raise PlanInputError(source, field, f"{shown!r} is not a finite number")
    if value < 0:
        raise PlanInputError(source, field, f"must not be negative, got {shown!r}")
    return value


def parse_rate_gbps(text: str | float, source: str = "--demand", field: str = "") -> float:
    """Parse a bit rate such as '2Tbps' or '500 Gbps' into Gbps (>= 0)."""
    if isinstance(text, bool):
        raise PlanInputError(source, field, f"expected a rate such as '2Tbps', got {text!r}")
    if isinstance(text, (int, float)):
        # Numbers in YAML fields whose name says the unit (gbps_per_device) arrive here as numbers.
        return require_non_negative(float(text), source, field)
    value, unit = _split(text, source, field)
    if unit == "":
        raise PlanInputError(
            source, field, f"{text!r} has no unit; write e.g. '{text}Gbps' or '{text}Tbps'"
        )
    raw_unit = _QUANTITY.match(text).group(2)  # type: ignore[union-attr]  # _split matched
    if unit in _RATE_UNITS_GBPS and not raw_unit.endswith("bps"):
        # 'TBps' or 'GBPS' would be bytes per second (8x more): refuse rather than guess.
        raise PlanInputError(
            source,
            field,
            f"unit {raw_unit!r} in {text!r} reads as bytes/s; write bits, e.g. 'Tbps'",
        )
    if unit not in _RATE_UNITS_GBPS:
        known = "bps, Kbps, Mbps, Gbps, Tbps, Pbps"
        raise PlanInputError(source, field, f"unknown rate unit {unit!r} in {text!r} (use {known})")
    return require_non_negative(value * _RATE_UNITS_GBPS[unit], source, field, text)


def parse_bytes(text: str | float, source: str, field: str = "") -> float:
    """Parse a size such as '1514', '1514B', '64KiB' or '5GB' into bytes (>= 0)."""
    if isinstance(text, bool):
        raise PlanInputError(source, field, f"expected a size such as '5GB', got {text!r}")
    if isinstance(text, (int, float)):
        return require_non_negative(float(text), source, field)
    value, unit = _split(text, source, field)
    if unit == "":
        unit = "b"
    if unit not in _SIZE_UNITS:
        raise PlanInputError(
            source,
            field,
            f"unknown size unit {unit!r} in {text!r} (use B, kB, MB, GB, KiB, MiB, GiB)",
        )
    return require_non_negative(value * _SIZE_UNITS[unit], source, field, text)


def parse_duration_s(text: str | float, source: str, field: str = "") -> float:
    """Parse a duration such as '100ms', '1.5s', '10min' or '1h' into seconds (>= 0)."""
    if isinstance(text, bool):
        raise PlanInputError(source, field, f"expected a duration such as '1h', got {text!r}")
    if isinstance(text, (int, float)):
        return require_non_negative(float(text), source, field)
    value, unit = _split(text, source, field)
    if unit == "":
        unit = "s"
    if unit not in _DURATION_UNITS_S:
        raise PlanInputError(
            source, field, f"unknown duration unit {unit!r} in {text!r} (use ns, us, ms, s, min, h)"
        )
    return require_non_negative(value * _DURATION_UNITS_S[unit], source, field, text)


def parse_share(text: str | float, source: str, field: str = "") -> float:
    """Parse a share such as '10%' or '0.1' into a fraction (>= 0)."""
    if isinstance(text, bool):
        raise PlanInputError(source, field, f"expected a share such as '10%', got {text!r}")
    if isinstance(text, (int, float)):
        return require_non_negative(float(text), source, field)
    value, unit = _split(text, source, field)
    if unit == "%":
        value /= 100.0
    elif unit != "":
        raise PlanInputError(source, field, f"unknown unit {unit!r} in {text!r} (use '10%' or 0.1)")
    return require_non_negative(value, source, field, text)


_REDUNDANCY = re.compile(r"^\s*[nN]\s*(?:\+\s*(\d+))?\s*$")


def parse_redundancy(text: str | int, source: str = "--redundancy", field: str = "") -> int:
    """Parse 'N', 'N+1', 'N+2' (or a bare spare count) into the number of spare devices."""
    if isinstance(text, bool):
        raise PlanInputError(source, field, f"expected N, N+1 or N+2, got {text!r}")
    if isinstance(text, int):
        spares = text
    else:
        match = _REDUNDANCY.match(text)
        if match is not None:
            spares = int(match.group(1) or 0)
        elif re.fullmatch(r"\s*[0-9]+\s*", text):
            spares = int(text.strip())
        else:
            raise PlanInputError(source, field, f"expected N, N+1 or N+2, got {text!r}")
    if spares < 0:
        raise PlanInputError(source, field, f"spare devices must not be negative, got {text!r}")
    return spares


def ceil_devices(required: float) -> int:
    """Round a fractional device count up, forgiving binary floating-point noise.

    Products such as demand x 1.1 / capacity land a hair above a whole number in binary floating
    point (1500 Gbps x 1.1 / 50 Gbps is 33.00000000000001); a plain ceil would then buy one
    gateway too many. Nine decimals is far below any physically meaningful fraction of a device.
    """
    return max(0, math.ceil(round(required, 9)))


def _field_path(loc: tuple[int | str, ...], raw: Any, tags: Sequence[str]) -> str:
    """Render a pydantic error location as 'platforms[1] (tofino-offload).rack_u'."""
    parts: list[str] = []
    node: Any = raw
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            node = node[item] if isinstance(node, list) and item < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                parts.append(f" ({node['name']})")
            continue
        if item in tags and isinstance(node, dict) and item in node.values():
            continue  # a discriminated union adds its tag to the path; the reader did not write it
        parts.append(f".{item}" if parts else str(item))
        node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts)


def validation_failure(
    exc: ValidationError, raw: Any, source: str, tags: Sequence[str] = ()
) -> PlanInputError:
    """Turn pydantic's first error into a PlanInputError naming the file and the field path."""
    err = exc.errors()[0]
    path = _field_path(tuple(err["loc"]), raw, tags)
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "extra_forbidden":
        msg = "unknown field"
    head, sep, tail = msg.partition(": ")
    # Model validators report a sub-field as "sources.x: reason"; fold it into the path.
    if sep and " " not in head and head:
        path = f"{path}.{head}" if path else head
        msg = tail
    return PlanInputError(source, path or "(top level)", msg)
