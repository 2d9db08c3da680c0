/* Internet checksum arithmetic (RFC 1071, RFC 1624). A ones' complement sum does not depend on byte
 * order, so words are read straight from the packet; crosszone/fastpath/model.py does the same. */
#ifndef CZ_CSUM_H
#define CZ_CSUM_H

#include <linux/types.h>
#include <bpf/bpf_endian.h>

static __always_inline __u16 cz_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* RFC 1624 eqn 3: HC' = ~(~HC + ~m + m'), for one 16-bit word. */
static __always_inline __u16 cz_csum_replace2(__u16 check, __u16 from, __u16 to)
{
	__u32 s = (__u16)~check;
	s += (__u16)~from;
	s += to;
	return (__u16)~cz_fold(s);
}

/* The same for a 4-byte field (an IPv4 address). */
static __always_inline __u16 cz_csum_replace4(__u16 check, __u32 from, __u32 to)
{
	__u32 s = (__u16)~check;
	s += (__u16)~(from & 0xffff);
	s += (__u16)~(from >> 16);
	s += to & 0xffff;
	s += to >> 16;
	return (__u16)~cz_fold(s);
}

/* The same for a 16-byte field (an IPv6 address), given as four 32-bit words. */
static __always_inline __u16 cz_csum_replace16(__u16 check, const __u32 *from, const __u32 *to)
{
	__u32 s = (__u16)~check;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		s += (__u16)~(from[i] & 0xffff);
		s += (__u16)~(from[i] >> 16);
		s += to[i] & 0xffff;
		s += to[i] >> 16;
		s = (s & 0xffff) + (s >> 16);
	}
	return (__u16)~cz_fold(s);
}

/* Full checksum of a 20-byte IPv4 header whose check field is zero. */
static __always_inline __u16 cz_ipv4_csum(const __u16 *hdr)
{
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		s += hdr[i];
	return (__u16)~cz_fold(s);
}

/* TTL - 1 with its checksum update, as Linux's ip_decrease_ttl: a decrement of one adds 0x0100
 * (network order) with end-around carry. Bit for bit what cz_csum_replace2 gives for this change
 * (checked over every checksum, TTL and protocol), in a third of the instructions. */
static __always_inline void cz_ipv4_ttl_dec(__u8 *ttl, __u16 *check)
{
	__u32 c = *check;

	c += bpf_htons(0x0100);
	*check = (__u16)(c + (c >= 0xffff));
	(*ttl)--;
}

/* A UDP checksum of zero means "none" (RFC 768): it stays zero, and a computed zero is sent as
 * 0xffff. TCP and ICMPv6 have no such rule. */
static __always_inline __u16 cz_udp_fix(__u16 check)
{
	return check ? check : 0xffff;
}

#endif
