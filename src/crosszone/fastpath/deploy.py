"""Attach the gateway to real interfaces, pin it, and take it away again.

`attach` loads the program with its maps pinned under `<pin_dir>/maps` (a restarted agent reuses
them, so forwarding never stops), programs the tables compiled from an intent, attaches the
program in native mode to every gateway interface and an XDP_PASS program to each veth peer
(veth only accepts XDP_REDIRECT into a device whose peer runs XDP). What was done is recorded in
a state file so that `detach` can undo exactly that, also from another process.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute

from crosszone.abi.objects import BUILD_DIR
from crosszone.compile.encode import bind_ports, encode_tables
from crosszone.compile.tables import Tables, compile_tables
from crosszone.fastpath.libbpf import (
    BpfMap,
    BpfObject,
    BpfProgram,
    xdp_attach,
    xdp_detach,
    xdp_query_prog_id,
)
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.sink import MapSink, program
from crosszone.intent.cluster import load_cluster, only_gateway
from crosszone.linux.netns import in_netns, named_netns

STATE_DIR = Path("/run/crosszone/fastpath")


def _build_dir() -> Path:
    return BUILD_DIR


def _state_file(pin_dir: Path) -> Path:
    return STATE_DIR / (str(pin_dir).strip("/").replace("/", "_") + ".json")


@dataclass(frozen=True)
class Attachment:
    """One XDP attachment: namespace (None = root), interface name and ifindex."""

    netns: str | None
    ifname: str
    ifindex: int


def _nsid_of(ipr: IPRoute, netns: str | None, home_fd: int) -> int | None:
    """The id under which the current namespace knows `netns` (None: our starting namespace,
    given as home_fd); None when it has no id there."""
    fd = os.dup(home_fd) if netns is None else os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        nsid = ipr.get_netnsid(fd=fd).get("nsid")
    finally:
        os.close(fd)
    return None if nsid is None or nsid < 0 else int(nsid)


def _veth_peer(ifindex: int, home_ns: str | None) -> Attachment | None:
    """The veth peer of ifindex. Ifindexes repeat across namespaces, so the peer's namespace is
    found by its id (IFLA_LINK_NETNSID), never by index alone."""
    start = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        with in_netns(home_ns), IPRoute() as ipr:
            link = ipr.get_links(ifindex)[0]
            info = link.get_attr("IFLA_LINKINFO")
            kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
            peer_index = link.get_attr("IFLA_LINK")
            peer_nsid = link.get_attr("IFLA_LINK_NETNSID")
            if kind != "veth" or not peer_index:
                return None
            candidates = (
                [home_ns]
                if peer_nsid is None
                else [
                    ns
                    for ns in [None, *named_netns()]
                    if ns != home_ns and _nsid_of(ipr, ns, start) == peer_nsid
                ]
            )
    finally:
        os.close(start)
    if not candidates:
        return None
    with in_netns(candidates[0]), IPRoute() as ipr:
        found = ipr.get_links(peer_index)
        return (
            Attachment(candidates[0], found[0].get_attr("IFLA_IFNAME"), peer_index)
            if found
            else None
        )


def attach(
    intent_path: str | Path,
    pin_dir: str | Path,
    netns: str | None = None,
    obj_path: str | Path | None = None,
    gateway: str | None = None,
) -> Tables:
    """Load, program, attach and pin a gateway of an intent file; returns the bound tables.

    gateway names the gateway to program; it may be left out when the file has only one."""
    c = load_cluster(intent_path)
    name = only_gateway(c, gateway, str(intent_path))
    return attach_tables(compile_tables(c, name), pin_dir, netns, obj_path)


def attach_tables(
    tables: Tables,
    pin_dir: str | Path,
    netns: str | None = None,
    obj_path: str | Path | None = None,
    write_tables: bool = True,
) -> Tables:
    """attach() for compiled tables. write_tables=False loads and attaches only: an agent that
    reconciles the (possibly pinned, already live) maps itself by diff uses that."""
    pin = Path(pin_dir)
    obj_path = Path(obj_path or _build_dir() / "xdp_gateway.o")
    pass_obj = BpfObject.open(_build_dir() / "xdp_pass.o")
    done: list[Attachment] = []
    with in_netns(netns):
        bound = bind_ports(tables, socket.if_nametoindex)
        reused = (pin / "maps").is_dir() and any((pin / "maps").iterdir())
        obj = BpfObject.open(obj_path, pin_maps_dir=pin / "maps")
        prog = obj.program("cz_gateway")
        if write_tables:
            # The one programming path: encode, diff, one sink (the devmap is written here,
            # inside the gateway's namespace). Pinned maps that an earlier attach left are read
            # back first, so a re-attach writes only what changed and deletes what is stale.
            maps = GatewayMaps.of(obj)
            sink = MapSink(maps)
            new = encode_tables(bound)
            program(sink, new, sink.read(new) if reused else None)
            maps.close()
        prog_pin = pin / "prog"
        if prog_pin.exists():
            prog_pin.unlink()
        prog.pin(prog_pin)
    for port in bound.ports:
        peer = _veth_peer(port.ifindex, netns)
        with in_netns(netns):
            xdp_attach(port.ifindex, prog.fd)
        done.append(Attachment(netns, port.name, port.ifindex))
        if peer is not None:
            with in_netns(peer.netns):
                if not xdp_query_prog_id(peer.ifindex):
                    xdp_attach(peer.ifindex, pass_obj.program("cz_pass").fd)
                    done.append(peer)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    # A re-attach (upgrade) keeps what an earlier attach did: those peers are still ours.
    records = [a.__dict__ for a in done]
    sf = _state_file(pin)
    if sf.exists():
        records += [r for r in json.loads(sf.read_text())["attachments"] if r not in records]
    state = {"netns": netns, "pin_dir": str(pin), "attachments": records}
    sf.write_text(json.dumps(state, indent=1))
    obj.close()
    pass_obj.close()
    return bound


def detach(pin_dir: str | Path) -> int:
    """Undo attach: detach every recorded program and remove the pins. Returns detachments."""
    pin = Path(pin_dir)
    sf = _state_file(pin)
    n = 0
    if sf.exists():
        state = json.loads(sf.read_text())
        for a in state["attachments"]:
            try:
                with in_netns(a["netns"]):
                    if xdp_query_prog_id(a["ifindex"]):
                        xdp_detach(a["ifindex"])
                        n += 1
            except OSError:
                pass  # namespace or link already gone: nothing attached any more
        sf.unlink()
    if pin.exists():
        shutil.rmtree(pin, ignore_errors=True)
        # bpffs refuses rmtree's directory listing order sometimes; remove what is left.
        for root, _dirs, files in os.walk(pin, topdown=False):
            for f in files:
                os.unlink(os.path.join(root, f))
            os.rmdir(root)
    return n


def pinned_maps(pin_dir: str | Path) -> GatewayMaps:
    """The maps of an attached gateway, opened from their pins."""
    d = Path(pin_dir) / "maps"
    if not d.is_dir():
        raise FileNotFoundError(f"no gateway pinned at {pin_dir} (expected {d})")
    return GatewayMaps({p.name: BpfMap.from_pinned(p) for p in d.iterdir()})


def pinned_program(pin_dir: str | Path) -> BpfProgram:
    """The pinned gateway program."""
    return BpfProgram.from_pinned(Path(pin_dir) / "prog")


def pinned_program_id(pin_dir: str | Path) -> int:
    """The kernel id of the pinned gateway program (what its ports should have attached)."""
    prog = pinned_program(pin_dir)
    try:
        return prog.id
    finally:
        prog.close()
