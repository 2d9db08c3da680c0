/* Next-hop selection: flow hash -> bucket -> next hop -> port. Buckets are filled by the control
 * plane (rendezvous hashing, crosszone/compile), so this stage is two array lookups. */
#ifndef CZ_ECMP_H
#define CZ_ECMP_H

#include "maps.h"

struct cz_egress {
	struct cz_port *port;
	__u32 port_id;
	__u8 *dmac;
};

/* Returns 0 and fills *out, or -1 when the group, next hop or port is missing. */
static __always_inline int cz_ecmp_pick(__u32 group, __u32 hash, struct cz_egress *out)
{
	struct cz_group *g = bpf_map_lookup_elem(&ecmp_groups, &group);
	if (!g || !g->n_members)
		return -1;
	__u32 nh_id = g->buckets[hash & (CZ_ECMP_BUCKETS - 1)];
	struct cz_nexthop *nh = bpf_map_lookup_elem(&nexthops, &nh_id);
	if (!nh)
		return -1;
	__u32 port_id = nh->port;
	struct cz_port *port = bpf_map_lookup_elem(&ports, &port_id);
	if (!port || !port->ifindex)
		return -1;
	out->port = port;
	out->port_id = port_id;
	out->dmac = nh->mac;
	return 0;
}

#endif
