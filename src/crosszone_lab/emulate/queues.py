"""Priority queues at the emulation's bottleneck ports: a rate limit and strict priority by DSCP.

On two shared cores the emulated links are as fast as the CPU, so without a rate limit no queue
ever builds where the policy could act: the CPU is the bottleneck, and all traffic waits for it
alike. `queues:` in the topology gives chosen ports a rate (an htb root, `rate_mbit`) and three
classes under it, served in strict priority:

- the policy's `small_dscp`: priority 0 (served first while it has packets);
- any other DSCP, unmarked traffic included: the default class, priority 1;
- the policy's `bulk_dscp`: priority 2.

Their assured rates add up to the link rate (89 %, 10 %, 1 %), every class may borrow up to the
whole link, and htb lends spare rate to the lowest priority number first: the low classes are
never starved completely, but a small request never waits behind bulk data at this port. Each
class has its own byte FIFO (`limit_kbytes`), since this kernel has neither `prio` nor
`fq_codel`.

The class of a packet comes from a tc BPF classifier (fastpath/bpf/tc_dscp_class.c): it returns
class 1:(0x100 + DSCP), inner DSCP for VXLAN frames, and htb sends a class id that does not exist
to the default class. So only the policy's two DSCP values get a class of their own, the program
needs no configuration, and with the policy off (nothing marked) every packet shares one FIFO.

Where marks exist decides where a queue can act. The gateways mark, so the queues that see marks
are those after a gateway: the compute router's ports toward the hosts (`hosts`: reads, replies)
and the storage router's ports toward the storage nodes (`storage`: checkpoint writes,
requests). `gateways` shapes the gateways' own ports (c0, s0): the legacy gateway's kernel path
passes its qdisc, but an XDP_REDIRECT does not pass through a qdisc at all, so for the crosszone
gateways this set shapes only what the kernel sends (BGP, BFD). It is therefore off by default.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from crosszone.abi.objects import BUILD_DIR
from crosszone.linux.netns import Cmd, in_ns

if TYPE_CHECKING:
    from crosszone_lab.emulate.topology import Plan

# Mirrors of fastpath/bpf/tc_queue.h (tests/unit/test_emulate_queues.py compares them).
QUEUE_MAJOR = 1
QUEUE_DSCP_BASE = 0x100
DEFAULT_MINOR = 0x200  # above every DSCP class (0x100 .. 0x13f)
ROOT_MINOR = 1
CLASSIFIER = BUILD_DIR / "tc_dscp_class.o"
# htb's round-robin quantum only matters between classes of one priority (here none share one);
# set explicitly, above the largest frame (9000-byte MTU), so htb does not derive it from the
# rate and warn that it is too big.
QUANTUM_BYTES = 9100

LinkSet = Literal["hosts", "storage", "gateways"]


class QueueSpec(BaseModel):
    """`queues:` of a topology: which ports get the rate limit and the priority classes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate_mbit: int = Field(ge=1, le=100_000, strict=True)
    links: tuple[LinkSet, ...] = Field(default=("hosts", "storage"), min_length=1)
    limit_kbytes: int = Field(default=1024, ge=16, le=1_048_576, strict=True)  # per class FIFO


def class_minor(dscp: int) -> int:
    """The class the classifier picks for a packet with this DSCP."""
    if not 0 <= dscp <= 63:
        raise ValueError(f"DSCP {dscp} is not 0..63")
    return QUEUE_DSCP_BASE + dscp


def _handle(minor: int) -> str:
    return f"{QUEUE_MAJOR}:{minor:x}"


