/* Route lookup on (VPC, inner destination), longest prefix first.
 *
 * The kernel's LPM trie walks one node per bit of prefix and cost ~5x a bare XDP_TX program here
 * with 1M routes. Instead each VPC keeps the few prefix lengths it actually uses (sorted, longest
 * first) and each length is one exact-match table keyed by (VPC, length, masked destination).
 * A hash probe costs ~50 ns on this machine, so a Bloom filter with one bit per route sits in
 * front (Dharmapurikar et al., "Longest prefix matching using Bloom filters", SIGCOMM 2003): a
 * clear bit proves that length absent for an inlined array read, and only lengths whose bit is
 * set are probed. With 2^28 bits and 1M routes a false positive costs one wasted probe in ~0.4%
 * of lengths. On a P4 target each length is an exact-match table (or the lot is one TCAM).
 * Build with -DCZ_ROUTES_LPM_TRIE for the trie baseline. */
#ifndef CZ_ROUTE_H
#define CZ_ROUTE_H

#include <bpf/bpf_endian.h>
#include "maps.h"
#include "hash.h"

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

/* Bit index of a route key in the Bloom filter (mirrored in crosszone/fastpath/bloom.py). */
static __always_inline __u32 cz_bloom_hash4(__u32 vpc_id, __u32 plen, __u32 addr)
{
	__u32 h = CZ_HASH_SEED ^ 4;
	h = cz_mix(h, vpc_id);
	h = cz_mix(h, plen);
	h = cz_mix(h, addr);
	return cz_fmix(h);
}

static __always_inline __u32 cz_bloom_hash6(__u32 vpc_id, __u32 plen, const __u32 *addr)
{
	__u32 h = CZ_HASH_SEED ^ 6;
	h = cz_mix(h, vpc_id);
	h = cz_mix(h, plen);
#pragma unroll
	for (int i = 0; i < 4; i++)
		h = cz_mix(h, addr[i]);
	return cz_fmix(h);
}

static __always_inline int cz_bloom_maybe(__u32 h)
{
	__u32 word = (h >> 6) & (CZ_BLOOM_WORDS - 1);
	__u64 *w = bpf_map_lookup_elem(&route_bloom, &word);
	return w && ((*w >> (h & 63)) & 1);
}

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
		if (!cz_bloom_maybe(cz_bloom_hash4(key.vpc_id, plen, key.addr)))
			continue;
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
		if (!cz_bloom_maybe(cz_bloom_hash6(key.vpc_id, plen, (__u32 *)key.addr)))
			continue;
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
