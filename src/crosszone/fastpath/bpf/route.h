/* Route lookup on (VPC, inner destination), longest prefix first.
 *
 * The kernel's LPM trie walks one node per bit of prefix and cost ~5x a bare XDP_TX program here
 * with 1M routes. Instead each VPC keeps the few prefix lengths it actually uses (sorted, longest
 * first) and all routes sit in one exact-match slot table keyed by (VPC, length, masked
 * destination) (slots.h). A length the destination has no route for usually costs one inlined
 * array read and one compare: its home slot is empty. On a P4 target each length is an
 * exact-match table (or the lot is one TCAM).
 *
 * Routes are returned by value (one 8-byte copy), action 0 meaning no route. The benchmark's
 * LPM-trie baseline (bench_lpm_route.h) stands in for this whole header, maps included. */
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

/* (VPC, prefix length, masked IPv4 dst) -> route: one slot table for every length and VPC. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CZ_ROUTE4_SLOTS + CZ_SLOT_PROBES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct cz_slot4);
} route4_slots SEC(".maps");

/* (VPC, prefix length, masked IPv6 dst) -> route. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CZ_ROUTE6_SLOTS + CZ_SLOT_PROBES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct cz_slot6);
} route6_slots SEC(".maps");

/* The value word of a route is action | group << 32 (one 8-byte load: the two always belong
 * together); CZ_NO_ROUTE when there is none. */
__noinline __u64 cz_route4_walk(__u64 want, __u32 from)
{
	struct cz_slot4 *found = 0;

	CZ_SLOT_FIND(route4_slots, struct cz_slot4, from, CZ_SLOT_PROBES - 1, want, 1, found);
	return found ? *(volatile __u64 *)&found->value : CZ_NO_ROUTE;
}

static __always_inline __u64 cz_route4_find(__u64 want)
{
	__u32 home = cz_slot_home(want, CZ_ROUTE4_SLOT_BITS);
	struct cz_slot4 *s = 0;
	enum cz_home at = cz_slot_at_home(&route4_slots, home, want, (void **)&s);

	if (at == CZ_AT_HOME && s)
		return *(volatile __u64 *)&s->value;
	return at == CZ_ABSENT ? CZ_NO_ROUTE : cz_route4_walk(want, home + 1);
}

/* The address words of an IPv6 slot, read after its key word (volatile: a plain load could be
 * hoisted above the key's, and read the address of the key a reused slot held before). */
static __always_inline int cz_slot6_is(const struct cz_slot6 *s, __u64 hi, __u64 lo)
{
	return *(volatile const __u64 *)&s->hi == hi && *(volatile const __u64 *)&s->lo == lo;
}

__noinline __u64 cz_route6_walk(__u64 want, __u64 hi, __u64 lo, __u32 from)
{
	struct cz_slot6 *found = 0;

	CZ_SLOT_FIND(route6_slots, struct cz_slot6, from, CZ_SLOT_PROBES - 1, want,
		     cz_slot6_is(s, hi, lo), found);
	return found ? *(volatile __u64 *)&found->value : CZ_NO_ROUTE;
}

static __always_inline __u64 cz_route6_find(__u64 want, __u64 hi, __u64 lo)
{
	__u32 home = cz_slot_home6(want, hi, lo, CZ_ROUTE6_SLOT_BITS);
	struct cz_slot6 *s = 0;
	enum cz_home at = cz_slot_at_home(&route6_slots, home, want, (void **)&s);

	if (at == CZ_AT_HOME && s && cz_slot6_is(s, hi, lo))
		return *(volatile __u64 *)&s->value;
	return at == CZ_ABSENT ? CZ_NO_ROUTE : cz_route6_walk(want, hi, lo, home + 1);
}

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


#endif
