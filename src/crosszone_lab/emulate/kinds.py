"""Gateway kinds: the small protocol every kind of emulated gateway implements, and the registry.

The emulator builds every gateway alike (namespace, two links, the anycast VTEP, FRR); a kind is
what turns that namespace into a gateway: the kernel path (legacy_gateway.py) or the XDP fast
path (crosszone_gateway.py). Everything else (topology, deploy, demo, the CLI, the state file)
asks this module which kinds exist and calls them through `GatewayKind`, so a new kind is one
new module with an object that has these methods, plus one line in `_builtin_kinds`.

A kind only says whether its gateways must be attached before they may carry traffic
(`attaches`), and `ready` decides per gateway from the state file. A kind that attaches is
programmed by the control plane, whose agent also owns the gateway's FRR configuration; the
emulator configures the routing of the other kinds itself (frr.py) and moves traffic to and from
an agent's gateway on the routers' side (deploy.take_in_ops).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from crosszone.linux.netns import Executor, Op

if TYPE_CHECKING:
    from crosszone_lab.emulate.topology import Gateway, Plan

#: The switch target that makes every kind's gateways announce at once (ECMP over all of them).
ALL = "both"


class DeployError(RuntimeError):
    """The deployment could not be brought to the requested state."""


class GatewayKind(Protocol):
    """What the emulator needs of a kind of gateway."""

    #: Its name in topology files (`gateways: {NAME: count}`), `--to`, the state file.
    name: str
    #: First letter of its gateways' names: l -> lgw1, x -> xgw1 (unique among kinds).
    letter: str
    #: True: its gateways carry traffic only once `attach` succeeded, and their agent (started
    #: by `attach`) owns their FRR configuration.
    attaches: bool
    #: Gateways of this kind in a topology whose `gateways:` leaves the kind out.
    default_count: int

    def configure(self, p: Plan, gw: Gateway) -> list[Op]:
        """The kind's own data-path setup of `gw`, part of `emulate up`'s plan."""
        ...

    def available(self) -> bool:
        """Whether `attach` can work on this machine (else its gateways stay unannounced)."""
        ...

    def attach(self, ex: Executor, p: Plan, gw: Gateway) -> None:
        """Bring `gw`'s data path up after the namespaces exist; raise DeployError if it failed."""
        ...

    def detach(self, ns: str, pin_dir: Path) -> list[Op]:
        """Undo attach in namespace `ns` (tolerant: also after a crash, from the state file)."""
        ...

    def drops(self, ex: Executor, gw: Gateway) -> dict[str, int]:
        """Packets `gw`'s data path dropped so far, by cause (its own counters)."""
        ...


_REGISTRY: dict[str, GatewayKind] = {}


def register(kind: GatewayKind) -> GatewayKind:
    """Add a kind (registration order is the order of gateways in a plan); returns it."""
    _builtin_kinds()
    if kind.name in _REGISTRY or kind.name == ALL:
        raise ValueError(f"gateway kind {kind.name!r} is already registered")
    if any(k.letter == kind.letter for k in _REGISTRY.values()):
        raise ValueError(f"gateway kind letter {kind.letter!r} is already taken")
    _REGISTRY[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove a kind (tests that register a kind of their own)."""
    _REGISTRY.pop(name, None)


def _builtin_kinds() -> None:
    """The one place where the emulator's kinds are registered (imported here, lazily, since
    each kind's module imports the topology, which asks this registry for the kinds)."""
    if _REGISTRY:
        return
    from crosszone_lab.emulate import crosszone_gateway, legacy_gateway

    for kind in (legacy_gateway.KIND, crosszone_gateway.KIND):
        _REGISTRY[kind.name] = kind


def registry() -> Mapping[str, GatewayKind]:
    """Every registered kind by name, in registration order (legacy first)."""
    _builtin_kinds()
    return dict(_REGISTRY)


def names() -> tuple[str, ...]:
    """Names of the registered kinds, in registration order."""
    return tuple(registry())


def get(name: str) -> GatewayKind:
    """The kind called `name`; KeyError naming the known ones otherwise."""
    reg = registry()
    if name not in reg:
        raise KeyError(f"unknown gateway kind {name!r} (known: {', '.join(reg)})")
    return reg[name]


def default() -> str:
    """The kind that carries traffic when nothing is attached: the first that needs no attach."""
    return next(k.name for k in registry().values() if not k.attaches)


def switch_targets() -> tuple[str, ...]:
    """What `emulate switch --to` and a topology's `active` accept: every kind, then ALL."""
    return (*names(), ALL)


def members(active: str) -> tuple[str, ...]:
    """The kinds that announce under a switch target."""
    return names() if active == ALL else (active,)


def is_announcing(kind: str, active: str) -> bool:
    """Whether gateways of `kind` announce under the switch target `active`."""
    return kind in members(active)


def startup_set(active: str) -> str:
    """The set that may announce before anything is attached: `active` itself, unless it is one
    kind that must attach first (then the default kind; `emulate up` switches after attach)."""
    return default() if active != ALL and get(active).attaches else active


def needs_attach(active: str) -> bool:
    """Whether the set `active` includes a kind that announces only once attached."""
    return any(get(k).attaches for k in members(active))


def ready(gw: Gateway, attached: Mapping[str, bool]) -> bool:
    """Whether `gw` can carry traffic: always for a kind without attach, else once attached."""
    return not get(gw.kind).attaches or bool(attached.get(gw.name))


def by_gateway_name(gw_name: str) -> GatewayKind | None:
    """The kind of a gateway named like `xgw1` (its letter), for `down` after a crash."""
    return next((k for k in registry().values() if gw_name.startswith(f"{k.letter}gw")), None)


def describe(targets: tuple[str, ...]) -> str:
    """'a, b or c' for help texts and errors."""
    return targets[0] if len(targets) == 1 else f"{', '.join(targets[:-1])} or {targets[-1]}"
