"""The service units of packaging/systemd/, read as systemd reads them (for the tests that check
them and run the agent with the agent unit's capabilities)."""

from __future__ import annotations

from pathlib import Path

UNITS = Path(__file__).resolve().parents[1] / "packaging" / "systemd"
AGENT_UNIT = UNITS / "crosszone-agent@.service"
CONTROLLER_UNIT = UNITS / "crosszone-controller.service"


def settings(unit: Path) -> dict[str, list[str]]:
    """KEY -> every value given (in order), over all sections; comments and blanks skipped."""
    out: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def capabilities(unit: Path) -> list[str]:
    """The unit's CapabilityBoundingSet as setpriv names them (cap_bpf -> bpf)."""
    caps = " ".join(settings(unit).get("CapabilityBoundingSet", [])).split()
    return [c.lower().removeprefix("cap_") for c in caps]
