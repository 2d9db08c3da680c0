/* Next-hop selection: flow hash -> bucket -> next hop. Buckets are filled by the control plane
 * (rendezvous hashing, crosszone/compile), and each next hop carries a copy of its port's
 * ifindex and MAC, so this stage is two array lookups. */
#ifndef CZ_ECMP_H
#define CZ_ECMP_H

#include "maps.h"

struct cz_egress {
	__u32 port_id;
	__u32 ifindex;
	__u8 *dmac;
	__u8 *smac;
};

/* Returns 0 and fills *out, or -1 when the group, next hop or port is missing. */
static __always_inline int cz_ecmp_pick(__u32 group, __u32 hash, struct cz_egress *out)
{
	struct cz_group *g = CZ_RECORD(ecmp_groups, group);
	if (!g || !g->n_members)
		return -1;
	__u32 nh_id = g->buckets[hash & (CZ_ECMP_BUCKETS - 1)];
	struct cz_nexthop *nh = CZ_RECORD(nexthops, nh_id);
	if (!nh)
		return -1;
	if (!nh->ifindex)
		return -1;
	out->port_id = nh->port;
	out->ifindex = nh->ifindex;
	out->dmac = nh->mac;
	out->smac = nh->smac;
	return 0;
}

#endif
