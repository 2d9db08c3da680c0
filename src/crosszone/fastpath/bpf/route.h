/* Route lookup on (VPC, inner destination), longest prefix first.
 *
 * The kernel's LPM trie walks one node per bit of prefix and cost ~5x a bare XDP_TX program here
 * with 1M routes. Instead each VPC keeps the few prefix lengths it actually uses (sorted, longest
 * first) and we probe one exact-match hash per length: a VPC with routes of 5 lengths costs at
 * most 5 hash lookups, usually fewer, and a hash probe does not get slower as the table grows.
 * This is the classic "hash per prefix length" scheme; on a P4 target it maps to one exact-match
 * table per length or to a TCAM. Build with -DCZ_ROUTES_LPM_TRIE for the trie baseline. */
#ifndef CZ_ROUTE_H
#define CZ_ROUTE_H

#include <bpf/bpf_endian.h>
#include "maps.h"

static __always_inline __u32 cz_mask4(__u32 plen)
{
	return plen ? bpf_htonl(~0u << (32 - plen)) : 0;
}

static __always_inline void cz_mask6(__u32 *out, const __u32 *addr, __u32 plen)
{
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 bits = plen > (__u32)(32 * i) ? plen - 32 * i : 0;
		__u32 m = bits >= 32 ? ~0u : (bits ? ~0u << (32 - bits) : 0);
		out[i] = addr[i] & bpf_htonl(m);
	}
}

#ifndef CZ_ROUTES_LPM_TRIE

static __always_inline struct cz_route *cz_route4(const struct cz_vpc *vpc, __be32 dst)
{
	struct cz_route4_key key = { .vpc_id = vpc->vpc_id };
	__u32 n = vpc->n_plens4;

	for (__u32 i = 0; i < CZ_MAX_PLENS4; i++) {
		if (i >= n)
			break;
		__u32 plen = vpc->plens4[i] & 63;
		if (plen > 32)
			break;
		key.plen = plen;
		key.addr = dst & cz_mask4(plen);
		struct cz_route *r = bpf_map_lookup_elem(&routes4, &key);
		if (r)
			return r;
	}
	return 0;
}

static __always_inline struct cz_route *cz_route6(const struct cz_vpc *vpc, const __u32 *dst)
{
	struct cz_route6_key key = { .vpc_id = vpc->vpc_id };
	__u32 n = vpc->n_plens6;

	for (__u32 i = 0; i < CZ_MAX_PLENS6; i++) {
		if (i >= n)
			break;
		__u32 plen = vpc->plens6[i];
		if (plen > 128)
			break;
		key.plen = plen;
		cz_mask6((__u32 *)key.addr, dst, plen);
		struct cz_route *r = bpf_map_lookup_elem(&routes6, &key);
		if (r)
			return r;
	}
	return 0;
}

#else /* CZ_ROUTES_LPM_TRIE */

static __always_inline struct cz_route *cz_route4(const struct cz_vpc *vpc, __be32 dst)
{
	struct cz_lpm4_key key = {
		.prefixlen = 64, .vpc_id = bpf_htonl(vpc->vpc_id), .addr = dst,
	};
	return bpf_map_lookup_elem(&routes4_lpm, &key);
}

static __always_inline struct cz_route *cz_route6(const struct cz_vpc *vpc, const __u32 *dst)
{
	struct cz_lpm6_key key = { .prefixlen = 160, .vpc_id = bpf_htonl(vpc->vpc_id) };
	__builtin_memcpy(key.addr, dst, 16);
	return bpf_map_lookup_elem(&routes6_lpm, &key);
}

#endif

#endif
