/* Baseline only (benchmark): the routes in the kernel's LPM trie, keyed (VPC, address). Built
 * into the gateway with -DCZ_ROUTES_LPM_TRIE instead of the slot tables, and into the trie floor
 * (xdp_floor.c), which times one lookup in the same 1M routes. */
#ifndef CZ_LPM_ROUTES_H
#define CZ_LPM_ROUTES_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "structs.h"

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, CZ_MAX_ROUTES4);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cz_lpm4_key);
	__type(value, struct cz_route);
} routes4_lpm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, CZ_MAX_ROUTES6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cz_lpm6_key);
	__type(value, struct cz_route);
} routes6_lpm SEC(".maps");

#endif
