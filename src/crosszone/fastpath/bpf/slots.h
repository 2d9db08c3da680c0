/* Exact-match tables as open addressing in ARRAY maps: the (VNI, VTEP) set and the routes.
 *
 * Why not the kernel's hash map: a BPF_MAP_TYPE_HASH lookup is a call into jhash, a bucket walk
 * and a memcmp, ~45 ns per probe on this machine, and the gateway needs one for the VTEP check
 * and one per prefix length tried. An ARRAY map lookup is inlined by the verifier into a bounds
 * check and an address computation, so a probe here is one multiply, one load and
 * one compare, and a miss usually ends at the first slot.
 *
 * Layout: CZ_*_SLOTS home slots (a power of two) plus CZ_SLOT_PROBES overflow slots, so a probe
 * sequence never wraps. Linear probing: a key sits at most CZ_SLOT_PROBES - 1 slots after its
 * home slot (crosszone/fastpath/slot_table.py places keys and refuses to go further); a lookup
 * walks from the home slot until it finds the key or an empty slot. Deleting marks a slot
 * CZ_SLOT_DELETED (a lookup walks past it, an insert may reuse it), so no other key's probe
 * sequence is ever cut while traffic flows. The writer keeps the table at most a quarter full:
 * the benchmark's million IPv4 routes (an eighth full) sit on average 0.04 slots from home, the
 * farthest 14; CZ_SLOT_PROBES leaves room for structured key sets that cluster more.
 *
 * On a P4 target each of these is one exact-match table; the slot walk is this software's
 * substitute for the switch's hash-table hardware. */
#ifndef CZ_SLOTS_H
#define CZ_SLOTS_H

#include <linux/types.h>
#include "maps.h"

/* Home slot: Fibonacci hashing (Knuth, TAOCP 6.4), the top bits of one 64-bit multiply by
 * 2^64 / phi: one multiply instead of murmur3's finaliser (two, plus three shift-xors). Every key
 * bit moves the product's bits at and above its own, and the home is taken from the top, so
 * address, length and VPC bits all reach it. The writer checks every
 * probe length, so a key set this clusters badly is refused, never silently slow. Mirrored in
 * crosszone/fastpath/slot_table.py. */
#define CZ_SLOT_PHI    0x9e3779b97f4a7c15ull
#define CZ_SLOT_MUL_HI 0xc2b2ae3d27d4eb4full
#define CZ_SLOT_MUL_LO 0x165667b19e3779f9ull

static __always_inline __u32 cz_slot_home(__u64 key, __u32 bits)
{
	return (__u32)((key * CZ_SLOT_PHI) >> (64 - bits));
}

/* IPv6: the address halves folded in with their own odd multipliers first. */
static __always_inline __u32 cz_slot_home6(__u64 key, __u64 hi, __u64 lo, __u32 bits)
{
	return cz_slot_home(key ^ (hi * CZ_SLOT_MUL_HI) ^ (lo * CZ_SLOT_MUL_LO), bits);
}

/* Walks map from slot `from` while `match` (over the slot pointer s) is false; sets `found` to
 * the matching slot or leaves it 0. The key word is read once per slot (a volatile aligned 8-byte
 * load, before the value: the writer stores the value first), and an empty slot ends the walk.
 * Acquire order needs no barrier here: volatile keeps the compiler from moving the value loads
 * before the key load, and x86-64 does not reorder loads with loads (the writer refuses other
 * architectures). A slot whose key matched keeps that key's value until the packet is done: the
 * writer reuses a deleted slot only after an RCU grace period (crosszone/fastpath/grace.py). */
#define CZ_SLOT_FIND(map, type, from, probes, want, match, found)                  \
	do {                                                                        \
		for (__u32 _p = 0; _p < (probes); _p++) {                           \
			__u32 _i = (from) + _p;                                     \
			type *s = bpf_map_lookup_elem(&(map), &_i);                 \
			if (!s)                                                     \
				break;                                              \
			__u64 _k = *(volatile __u64 *)&s->key;                      \
			if (_k == (want) && (match)) {                              \
				found = s;                                          \
				break;                                              \
			}                                                           \
			if (_k == CZ_SLOT_EMPTY)                                    \
				break;                                              \
		}                                                                   \
	} while (0)

/* Every lookup reads the home slot inline: at most a quarter full, the walk usually ends there
 * (the key, or an empty slot). Only a longer walk calls a probe function. Those are global
 * functions, so the verifier checks each once instead of once per probe exit times every prefix
 * length times the rest of the program (which exceeded its limit). Each returns the slot's
 * value word, or the miss value. */
#define CZ_NO_VPC_ID 0xffffffffu
#define CZ_NO_ROUTE 0ull

enum cz_home { CZ_ABSENT, CZ_AT_HOME, CZ_WALK_ON };

/* What the home slot says about a key: there (*slot set), absent (an empty slot ends the walk),
 * or walk on. Every slot type starts with its key word. */
static __always_inline enum cz_home cz_slot_at_home(void *map, __u32 home, __u64 want,
						    void **slot)
{
	__u64 *s = bpf_map_lookup_elem(map, &home);

	if (!s)
		return CZ_ABSENT;
	__u64 k = *(volatile __u64 *)s;
	if (k == want) {
		*slot = s;
		return CZ_AT_HOME;
	}
	return k == CZ_SLOT_EMPTY ? CZ_ABSENT : CZ_WALK_ON;
}

__noinline __u32 cz_vtep_walk(__u64 want, __u32 from)
{
	struct cz_vtep_slot *found = 0;

	CZ_SLOT_FIND(vtep_slots, struct cz_vtep_slot, from, CZ_SLOT_PROBES - 1, want, 1, found);
	return found ? *(volatile __u32 *)&found->vpc_id : CZ_NO_VPC_ID;
}

/* The VPC allowed to send from vtep into vni, or CZ_NO_VPC_ID. */
static __always_inline __u32 cz_vtep_vpc(__u32 vni, __be32 vtep)
{
	__u64 want = CZ_SLOT_LIVE | ((__u64)vni << CZ_SLOT_VNI_SHIFT) | vtep;
	__u32 home = cz_slot_home(want, CZ_VTEP_SLOT_BITS);
	struct cz_vtep_slot *s = 0;
	enum cz_home at = cz_slot_at_home(&vtep_slots, home, want, (void **)&s);

	if (at == CZ_AT_HOME && s)
		return *(volatile __u32 *)&s->vpc_id;
	return at == CZ_ABSENT ? CZ_NO_VPC_ID : cz_vtep_walk(want, home + 1);
}

/* A route value word as the struct. */
static __always_inline struct cz_route cz_route_word(__u64 word)
{
	union {
		__u64 word;
		struct cz_route route;
	} u = { .word = word };
	return u.route;
}

/* A route copied out of a map value with one 8-byte load. */
static __always_inline struct cz_route cz_route_copy(const struct cz_route *r)
{
	return cz_route_word(*(volatile const __u64 *)r);
}

#endif
