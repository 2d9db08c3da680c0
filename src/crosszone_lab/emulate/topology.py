"""Topology of an emulated two-zone deployment: the YAML schema and the addressing plan.

The YAML says how many of each thing exist; `plan()` turns it into a frozen `Plan` that names
every namespace, interface, address and MAC. Everything else in the emulator reads the plan, so
addressing rules live only here.

Addressing (k = global gateway index, i = host index, j = storage node index, all from 1):

- host i underlay: 10.1.i.2/24 (also its VTEP), compute router side 10.1.i.1
- gateway k compute link: 10.10.k.2/24 (router 10.10.k.1); storage link 10.20.k.2/24 (router .1)
- anycast VTEP on every gateway's storage link (default 10.0.0.100/32; deploy._gateway_base_ops)
- storage LAN behind the storage router: the configured subnet, router .1, node j .(10+j)
- endpoint of (host i, VPC) inside the VPC: prefix base + i*256 + 10, default gw .255.254
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from crosszone.abi.objects import ROOT
from crosszone.intent import strict_yaml
from crosszone.intent.schema import Policy
from crosszone.linux.links import Link
from crosszone_lab.emulate import kinds
from crosszone_lab.emulate.queues import QueueSpec
from crosszone_lab.workload.runner import WORKLOAD_NICE, Targets, WorkerEndpoint


def _instance() -> str:
    """CROSSZONE_EMULATE_INSTANCE: run a second emulation beside the default one (one to three
    lower-case letters or digits). Every name the emulator owns carries it, so two instances never
    see, sweep or remove each other's namespaces, pins or files."""
    value = os.environ.get("CROSSZONE_EMULATE_INSTANCE", "")
    if value and not re.fullmatch(r"[a-z0-9]{1,3}", value):
        raise ValueError(f"CROSSZONE_EMULATE_INSTANCE={value!r}: "
                         "use 1 to 3 lower-case letters or digits")
    return value


INSTANCE = _instance()
PREFIX = f"czemu{INSTANCE}-"
RUN_DIR = Path(f"/run/crosszone-emu-{INSTANCE}" if INSTANCE else "/run/crosszone-emulate")
PIN_ROOT = Path(f"/sys/fs/bpf/czemu{INSTANCE}")
DEFAULT_TOPOLOGY = ROOT / "examples" / "two-zone.yaml"

COMPUTE_ROUTER_AS = 65001
STORAGE_ROUTER_AS = 65002
GATEWAY_AS = 65100
# Compute-zone links carry VXLAN: 50 bytes of outer headers over a 1500-byte inner MTU.
UNDERLAY_MTU = 1550
INNER_MTU = 1500
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
VXLAN_PORT = 4789  # the hosts' vSwitches and every gateway kind
# The storage router answers on one MAC on all its gateway-facing ports (as routers do), so the
# cluster intent's one storage next hop serves every gateway.
STORAGE_ROUTER_MAC = "02:20:00:00:00:01"
MAX_PER_KIND = 8  # gateways of one kind (interface and MAC numbering has room for more)

