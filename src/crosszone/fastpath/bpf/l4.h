/* Inner L4 header: the checksum field that address translation must correct, and the port word
 * for the flow hash. Only TCP and UDP carry ports; ICMPv6 has a pseudo-header checksum too. */
#ifndef CZ_L4_H
#define CZ_L4_H

#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include "csum.h"

#define CZ_IPPROTO_ICMPV6 58

struct cz_l4 {
	__u16 *check;   /* 0 when the protocol has no pseudo-header checksum we must fix */
	__u32 ports;    /* raw 4 bytes of (sport, dport), 0 without ports */
	int udp;        /* zero UDP checksum rule applies */
};

/* Parses the L4 header at l4 with avail bytes of IP payload. Returns -1 if it is truncated. */
static __always_inline int cz_l4_parse(void *l4, void *data_end, __u8 proto, __u32 avail,
				       int ipv6, struct cz_l4 *out)
{
	out->check = 0;
	out->ports = 0;
	out->udp = 0;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *t = l4;
		if (avail < sizeof(*t) || (void *)(t + 1) > data_end)
			return -1;
		out->check = &t->check;
		out->ports = *(__u32 *)t;
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

#endif