def class_rates_kbit(rate_mbit: int) -> tuple[int, int, int]:
    """Assured rates (small, default, bulk) in kbit/s; they add up to the link rate."""
    total = rate_mbit * 1000
    bulk = max(8, total // 100)
    default = max(8, total // 10)
    return total - default - bulk, default, bulk


def port_ops(ns: str, dev: str, spec: QueueSpec, small_dscp: int, bulk_dscp: int,
             classifier: Path = CLASSIFIER) -> list[Cmd]:
    """tc commands that give `dev` in `ns` the rate limit and the three priority classes."""
    if small_dscp == bulk_dscp:
        raise ValueError("small_dscp and bulk_dscp must differ (one class each)")
    small, default, bulk = class_rates_kbit(spec.rate_mbit)
    link = f"{spec.rate_mbit * 1000}kbit"
    root = _handle(ROOT_MINOR)
    ops = [
        in_ns(ns, "tc", "qdisc", "replace", "dev", dev, "root", "handle", f"{QUEUE_MAJOR}:",
              "htb", "default", f"{DEFAULT_MINOR:x}"),
        in_ns(ns, "tc", "class", "replace", "dev", dev, "parent", f"{QUEUE_MAJOR}:",
              "classid", root, "htb", "rate", link, "ceil", link,
              "quantum", str(QUANTUM_BYTES)),
    ]
    for minor, rate, prio in ((class_minor(small_dscp), small, 0), (DEFAULT_MINOR, default, 1),
                              (class_minor(bulk_dscp), bulk, 2)):
        ops += [
            in_ns(ns, "tc", "class", "replace", "dev", dev, "parent", root,
                  "classid", _handle(minor), "htb", "rate", f"{rate}kbit", "ceil", link,
                  "prio", str(prio), "quantum", str(QUANTUM_BYTES)),
            in_ns(ns, "tc", "qdisc", "replace", "dev", dev, "parent", _handle(minor),
                  "bfifo", "limit", f"{spec.limit_kbytes}kb"),
        ]
    ops.append(in_ns(ns, "tc", "filter", "replace", "dev", dev, "parent", f"{QUEUE_MAJOR}:",
                     "prio", "1", "handle", "1", "bpf", "obj", str(classifier),
                     "sec", "tc"))
    return ops


def class_names(small_dscp: int, bulk_dscp: int) -> dict[str, str]:
    """htb class handle -> the policy's name for it (small, default, bulk)."""
    return {_handle(class_minor(small_dscp)): "small", _handle(DEFAULT_MINOR): "default",
            _handle(class_minor(bulk_dscp)): "bulk"}


_SIZE_UNITS = {"b": 1, "Kb": 1024, "Mb": 1024**2, "Gb": 1024**3}


def tc_size(text: str) -> int | None:
    """Bytes from a size as tc prints it (`1514b`, `12Kb`, `3Mb`), None if it is none.

    tc rounds: it prints `12Kb` for any size within 16 bytes of 12 KiB, `3Mb` within 1 KiB of
    3 MiB (iproute2's sprint_size), so a backlog read from its text is that close, no closer."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(b|Kb|Mb|Gb)", text)
    return None if m is None else round(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def class_stats(tc_text: str) -> dict[str, dict[str, int]]:
    """Bytes, packets, drops and (when tc prints it) backlog_bytes per class handle, from
    `tc -s class show dev DEV`. A class's backlog is what its leaf FIFO holds now.

    Text, not `tc -j`: this iproute2 prints htb classes as text even when asked for JSON."""
    out: dict[str, dict[str, int]] = {}
    handle = None
    for line in tc_text.splitlines():
        head = re.match(r"class htb (\S+) ", line)
        if head:
            handle = head.group(1)
            continue
        sent = re.match(r"\s*Sent (\d+) bytes (\d+) pkt \(dropped (\d+),", line)
        if sent and handle is not None:
            out[handle] = {"bytes": int(sent.group(1)), "packets": int(sent.group(2)),
                           "drops": int(sent.group(3))}
            continue
        # on a line of its own, or after the rate when the class has a rate estimator
        backlog = re.search(r"\bbacklog (\S+) \d+p\b", line)
        size = tc_size(backlog.group(1)) if backlog else None
        if size is not None and handle in out:
            out[handle]["backlog_bytes"] = size
            handle = None
    return out


def port_groups(p: Plan) -> list[tuple[LinkSet, str, str]]:
    """(group, namespace, device) of every port the topology's `queues.links` shapes; the group
    is the link set that shapes it."""
    spec = p.spec.queues
    if spec is None:
        return []
    out: list[tuple[LinkSet, str, str]] = []
    if "hosts" in spec.links:
        out += [("hosts", p.compute_router_ns, f"h{h.index}") for h in p.hosts]
    if "storage" in spec.links:
        out += [("storage", p.storage_router_ns, n.name) for n in p.storage_nodes]
    if "gateways" in spec.links:
        out += [("gateways", g.ns, dev) for g in p.gateways for dev in ("c0", "s0")]
    return out


def ports(p: Plan) -> list[tuple[str, str]]:
    """(namespace, device) of every port the topology's `queues.links` shapes."""
    return [(ns, dev) for _group, ns, dev in port_groups(p)]


def reflect_ops(p: Plan) -> list[Cmd]:
    """With queues, every storage node answers a TCP connection in the class its SYN came in
    (`tcp_reflect_tos`, SYN-ACK included): a monitoring read sent in the first class (the
    migration's guard probes) is answered there too, so it never waits behind, or is dropped
    at, a FIFO the workload keeps full. Unmarked connections stay unmarked, and a gateway with
    the policy on marks each direction of a flow itself, whatever the node wrote."""
    if p.spec.queues is None:
        return []
    return [in_ns(n.ns, "sysctl", "-qw", "net.ipv4.tcp_reflect_tos=1") for n in p.storage_nodes]


def plan_ops(p: Plan) -> list[Cmd]:
    """The queues of the whole deployment (none without `queues:`)."""
    spec, policy = p.spec.queues, p.spec.policy
    if spec is None:
        return []
    return [op for ns, dev in ports(p)
            for op in port_ops(ns, dev, spec, policy.small_dscp, policy.bulk_dscp)]
