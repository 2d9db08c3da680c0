/* Every verdict of the fast path has one named reason and a per-CPU counter. Mirrored in Python
 * (crosszone/fastpath/reasons.py); a test compares the two through the object's BTF. */
#ifndef CZ_REASONS_H
#define CZ_REASONS_H

enum cz_reason {
	/* forwarded */
	CZ_R_FWD_TO_STORAGE = 0,     /* decapsulated, translated, sent to a storage next hop */
	CZ_R_FWD_TO_COMPUTE,         /* translated back, encapsulated, sent to the host's VTEP */
	/* passed to the kernel: not ours, or ours but needs the slow path */
	CZ_R_PASS_NOT_IP,            /* ARP, LLDP, QinQ, ... */
	CZ_R_PASS_NOT_OURS,          /* IP, but neither VXLAN to our VTEP nor a storage-facing dst */
	CZ_R_PASS_TO_GATEWAY,        /* to our VTEP but not VXLAN (BGP, BFD, ICMP to the gateway) */
	CZ_R_PASS_OUTER_MALFORMED,   /* outer IP too short to classify: the kernel decides */
	CZ_R_PASS_OUTER_OPTIONS,     /* VXLAN with outer IPv4 options */
	CZ_R_PASS_OUTER_FRAGMENT,    /* fragmented VXLAN: reassembly is the kernel's job */
	CZ_R_PASS_INNER_NOT_IP,      /* inner ARP or other non-IP ethertype */
	CZ_R_PASS_INNER_ND,          /* inner IPv6 neighbour discovery (RS, RA, NS, NA, redirect) */
	CZ_R_PASS_IPV4_OPTIONS,      /* (inner) IPv4 with options */
	CZ_R_PASS_IPV4_FRAGMENT,     /* (inner) IPv4 fragment */
	CZ_R_PASS_IPV6_EXTHDR,       /* (inner) IPv6 with an extension header */
	CZ_R_PASS_TTL_EXCEEDED,      /* TTL or hop limit <= 1: the kernel sends ICMP time exceeded */
	CZ_R_PASS_ROUTE_SLOWPATH,    /* the route's action asks for the slow path */
	/* dropped */
	CZ_R_DROP_VXLAN_MALFORMED,   /* VXLAN to our VTEP with bad lengths or truncated */
	CZ_R_DROP_VXLAN_FLAGS,       /* VXLAN I flag not set */
	CZ_R_DROP_UNKNOWN_VNI,
	CZ_R_DROP_VTEP_NOT_ALLOWED,  /* outer source is not a VTEP of that VPC (anti-spoofing) */
	CZ_R_DROP_INNER_MALFORMED,   /* (inner) IP header or L4 header truncated or inconsistent */
	CZ_R_DROP_SRC_NOT_IN_VPC,    /* inner source outside the VPC's prefix (anti-spoofing) */
	CZ_R_DROP_ROUTE_MISS,
	CZ_R_DROP_ROUTE_BLACKHOLE,
	CZ_R_DROP_NO_NEXTHOP,        /* ECMP group empty or next hop/port missing */
	CZ_R_DROP_HOST_UNKNOWN,      /* reply to a storage-facing address with no host behind it */
	CZ_R_DROP_REDIRECT_FAILED,   /* devmap slot empty */
	CZ_R_DROP_REPLY_WRONG_PORT,  /* reply to a storage-facing address arriving on the compute port */
	CZ_R_DROP_ICMP_QUOTE,        /* ICMP error whose quoted header cannot be translated */
	CZ_R_DROP_VPC_RATE,          /* over the VPC's rate limit (its token bucket is empty) */
	CZ_R_MAX,
};

#endif