class TopologyError(ValueError):
    """A topology file that cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VpcSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9]{0,3}$")  # short: it ends up in interface names
    vni: int = Field(ge=1, le=16_777_215, strict=True)
    prefix: ipaddress.IPv4Network
    storage_facing: ipaddress.IPv4Network
    # IPv6 inside the VPC (optional): the same 1:1 stateless translation, per family.
    prefix6: ipaddress.IPv6Network | None = None
    storage_facing6: ipaddress.IPv6Network | None = None
    # Per-tenant fairness: the VPC's rate, a token bucket in the crosszone fast path (the
    # intent's `vpcs[].rate_mbps` / `burst_kib`); none by default.
    rate_mbps: int | None = Field(default=None, ge=1, le=100_000_000, strict=True)
    burst_kib: int | None = Field(default=None, ge=16, le=1 << 22, strict=True)

    @model_validator(mode="after")
    def _same_length(self) -> VpcSpec:
        if self.prefix.prefixlen != self.storage_facing.prefixlen:
            raise ValueError("storage_facing must have the same length as prefix (1:1 mapping)")
        if self.prefix.prefixlen > 16:
            raise ValueError("prefix must be /16 or shorter (one /24 per host is carved from it)")
        if (self.prefix6 is None) != (self.storage_facing6 is None):
            raise ValueError("prefix6 and storage_facing6 go together")
        if self.prefix6 is not None and self.storage_facing6 is not None:
            if self.prefix6.prefixlen != self.storage_facing6.prefixlen:
                raise ValueError("storage_facing6 must have the same length as prefix6")
            if self.prefix6.prefixlen > 112:
                raise ValueError("prefix6 must be /112 or shorter")
        return self


class GatewaysSpec(BaseModel):
    """How many gateways of each registered kind (kinds.py), e.g. `{crosszone: 2, legacy: 2}`;
    a kind the document leaves out gets its default count."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _registered_kinds(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            raise ValueError("gateways must be a mapping of gateway kind to count")
        known = kinds.registry()
        unknown = [str(k) for k in raw if k not in known]
        if unknown:
            raise ValueError(f"unknown gateway kind(s) {', '.join(unknown)} "
                             f"(known: {', '.join(known)})")
        for name, n in raw.items():
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_PER_KIND:
                raise ValueError(f"{name}: a count from 0 to {MAX_PER_KIND}")
        return {name: raw.get(name, k.default_count) for name, k in known.items()}

    def count(self, kind: str) -> int:
        """Gateways of `kind` (0 for a kind the spec does not have)."""
        return int((self.model_extra or {}).get(kind, 0))

    @property
    def total(self) -> int:
        """Gateways of every kind."""
        return sum(int(n) for n in (self.model_extra or {}).values())


class StorageSpec(_Strict):
    nodes: int = Field(default=2, ge=1, le=8, strict=True)
    subnet: ipaddress.IPv4Network = ipaddress.IPv4Network("172.16.0.0/24")
    subnet6: ipaddress.IPv6Network = ipaddress.IPv6Network("fd10::/64")
    shards: int = Field(default=8, ge=1, le=1024, strict=True)
    shard_size_mib: int = Field(default=64, ge=1, le=65536, strict=True)
    checkpoint_max_mib: int = Field(default=64, ge=1, le=4096, strict=True)
    # The nginx worker's nice value. By default the storage nodes yield to the emulated network
    # like the workload's bulk processes (runner.WORKLOAD_NICE says why). With shaped ports
    # (`queues:`) the links bound what bulk traffic can ask of the CPU, and a niced worker
    # answering the small requests waits behind the bulk processes' CPU time instead
    # (docs/policy.md, "The storage nodes' priority"): the policy topology runs it at 0.
    nice: int = Field(default=WORKLOAD_NICE, ge=-20, le=19, strict=True)


class BfdSpec(_Strict):
    # Every BFD session's timers: the routers' and legacy gateways' profile (frr.py) and the
    # crosszone gateways' `bgp.bfd` in the cluster intent (control_plane.bgp).
    # 100 ms x 5: BGP session liveness only. The routers' fast reroute (FastRerouteSpec) moves
    # traffic off a failed gateway in ~25 ms, so BFD need not be fast, and a user-space bfdd on
    # a loaded 2-core box flapped at 30 ms x 5 (every session down at once whenever bfdd's CPU
    # froze for 150 ms) and starved the box at 10 ms x 3: docs/emulate.md, "Failover".
    interval_ms: int = Field(default=100, ge=10, le=10_000, strict=True)
    multiplier: int = Field(default=5, ge=2, le=255, strict=True)


class FastRerouteSpec(_Strict):
    """The routers' fast reroute (emulate/fastreroute.py): an ICMP echo across each gateway every
    `interval_ms`; `multiplier` unanswered in a row take the gateway out of the routers' kernel
    routes before BFD and BGP converge."""

    enabled: bool = Field(default=True, strict=True)
    interval_ms: float = Field(default=5.0, ge=1.0, le=1000.0, strict=True)
    multiplier: int = Field(default=4, ge=2, le=255, strict=True)
    restore_ms: float = Field(default=500.0, ge=0.0, le=60_000.0, strict=True)


