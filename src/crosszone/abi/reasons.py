"""Verdict reasons of the fast path, mirrored from `bpf/reasons.h` (`enum cz_reason`).

A test compares names and values with the enum in the compiled object's BTF, so the two cannot
drift. `Reason.verdict_class` tells which XDP action a reason goes with.
"""

from __future__ import annotations

import enum


class Reason(enum.IntEnum):
    """enum cz_reason: one value per named verdict."""

    FWD_TO_STORAGE = 0
    FWD_TO_COMPUTE = 1
    PASS_NOT_IP = 2
    PASS_NOT_OURS = 3
    PASS_TO_GATEWAY = 4
    PASS_OUTER_MALFORMED = 5
    PASS_OUTER_OPTIONS = 6
    PASS_OUTER_FRAGMENT = 7
    PASS_INNER_NOT_IP = 8
    PASS_INNER_ND = 9
    PASS_IPV4_OPTIONS = 10
    PASS_IPV4_FRAGMENT = 11
    PASS_IPV6_EXTHDR = 12
    PASS_TTL_EXCEEDED = 13
    PASS_ROUTE_SLOWPATH = 14
    DROP_VXLAN_MALFORMED = 15
    DROP_VXLAN_FLAGS = 16
    DROP_UNKNOWN_VNI = 17
    DROP_VTEP_NOT_ALLOWED = 18
    DROP_INNER_MALFORMED = 19
    DROP_SRC_NOT_IN_VPC = 20
    DROP_ROUTE_MISS = 21
    DROP_ROUTE_BLACKHOLE = 22
    DROP_NO_NEXTHOP = 23
    DROP_HOST_UNKNOWN = 24
    DROP_REDIRECT_FAILED = 25
    DROP_REPLY_WRONG_PORT = 26
    DROP_ICMP_QUOTE = 27
    DROP_VPC_RATE = 28

    @property
    def c_name(self) -> str:
        """The C enumerator name (CZ_R_...)."""
        return f"CZ_R_{self.name}"

    @property
    def label(self) -> str:
        """Lower-case name used in JSON and metrics, e.g. 'drop_route_miss'."""
        return self.name.lower()

    @property
    def verdict_class(self) -> str:
        """'forward', 'pass' or 'drop'."""
        return self.name.split("_", 1)[0].lower().replace("fwd", "forward")


REASON_MAX = len(Reason)


class XdpAction(enum.IntEnum):
    """XDP return codes (include/uapi/linux/bpf.h, enum xdp_action)."""

    ABORTED = 0
    DROP = 1
    PASS = 2
    TX = 3
    REDIRECT = 4

    @property
    def label(self) -> str:
        """Lower-case name used in JSON."""
        return self.name.lower()
