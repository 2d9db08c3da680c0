"""Reference model of `bpf/csum.h` and `bpf/l4.h`: checksum arithmetic, the inner L4 header, and
the quoted header of ICMP errors, which a stateless translator rewrites too.

Split from `model.py`, which uses these for both directions; the same operations in the same order
as the C, so that incremental checksums agree bit for bit.
"""

from __future__ import annotations

IPPROTO_ICMP = 1
IPPROTO_TCP = 6
IPPROTO_UDP = 17
IPPROTO_ICMPV6 = 58
ICMP_HLEN = 8  # CZ_ICMP_HLEN


# -- csum.h ------------------------------------------------------------------------------------
def _fold(s: int) -> int:
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return s & 0xFFFF


def _words(b: bytes) -> list[int]:
    return [int.from_bytes(b[i : i + 2], "big") for i in range(0, len(b), 2)]


def csum_replace(check: int, old: bytes, new: bytes) -> int:
    """RFC 1624 eqn 3 over equally long fields (cz_csum_replace2/4/16)."""
    s = ~check & 0xFFFF
    for o, n in zip(_words(old), _words(new)):
        s += (~o & 0xFFFF) + n
        s = (s & 0xFFFF) + (s >> 16)
    return ~_fold(s) & 0xFFFF


def ipv4_csum(hdr: bytes) -> int:
    """cz_ipv4_csum: checksum of a 20-byte header with a zero check field."""
    return ~_fold(sum(_words(hdr))) & 0xFFFF


# -- l4.h --------------------------------------------------------------------------------------
def l4_parse(
    pkt: bytearray, off: int, proto: int, avail: int, ipv6: bool
) -> tuple[int | None, bytes, bool] | None:
    """cz_l4_parse: (checksum offset or None, port bytes, udp) or None when truncated."""
    if proto == IPPROTO_TCP:
        if avail < 20 or off + 20 > len(pkt):
            return None
        return off + 16, bytes(pkt[off : off + 4]), False
    if proto == IPPROTO_UDP:
        if avail < 8 or off + 8 > len(pkt):
            return None
        return off + 6, bytes(pkt[off : off + 4]), True
    if ipv6 and proto == IPPROTO_ICMPV6:
        if avail < 4 or off + 4 > len(pkt):
            return None
        return off + 2, b"\0\0\0\0", False
    return None, b"\0\0\0\0", False


def tcp_bare(pkt: bytearray, off: int, proto: int, avail: int) -> bool:
    """cz_l4.bare: a TCP segment without payload (its data offset reaches the IP payload's end);
    only asked of a header l4_parse accepted."""
    return proto == IPPROTO_TCP and avail <= (pkt[off + 12] >> 4) * 4


def l4_fix(pkt: bytearray, l4: tuple[int | None, bytes, bool], old: bytes, new: bytes) -> None:
    """cz_l4_fix: correct the L4 checksum for an address change."""
    off, _, udp = l4
    if off is None:
        return
    c = int.from_bytes(pkt[off : off + 2], "big")
    if udp and c == 0:
        return
    c = csum_replace(c, old, new)
    if udp and c == 0:
        c = 0xFFFF
    pkt[off : off + 2] = c.to_bytes(2, "big")


# -- l4.h: ICMP errors -------------------------------------------------------------------------
class QuoteError(Exception):
    """The quoted header of an ICMP error cannot be translated (CZ_R_DROP_ICMP_QUOTE)."""


def icmp_is_error(icmp_type: int, ipv6: bool) -> bool:
    """cz_icmp_is_error."""
    return 1 <= icmp_type <= 4 if ipv6 else icmp_type in (3, 11, 12)


def quote_parse(
    pkt: bytearray, off: int, proto: int, avail: int, ipv6: bool, dst_side: bool, expect: bytes
) -> int | None:
    """cz_quote_parse: offset of the ICMP header whose quote to translate, None when not an ICMP
    error; raises QuoteError when the quote is truncated or not about expect."""
    if proto != (IPPROTO_ICMPV6 if ipv6 else IPPROTO_ICMP):
        return None
    if avail < 1 or off + 1 > len(pkt) or not icmp_is_error(pkt[off], ipv6):
        return None
    q = off + ICMP_HLEN
    hlen = 40 if ipv6 else 20
    if avail < ICMP_HLEN + hlen or q + hlen > len(pkt) or pkt[q] >> 4 != (6 if ipv6 else 4):
        raise QuoteError
    a = q + ((24 if dst_side else 8) if ipv6 else (16 if dst_side else 12))
    if bytes(pkt[a : a + len(expect)]) != expect:
        raise QuoteError
    return off


def quote_fix(pkt: bytearray, icmp: int | None, dst_side: bool, old: bytes, new: bytes) -> None:
    """cz_quote_fix: rewrite the quoted address old -> new with both checksums."""
    if icmp is None:
        return
    q = icmp + ICMP_HLEN
    c = int.from_bytes(pkt[icmp + 2 : icmp + 4], "big")
    if len(old) == 4:
        a = q + (16 if dst_side else 12)
        qold = bytes(pkt[q + 10 : q + 12])
        qnew = csum_replace(int.from_bytes(qold, "big"), old, new).to_bytes(2, "big")
        c = csum_replace(c, old, new)
        c = csum_replace(c, qold, qnew)
        pkt[q + 10 : q + 12] = qnew
    else:
        a = q + (24 if dst_side else 8)
        c = csum_replace(c, old, new)
    pkt[a : a + len(new)] = new
    pkt[icmp + 2 : icmp + 4] = c.to_bytes(2, "big")