class TopologySpec(_Strict):
    """The YAML document."""

    name: str = "two-zone"
    hosts: int = Field(default=4, ge=1, le=32, strict=True)
    vpcs: tuple[VpcSpec, ...] = Field(min_length=1, max_length=4)
    gateways: GatewaysSpec = Field(default_factory=GatewaysSpec)
    storage: StorageSpec = StorageSpec()
    anycast_vtep: ipaddress.IPv4Address = ipaddress.IPv4Address("10.0.0.100")
    active: str = Field(default_factory=kinds.default)  # a switch target (kinds.switch_targets)
    bfd: BfdSpec = BfdSpec()
    fast_reroute: FastRerouteSpec = FastRerouteSpec()
    # MTU of the compute-zone links that carry VXLAN; everything inside a VPC and the storage
    # zone gets 50 bytes less (the outer headers), e.g. 9000 -> 8950.
    underlay_mtu: int = Field(default=UNDERLAY_MTU, ge=1330, le=9000, strict=True)
    # Rate-limited priority queues at the bottleneck ports (emulate/queues.py); none by default.
    queues: QueueSpec | None = None
    # The traffic policy of every gateway: the intent's `policy` block for the crosszone
    # gateways, the legacy gateways' nftables marking from the same values (docs/policy.md).
    policy: Policy = Policy()

    @field_validator("vpcs")
    @classmethod
    def _unique(cls, vpcs: tuple[VpcSpec, ...]) -> tuple[VpcSpec, ...]:
        for attr in ("name", "vni", "storage_facing"):
            values = [getattr(v, attr) for v in vpcs]
            if len(set(values)) != len(values):
                raise ValueError(f"vpc {attr} values must be unique")
        return vpcs

    @field_validator("active")
    @classmethod
    def _switch_target(cls, active: str) -> str:
        if active not in kinds.switch_targets():
            raise ValueError(f"must be {kinds.describe(kinds.switch_targets())}")
        return active

    @model_validator(mode="after")
    def _some_gateway(self) -> TopologySpec:
        if self.gateways.total == 0:
            raise ValueError("at least one gateway is needed")
        if self.policy.small_dscp == self.policy.bulk_dscp:
            raise ValueError("policy: small_dscp and bulk_dscp must differ")
        return self

    @property
    def priority_dscp(self) -> int:
        """The DSCP the queues serve first (the policy's `small_dscp`), 0 without queues.

        A measuring probe sent with it is never dropped by a full FIFO at a shaped port, so
        what it counts as lost is what the gateways and the routes lost, not congestion the
        workload made (emulate/queues.py)."""
        return self.policy.small_dscp if self.queues is not None else 0


@dataclass(frozen=True)
class Endpoint:
    """A workload endpoint: one namespace per (GPU host, VPC)."""

    name: str  # e.g. h1-a
    ns: str
    host: int
    vpc: VpcSpec
    addr: str  # inner address
    mac: str
    gw_addr: str  # the VPC's virtual router address (static neighbour to router_mac)
    addr6: str | None = None  # inner IPv6 address when the VPC has prefix6
    gw_addr6: str | None = None


@dataclass(frozen=True)
class Host:
    index: int
    ns: str
    vtep: str
    endpoints: tuple[Endpoint, ...]


@dataclass(frozen=True)
class Gateway:
    name: str  # lgw1, xgw1
    kind: str  # a registered kind's name (kinds.py)
    index: int  # global index k
    ns: str
    compute_addr: str
    compute_peer: str
    compute_mac: str
    compute_peer_mac: str
    storage_addr: str
    storage_peer: str
    storage_mac: str
    storage_peer_mac: str
    storage_addr6: str = ""
    storage_peer6: str = ""

    @property
    def router_id(self) -> str:
        return f"10.255.1.{self.index}"

    @property
    def pin_dir(self) -> Path:
        return PIN_ROOT / self.name


@dataclass(frozen=True)
class StorageNode:
    name: str
    ns: str
    addr: str
    mac: str
    addr6: str = ""


