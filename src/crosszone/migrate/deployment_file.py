"""A real deployment for `crosszone migrate`, described by a file (`--deployment FILE`).

```yaml
store: etcd://10.0.0.5:2379        # optional: else --store, CROSSZONE_STORE, the default
legacy:
  gateways: [lgw1, lgw2]           # the legacy gateways the migration moves traffic from/to
  adapter: {...}                   # how to act on them: migrate/legacy_adapter.py's config
agents:                            # optional
  gateways: [xgw1, xgw2]           # default: every gateway of the stored intent
  metrics: {xgw1: "10.0.1.11:9470"} # default: the address each agent reports in its status
convergence:                       # optional (agent_driver's defaults)
  share_tolerance: 5               # percentage points
  window_s: 1
  timeout_s: 30
  apply_timeout_s: null            # a gateway not applying a move by then is lost (null:
                                   # none; a silent one is lost after the plan's agent_lost_s)
```

The crosszone gateways are driven through their agents (agent_driver.AgentDriver); the legacy
ones through the adapter the file names. A file that cannot be used is a DeploymentError
naming the key and why, before anything is touched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from crosszone.intent import strict_yaml
from crosszone.migrate import engine as eng
from crosszone.migrate import legacy_adapter
from crosszone.migrate.agent_driver import (
    AgentDriver,
    DriverError,
    LegacySide,
    Probes,
    agent_gateways,
)
from crosszone.migrate.commands import Deployment
from crosszone.migrate.probe_verdicts import StoreProbes
from crosszone.store.store import Store, open_store

KNOWN = {"store", "legacy", "agents", "convergence"}
CONVERGENCE = {"share_tolerance": "share_tolerance", "window_s": "share_window_s",
               "timeout_s": "share_timeout_s", "apply_timeout_s": "apply_timeout_s",
               "min_packets": "share_min_packets"}


class DeploymentError(ValueError):
    """A deployment file that cannot be used (the message names the file and the key); `loc`
    is the document path of the value at fault, when there is one."""

    def __init__(self, message: str, loc: tuple[Any, ...] | None = None) -> None:
        super().__init__(message)
        self.loc = loc


def _names(where: str, value: Any, loc: tuple[Any, ...]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise DeploymentError(f"{where}: a list of gateway names", loc)
    return list(value)


def make_adapter(config: Any) -> LegacySide:
    """The legacy adapter a file's `legacy.adapter` describes (migrate/legacy_adapter.py: a
    command per action, or none)."""
    try:
        return legacy_adapter.from_config(config)
    except legacy_adapter.LegacyConfigError as exc:
        raise DeploymentError(str(exc), ("legacy", "adapter")) from None


def parse(doc: Any, where: str = "deployment",
          adapter: Callable[[Any], LegacySide] = make_adapter) -> Deployment:
    """A Deployment from a parsed file."""
    if not isinstance(doc, dict):
        raise DeploymentError(f"{where}: a mapping (store, legacy, agents, convergence)")
    unknown = sorted(set(doc) - KNOWN)
    if unknown:
        raise DeploymentError(f"{where}: unknown keys {', '.join(map(str, unknown))} "
                              f"(known: {', '.join(sorted(KNOWN))})", (unknown[0],))
    legacy = doc.get("legacy")
    if not isinstance(legacy, dict) or "gateways" not in legacy:
        raise DeploymentError(f"{where}: legacy: a mapping with gateways and adapter",
                              ("legacy",))
    legacy_names = _names(f"{where}: legacy.gateways", legacy["gateways"],
                          ("legacy", "gateways"))
    side = adapter(legacy.get("adapter"))
    agents = doc.get("agents") or {}
    if not isinstance(agents, dict):
        raise DeploymentError(f"{where}: agents: a mapping (gateways, metrics)", ("agents",))
    agent_names = _names(f"{where}: agents.gateways", agents["gateways"],
                         ("agents", "gateways")) \
        if "gateways" in agents else []
    metrics = agents.get("metrics") or {}
    if not isinstance(metrics, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metrics.items()):
        raise DeploymentError(f"{where}: agents.metrics: gateway name -> host:port",
                              ("agents", "metrics"))
    conv = doc.get("convergence") or {}
    if not isinstance(conv, dict) or set(conv) - set(CONVERGENCE):
        raise DeploymentError(f"{where}: convergence: a mapping of "
                              f"{', '.join(CONVERGENCE)}", ("convergence",))
    tuning: dict[str, Any] = {}
    for k, v in conv.items():
        if v is None and k == "apply_timeout_s":
            tuning[CONVERGENCE[k]] = None
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise DeploymentError(f"{where}: convergence.{k}: a number >= 0",
                                  ("convergence", k))
        tuning[CONVERGENCE[k]] = int(v) if k == "min_packets" else float(v)
    store_url = doc.get("store")
    if store_url is not None and not isinstance(store_url, str):
        raise DeploymentError(f"{where}: store: a store URL", ("store",))

    def make_driver(store: Store, log: Callable[[str], None]) -> eng.Driver:
        # the agents and probes use the file's store; the migration's state may be elsewhere
        # (--store)
        agents_store = open_store(store_url) if store_url else store
        probes: Probes = StoreProbes(agents_store)
        return AgentDriver(agents_store, side, legacy_names,
                           agent_names or agent_gateways(agents_store), probes,
                           metrics=dict(metrics), log=log, state_store=store, **tuning)

    return Deployment(store_url, make_driver, errors=(DriverError,), gateways=agent_names)


def load(path: Path) -> Deployment:
    """A Deployment from a file, read in the strict dialect (intent/strict_yaml.py): a key
    written twice, or `no`, `010` or `1:30` where a number is wanted, is an error naming the
    line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise DeploymentError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        doc = strict_yaml.load(text, str(path))
    except strict_yaml.YamlInputError as exc:
        raise DeploymentError(str(exc)) from None
    try:
        return parse(doc, str(path))
    except DeploymentError as exc:
        if exc.loc is None:
            raise
        line, note = strict_yaml.where(text, exc.loc)
        why = str(exc).removeprefix(f"{path}: ")
        at = f"{path}:{line}" if line else str(path)
        raise DeploymentError(f"{at}: {why}" + (f" ({note})" if note else ""),
                              exc.loc) from None
