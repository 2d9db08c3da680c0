/* Table sizes and protocol constants of the fast path. Every limit lives here, never as a bare
 * number in a stage; the Python side reads the same values from the object's BTF-free constants
 * mirror in crosszone/fastpath/layout.py (checked by a test against this file). */
#ifndef CZ_LIMITS_H
#define CZ_LIMITS_H

#define CZ_MAX_VPCS        4096       /* VPC ids are dense: 0 .. CZ_MAX_VPCS-1 */
#define CZ_MAX_ROUTES4     2097152    /* IPv4 routes over all VPCs */
#define CZ_MAX_ROUTES6     1048576    /* IPv6 routes over all VPCs */
#define CZ_MAX_HOSTS       1048576    /* (VPC, host address) entries, both families */
#define CZ_MAX_VTEPS       1048576    /* (VNI, host VTEP) pairs allowed to send */
#define CZ_MAX_SF          8192       /* storage-facing prefixes (one per VPC and family) */
#define CZ_MAX_GROUPS      4096       /* ECMP groups */
#define CZ_MAX_NEXTHOPS    4096       /* next hops over all groups */
#define CZ_MAX_PORTS       64         /* gateway ports (devmap slots) */
#define CZ_ECMP_BUCKETS    256        /* buckets per ECMP group; a power of two */
#define CZ_MAX_PLENS4      33         /* distinct IPv4 prefix lengths per VPC: all of /0../32 */
#define CZ_MAX_PLENS6      32         /* distinct IPv6 prefix lengths per VPC (validated) */
/* Open-addressing slot tables (slots.h): a power of two at least 4x the entries they hold, so a
 * full table is at most a quarter occupied and linear probing stays within CZ_SLOT_PROBES. */
#define CZ_ROUTE4_SLOT_BITS 23
#define CZ_ROUTE4_SLOTS    (1u << CZ_ROUTE4_SLOT_BITS)   /* x 16 bytes = 128 MiB */
#define CZ_ROUTE6_SLOT_BITS 22
#define CZ_ROUTE6_SLOTS    (1u << CZ_ROUTE6_SLOT_BITS)   /* x 32 bytes = 128 MiB */
#define CZ_VTEP_SLOT_BITS  22
#define CZ_VTEP_SLOTS      (1u << CZ_VTEP_SLOT_BITS)     /* x 16 bytes = 64 MiB */
#define CZ_SLOT_PROBES     64         /* longest walk; the writer refuses to place a key further */

/* Flow state of the traffic policy (policy.h): 2^17 slots x 64 bytes = 8 MiB, in sets of 2. */
#define CZ_FLOW_SLOT_BITS  17
#define CZ_FLOW_SLOTS      (1u << CZ_FLOW_SLOT_BITS)
#define CZ_FLOWLET_MIX     0x9e3779b1u   /* odd: successive flowlets walk all ECMP buckets */

#define CZ_VXLAN_PORT      4789
#define CZ_OUTER_TTL       64
#define CZ_SPORT_BASE      49152      /* VXLAN source ports 49152..65535 (RFC 7348 section 5) */
#define CZ_SPORT_MASK      0x3fff

#endif