@dataclass(frozen=True)
class Plan:
    spec: TopologySpec
    hosts: tuple[Host, ...]
    gateways: tuple[Gateway, ...]
    storage_nodes: tuple[StorageNode, ...]
    links: tuple[Link, ...]
    compute_router_ns: str
    storage_router_ns: str
    storage_gw_addr: str  # storage router's address on the storage LAN
    storage_gw_addr6: str = ""

    @property
    def ipv6(self) -> bool:
        """Whether any VPC carries IPv6."""
        return any(v.prefix6 is not None for v in self.spec.vpcs)

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(e for h in self.hosts for e in h.endpoints)

    @property
    def namespaces(self) -> tuple[str, ...]:
        names = [self.compute_router_ns, self.storage_router_ns]
        for h in self.hosts:
            names.append(h.ns)
            names.extend(e.ns for e in h.endpoints)
        names.extend(g.ns for g in self.gateways)
        names.extend(s.ns for s in self.storage_nodes)
        return tuple(names)

    @property
    def underlay_mtu(self) -> int:
        """MTU of the compute-zone (VXLAN-carrying) links."""
        return self.spec.underlay_mtu

    @property
    def inner_mtu(self) -> int:
        """MTU inside the VPCs and in the storage zone (underlay minus the VXLAN headers)."""
        return self.spec.underlay_mtu - VXLAN_OVERHEAD

    def gateways_of(self, kind: str) -> tuple[Gateway, ...]:
        """The gateways of one kind, in plan order."""
        return tuple(g for g in self.gateways if g.kind == kind)


def router_mac(vpc_index: int) -> str:
    """Inner MAC of a VPC's virtual router (source MAC of replies toward the hosts)."""
    return f"02:aa:00:{vpc_index:02x}:00:01"


def vxlan_name(vpc: VpcSpec) -> str:
    """Name of the VXLAN device of a VPC, on gateways and hosts alike."""
    return f"vx-{vpc.name}"


def _mac(kind: int, a: int, b: int) -> str:
    return f"02:{kind:02x}:00:{a:02x}:00:{b:02x}"


