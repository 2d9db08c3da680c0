/* Route lookup on (VPC, inner destination), longest prefix first.
 *
 * The kernel's LPM trie walks one node per bit of prefix and cost ~5x a bare XDP_TX program here
 * with 1M routes. Instead each VPC keeps the few prefix lengths it actually uses (sorted, longest
 * first) and all routes sit in one exact-match slot table keyed by (VPC, length, masked
 * destination) (slots.h). A length the destination has no route for usually costs one inlined
 * array read and one compare: its home slot is empty. On a P4 target each length is an
 * exact-match table (or the lot is one TCAM).
 *
 * Routes are returned by value (one 8-byte copy), action 0 meaning no route.
 * Build with -DCZ_ROUTES_LPM_TRIE for the trie baseline the benchmark compares against. */
#ifndef CZ_ROUTE_H
#define CZ_ROUTE_H

#include <bpf/bpf_endian.h>
#include "maps.h"
#include "slots.h"

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

static __always_inline struct cz_route cz_route4(const struct cz_vpc *vpc, __be32 dst)
{
	struct cz_route none = {};
	__u64 vpc_bits = CZ_SLOT_LIVE | ((__u64)vpc->vpc_id << CZ_SLOT_VPC_SHIFT);
	__u32 n = vpc->n_plens4;

	for (__u32 i = 0; i < CZ_MAX_PLENS4; i++) {
		if (i >= n)
			break;
		__u32 plen = vpc->plens4[i] & 63;
		if (plen > 32)
			break;
		__u64 want = vpc_bits | ((__u64)plen << CZ_SLOT_PLEN_SHIFT) | (dst & cz_mask4(plen));
		__u64 r = cz_route4_find(want);
		if (r)
			return cz_route_word(r);
	}
	return none;
}

static __always_inline struct cz_route cz_route6(const struct cz_vpc *vpc, const __u32 *dst)
{
	struct cz_route none = {};
	__u64 vpc_bits = CZ_SLOT_LIVE | ((__u64)vpc->vpc_id << CZ_SLOT_VPC_SHIFT);
	__u32 m[4];
	__u32 n = vpc->n_plens6;

	for (__u32 i = 0; i < CZ_MAX_PLENS6; i++) {
		if (i >= n)
			break;
		__u32 plen = vpc->plens6[i];
		if (plen > 128)
			break;
		cz_mask6(m, dst, plen);
		__u64 want = vpc_bits | ((__u64)plen << CZ_SLOT_PLEN_SHIFT);
		__u64 hi = ((__u64)m[1] << 32) | m[0];
		__u64 lo = ((__u64)m[3] << 32) | m[2];
		__u64 r = cz_route6_find(want, hi, lo);
		if (r)
			return cz_route_word(r);
	}
	return none;
}

#else /* CZ_ROUTES_LPM_TRIE */

static __always_inline struct cz_route cz_route4(const struct cz_vpc *vpc, __be32 dst)
{
	struct cz_lpm4_key key = {
		.prefixlen = 64, .vpc_id = bpf_htonl(vpc->vpc_id), .addr = dst,
	};
	struct cz_route *r = bpf_map_lookup_elem(&routes4_lpm, &key);
	struct cz_route none = {};
	return r ? cz_route_copy(r) : none;
}

static __always_inline struct cz_route cz_route6(const struct cz_vpc *vpc, const __u32 *dst)
{
	struct cz_lpm6_key key = { .prefixlen = 160, .vpc_id = bpf_htonl(vpc->vpc_id) };
	__builtin_memcpy(key.addr, dst, 16);
	struct cz_route *r = bpf_map_lookup_elem(&routes6_lpm, &key);
	struct cz_route none = {};
	return r ? cz_route_copy(r) : none;
}

#endif

#endif
