/* Inner L4 header: the checksum field that address translation must correct, and the port word
 * for the flow hash. Only TCP and UDP carry ports; ICMPv6 has a pseudo-header checksum too.
 * ICMP errors quote the packet that caused them: a stateless translator rewrites the quoted
 * address too (as NAT64 and NPTv6 translators do), or the sender's stack cannot match the error to
 * its socket and path-MTU discovery breaks. */
#ifndef CZ_L4_H
#define CZ_L4_H

#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include "csum.h"

#define CZ_IPPROTO_ICMPV6 58
#define CZ_ICMP_HLEN 8          /* type, code, checksum, 4 bytes (MTU, pointer or unused) */

struct cz_l4 {
	__u16 *check;   /* 0 when the protocol has no pseudo-header checksum we must fix */
	__u32 ports;    /* raw 4 bytes of (sport, dport), 0 without ports */
	__u16 udp;      /* zero UDP checksum rule applies */
	__u16 bare;     /* a TCP segment without payload: SYN, SYN-ACK, pure ACK, FIN, RST */
};

/* Parses the L4 header at l4 with avail bytes of IP payload. Returns -1 if it is truncated. */
static __always_inline int cz_l4_parse(void *l4, void *data_end, __u8 proto, __u32 avail,
				       int ipv6, struct cz_l4 *out)
{
	out->check = 0;
	out->ports = 0;
	out->udp = 0;
	out->bare = 0;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *t = l4;
		if (avail < sizeof(*t) || (void *)(t + 1) > data_end)
			return -1;
		out->check = &t->check;
		out->ports = *(__u32 *)t;
		out->bare = avail <= (__u32)t->doff * 4;
	} else if (proto == IPPROTO_UDP) {
		struct udphdr *u = l4;
		if (avail < sizeof(*u) || (void *)(u + 1) > data_end)
			return -1;
		out->check = &u->check;
		out->ports = *(__u32 *)u;
		out->udp = 1;
	} else if (ipv6 && proto == CZ_IPPROTO_ICMPV6) {
		__u16 *h = l4;
		if (avail < 4 || (void *)(h + 2) > data_end)
			return -1;
		out->check = &h[1];
	}
	return 0;
}

/* Corrects the L4 checksum for an address change (4 or 16 bytes as 32-bit words). */
static __always_inline void cz_l4_fix(struct cz_l4 *l4, const __u32 *from, const __u32 *to,
				      int words)
{
	if (!l4->check)
		return;
	__u16 c = *l4->check;
	if (l4->udp && c == 0)
		return;
	if (words == 1)
		c = cz_csum_replace4(c, from[0], to[0]);
	else
		c = cz_csum_replace16(c, from, to);
	*l4->check = l4->udp ? cz_udp_fix(c) : c;
}

/* An ICMP error's quoted address that translation must rewrite, with the checksums it is in. */
struct cz_quote {
	__u32 *addr;            /* 0: nothing to translate (not an ICMP error) */
	__u16 *ip_check;        /* quoted IPv4 header checksum; 0 for IPv6 */
	__u16 *check;           /* the ICMP checksum */
};

/* ICMPv4 destination unreachable, time exceeded, parameter problem; ICMPv6 types 1 to 4. */
static __always_inline int cz_icmp_is_error(__u8 type, int ipv6)
{
	if (ipv6)
		return type >= 1 && type <= 4;
	return type == 3 || type == 11 || type == 12;
}

/* Finds the address of the quoted header that translation rewrites: the quoted source (dst_side
 * 0, errors about a packet we translated on its way to storage) or the quoted destination
 * (dst_side 1, errors a compute host sends about a reply). It must equal expect, the outer address
 * being translated, since an error goes back to the sender of what it quotes. Returns 0 (q->addr
 * is 0 when there is nothing to do) or -1 when the quote is truncated, beyond the first buffer or
 * not about expect. */
static __always_inline int cz_quote_parse(void *l4, void *data_end, __u8 proto, __u32 avail,
					  int ipv6, int dst_side, const __u32 *expect,
					  struct cz_quote *q)
{
	__u8 *icmp = l4;

	q->addr = 0;
	if (proto != (ipv6 ? CZ_IPPROTO_ICMPV6 : IPPROTO_ICMP))
		return 0;
	if (avail < 1 || (void *)(icmp + 1) > data_end || !cz_icmp_is_error(icmp[0], ipv6))
		return 0;
	__u8 *quoted = icmp + CZ_ICMP_HLEN;
	if (!ipv6) {
		if (avail < CZ_ICMP_HLEN + 20 || (void *)(quoted + 20) > data_end ||
		    (quoted[0] >> 4) != 4)
			return -1;
		__u32 *a = (__u32 *)(quoted + (dst_side ? 16 : 12));
		if (*a != expect[0])
			return -1;
		q->addr = a;
		q->ip_check = (__u16 *)(quoted + 10);
	} else {
		if (avail < CZ_ICMP_HLEN + 40 || (void *)(quoted + 40) > data_end ||
		    (quoted[0] >> 4) != 6)
			return -1;
		__u32 *a = (__u32 *)(quoted + (dst_side ? 24 : 8));
		if (a[0] != expect[0] || a[1] != expect[1] || a[2] != expect[2] || a[3] != expect[3])
			return -1;
		q->addr = a;
		q->ip_check = 0;
	}
	q->check = (__u16 *)(icmp + 2);
	return 0;
}

/* Rewrites the quoted address from -> to: the quoted IPv4 header checksum and the ICMP checksum
 * follow incrementally (the quoted transport checksum is left as it is: no stack checks it). */
static __always_inline void cz_quote_fix(struct cz_quote *q, const __u32 *from, const __u32 *to,
					 int words)
{
	if (!q->addr)
		return;
	__u16 c = *q->check;
	if (words == 1) {
		__u16 old = *q->ip_check;
		__u16 new = cz_csum_replace4(old, from[0], to[0]);
		c = cz_csum_replace4(c, from[0], to[0]);
		c = cz_csum_replace2(c, old, new);
		*q->ip_check = new;
		q->addr[0] = to[0];
	} else {
		c = cz_csum_replace16(c, from, to);
		__builtin_memcpy(q->addr, to, 16);
	}
	*q->check = c;
}

#endif