def load(path: Path) -> TopologySpec:
    """Read and validate a topology file; raise TopologyError naming the file, the line and the
    field. The file is read in the product's strict dialect (intent/strict_yaml.py): a key
    written twice is an error, and `no`, `010` or `1:30` where a number or a boolean is wanted
    is refused with what YAML 1.1 would have read."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        raw = strict_yaml.load(text, str(path))
    except strict_yaml.YamlInputError as exc:
        raise TopologyError(str(exc)) from None
    return parse(raw, source=str(path), text=text)


def parse(raw: object, source: str = "<topology>", text: str | None = None) -> TopologySpec:
    """Validate an already-parsed YAML document; with its `text`, each error names its line."""
    if not isinstance(raw, dict):
        raise TopologyError(f"{source}: the document must be a mapping")
    try:
        return TopologySpec.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            where = ".".join(str(p) for p in loc) or "(document)"
            line, note = strict_yaml.where(text, loc) if text is not None else (None, None)
            at = f"{source}:{line}" if line else source
            lines.append(f"{at}: {where}: {err['msg']}" + (f" ({note})" if note else ""))
        raise TopologyError("\n".join(lines)) from None


def plan(spec: TopologySpec) -> Plan:
    """Derive every name, address and MAC of the deployment from the spec."""
    cr, sr = f"{PREFIX}cr", f"{PREFIX}sr"
    under, inner_mtu = spec.underlay_mtu, spec.underlay_mtu - VXLAN_OVERHEAD
    links: list[Link] = []
    hosts: list[Host] = []
    for i in range(1, spec.hosts + 1):
        hns = f"{PREFIX}h{i}"
        vtep = f"10.1.{i}.2"
        links.append(
            Link(hns, "up0", _mac(0x01, i, 2), f"{vtep}/24",
                 cr, f"h{i}", _mac(0x01, i, 1), f"10.1.{i}.1/24", under)
        )
        eps = []
        for v, vpc in enumerate(spec.vpcs, start=1):
            base = int(vpc.prefix.network_address)
            addr = ipaddress.IPv4Address(base + i * 256 + 10)
            vrouter = ipaddress.IPv4Address(base + 255 * 256 + 254)
            addr6 = gw6 = None
            if vpc.prefix6 is not None:
                base6 = int(vpc.prefix6.network_address)
                addr6 = str(ipaddress.IPv6Address(base6 + i * 256 + 10))
                gw6 = str(ipaddress.IPv6Address(base6 + 0xFFFE))
            ep = Endpoint(
                name=f"h{i}-{vpc.name}", ns=f"{PREFIX}h{i}-{vpc.name}", host=i, vpc=vpc,
                addr=str(addr), mac=_mac(0xE0 + v, i, 0x10), gw_addr=str(vrouter),
                addr6=addr6, gw_addr6=gw6,
            )
            eps.append(ep)
            # The endpoint side is a plain NIC; the host side is a bridge port of the vSwitch.
            links.append(
                Link(ep.ns, "eth0", ep.mac, f"{addr}/{vpc.prefix.prefixlen}",
                     hns, f"ep-{vpc.name}", _mac(0xE0 + v, i, 0x11), None, inner_mtu,
                     a_addr6=f"{addr6}/{vpc.prefix6.prefixlen}" if vpc.prefix6 else None)
            )
        hosts.append(Host(i, hns, vtep, tuple(eps)))

    gateways: list[Gateway] = []
    # Kinds in registration order (legacy first), numbered globally (k) and per kind (n).
    order = [(kind, n) for kind in kinds.registry().values()
             for n in range(1, spec.gateways.count(kind.name) + 1)]
    for k, (kind, n) in enumerate(order, start=1):
        name = f"{kind.letter}gw{n}"
        gw = Gateway(
            name=name, kind=kind.name, index=k, ns=f"{PREFIX}{name}",
            compute_addr=f"10.10.{k}.2", compute_peer=f"10.10.{k}.1",
            compute_mac=_mac(0x10, k, 2), compute_peer_mac=_mac(0x10, k, 1),
            storage_addr=f"10.20.{k}.2", storage_peer=f"10.20.{k}.1",
            storage_mac=_mac(0x20, k, 2), storage_peer_mac=STORAGE_ROUTER_MAC,
            storage_addr6=f"fd20:{k}::2", storage_peer6=f"fd20:{k}::1",
        )
        gateways.append(gw)
        links.append(Link(gw.ns, "c0", gw.compute_mac, f"{gw.compute_addr}/24",
                          cr, f"g{k}", gw.compute_peer_mac, f"{gw.compute_peer}/24", under))
        links.append(Link(gw.ns, "s0", gw.storage_mac, f"{gw.storage_addr}/24",
                          sr, f"g{k}", gw.storage_peer_mac, f"{gw.storage_peer}/24", inner_mtu,
                          a_addr6=f"{gw.storage_addr6}/64", b_addr6=f"{gw.storage_peer6}/64"))

    subnet, subnet6 = spec.storage.subnet, spec.storage.subnet6
    nodes = []
    for j in range(1, spec.storage.nodes + 1):
        st_addr = str(subnet.network_address + 10 + j)
        st_addr6 = str(subnet6.network_address + 10 + j)
        node = StorageNode(f"st{j}", f"{PREFIX}st{j}", st_addr, _mac(0x30, j, 2), st_addr6)
        nodes.append(node)
        links.append(Link(node.ns, "eth0", node.mac, f"{st_addr}/{subnet.prefixlen}",
                          sr, f"st{j}", _mac(0x30, j, 1), None, inner_mtu,
                          a_addr6=f"{st_addr6}/{subnet6.prefixlen}"))
    return Plan(
        spec=spec, hosts=tuple(hosts), gateways=tuple(gateways), storage_nodes=tuple(nodes),
        links=tuple(links), compute_router_ns=cr, storage_router_ns=sr,
        storage_gw_addr=str(subnet.network_address + 1),
        storage_gw_addr6=str(subnet6.network_address + 1),
    )


def workload_targets(p: Plan) -> Targets:
    """The workload's view of a deployment: every endpoint, the storage nodes, the shard sizes."""
    spec = p.spec.storage
    return Targets(endpoints=tuple(WorkerEndpoint(e.name, e.ns) for e in p.endpoints),
                   servers=tuple(n.addr for n in p.storage_nodes), shards=spec.shards,
                   shard_size_mib=spec.shard_size_mib,
                   checkpoint_max_mib=spec.checkpoint_max_mib)
