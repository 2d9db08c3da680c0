/* Benchmark baseline only (xdp_gateway_lpm.c, bench_gateway_lpm*.o): the route lookup in the
 * kernel's LPM trie instead of the slot tables, to measure what the slot tables save. Included
 * before the product's code, it stands in for route.h (same include guard), so the baseline has
 * the trie maps (lpm_routes.h) and none of the slot tables. */
#ifndef CZ_ROUTE_H
#define CZ_ROUTE_H

#include <bpf/bpf_endian.h>
#include "maps.h"
#include "slots.h"
#include "lpm_routes.h"

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
