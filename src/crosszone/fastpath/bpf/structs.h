/* Binary layout shared with Python. Each struct is mirrored in crosszone/fastpath/layout.py and a
 * test compares sizes and offsets with the BTF of the compiled object. All addresses and ports are
 * in network byte order; every other field is host order. */
#ifndef CZ_STRUCTS_H
#define CZ_STRUCTS_H

#include <linux/types.h>
#include "limits.h"
#include "reasons.h"

#define CZ_CFG_TRACE      (1u << 0)   /* record the last verdict per CPU in the trace map */
#define CZ_CFG_POLICY     (1u << 1)   /* traffic policy: flow state, DSCP marking, flowlets (policy.h) */
#define CZ_CFG_RATES      (1u << 2)   /* some VPC has a rate limit (its token buckets run) */

#define CZ_VPC_HAS4       (1u << 0)   /* VPC has an IPv4 prefix */
#define CZ_VPC_HAS6       (1u << 1)
#define CZ_VPC_XLAT4      (1u << 2)   /* IPv4 source is translated (not identity) */
#define CZ_VPC_XLAT6      (1u << 3)

#define CZ_ACT_FORWARD    1
#define CZ_ACT_BLACKHOLE  2
#define CZ_ACT_SLOWPATH   3

/* config[0]: the gateway itself, and the traffic policy (read only with CZ_CFG_POLICY). */
struct cz_config {
	__be32 vtep;            /* anycast VTEP: outer dst of VXLAN we own, outer src of replies */
	__u32 flags;            /* CZ_CFG_* */
	__u32 compute_port;     /* port index facing the compute zone */
	__u8 small_dscp;        /* DSCP of a flow until it has sent elephant_bytes */
	__u8 bulk_dscp;         /* DSCP of a flow after that */
	__u16 reserved;
	__u64 elephant_bytes;   /* inner IP bytes after which a flow is bulk */
	__u64 flowlet_gap_ticks;  /* jiffies since its last packet after which a bulk flow may take
				   * another path (abi/ticks.py: the intent's gap, rounded so that a
				   * move never comes before it) */
	__u64 flow_idle_ticks;  /* jiffies idle after which a flow's state is forgotten (same rule) */
};

/* ports[i]: a gateway port. The devmap tx_ports holds the same ifindex for XDP_REDIRECT. */
struct cz_port {
	__u32 ifindex;          /* 0 = slot unused */
	__u8 mac[6];            /* our MAC on this port: source MAC of frames sent there */
	__u8 next_hop_mac[6];   /* default next hop on this port (compute zone router) */
};

/* vpcs[vpc_id]: the translation and the prefix lengths in use, longest first. */
struct cz_vpc {
	__u32 vpc_id;
	__u32 flags;            /* CZ_VPC_* */
	__be32 prefix4;         /* VPC address space (masked) */
	__be32 mask4;
	__be32 sf4;             /* storage-facing prefix (masked) */
	__u8 prefix6[16];
	__u8 mask6[16];
	__u8 sf6[16];
	__u8 n_plens4;
	__u8 n_plens6;
	__u8 plens4[CZ_MAX_PLENS4];   /* descending */
	__u8 plens6[CZ_MAX_PLENS6];   /* descending */
	__u8 reserved;
	__u64 rate_ns_per_mib;  /* token bucket: ns one MiB of inner IP bytes takes; 0 = no limit */
	__u64 burst_ns;         /* bucket depth, as the time its bytes take at the rate */
};

/* Baseline layout for the kernel LPM trie: VPC id (big endian) then address, prefixlen = 32+plen. */
struct cz_lpm4_key {
	__u32 prefixlen;
	__be32 vpc_id;
	__be32 addr;
};

struct cz_lpm6_key {
	__u32 prefixlen;
	__be32 vpc_id;
	__u8 addr[16];
};

struct cz_route {
	__u32 action;           /* CZ_ACT_*; 0 = no route */
	__u32 group;            /* ECMP group when forwarding */
};

/* Slot tables (slots.h). A slot's key word is CZ_SLOT_EMPTY, CZ_SLOT_DELETED or CZ_SLOT_LIVE with
 * the packed key; addresses are packed as loaded from the packet (network byte order in memory,
 * so a little-endian word on x86). The writer fills the other words first and the key word last,
 * each an aligned 8-byte store (in that order for other CPUs: x86-64 store order; the writer
 * refuses other architectures), so a reader never sees a live key with a half-written value. A
 * deleted slot takes another key only after an RCU grace period, so a packet that matched the
 * old key never reads the new key's value. */
#define CZ_SLOT_EMPTY     0ull
#define CZ_SLOT_DELETED   1ull
#define CZ_SLOT_LIVE      (1ull << 63)
#define CZ_SLOT_VPC_SHIFT 40          /* vpc_id in bits 40..51 */
#define CZ_SLOT_PLEN_SHIFT 32         /* prefix length in bits 32..39 */
#define CZ_SLOT_VNI_SHIFT 32          /* VNI in bits 32..55 */

/* The control plane names these entries by (VPC, prefix length, masked dst) -> route and
 * (VNI, VTEP) -> VPC (crosszone/fastpath/layout.py: CzRoute4Key, CzRoute6Key, CzVtepKey);
 * crosszone/fastpath/slot_table.py packs those keys into the key words below. */

/* route4_slots[i]: key = LIVE | vpc_id << 40 | plen << 32 | masked IPv4 dst. */
struct cz_slot4 {
	__u64 key;
	__u64 value;            /* struct cz_route as one word: action | group << 32 */
};

/* route6_slots[i]: key = LIVE | vpc_id << 40 | plen << 32; hi, lo = masked IPv6 dst. */
struct cz_slot6 {
	__u64 key;
	__u64 hi;               /* address bytes 0..7 as loaded */
	__u64 lo;               /* address bytes 8..15 */
	__u64 value;            /* struct cz_route as one word */
};

/* vtep_slots[i]: key = LIVE | vni << 32 | outer source VTEP. */
struct cz_vtep_slot {
	__u64 key;
	__u32 vpc_id;
	__u32 reserved;
};

/* ecmp_groups[g]: bucket -> next hop id, filled by the control plane with rendezvous hashing so
 * that removing a member moves only that member's buckets. */
struct cz_group {
	__u32 n_members;        /* 0 = group unusable */
	__u32 reserved;
	__u16 buckets[CZ_ECMP_BUCKETS];
};

/* nexthops[n]: where a bucket sends packets. */
struct cz_nexthop {
	__u32 port;             /* port index (devmap slot) */
	__u32 ifindex;          /* that port's ifindex, copied: 0 = unusable */
	__u8 mac[6];            /* destination MAC (storage router or node) */
	__u8 smac[6];           /* that port's own MAC, copied (one lookup fewer per packet) */
};

/* sf4/sf6 (LPM tries, one entry per VPC and family): storage-facing dst -> VPC. */
struct cz_sf4_key {
	__u32 prefixlen;
	__be32 addr;
};

struct cz_sf6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct cz_sf {
	__u32 vpc_id;
	__u32 vni;
	__u8 prefix[16];        /* VPC prefix (IPv4 in the first 4 bytes) */
	__u8 mask[16];
	__u8 router_mac[6];     /* inner source MAC of replies */
	__u16 identity;         /* 1 = no translation */
};

/* hosts: (VPC, family, inner address) -> where the host lives. */
struct cz_host_key {
	__u32 vpc_id;
	__u32 family;           /* 4 or 6 */
	__u8 addr[16];          /* IPv4 in the first 4 bytes, rest zero */
};

struct cz_host {
	__be32 vtep;
	__u8 mac[6];
	__u16 reserved;
};

struct cz_counter {
	__u64 packets;
	__u64 bytes;
};

struct cz_vpc_counter {
	__u64 to_storage_packets;
	__u64 to_storage_bytes;
	__u64 to_compute_packets;
	__u64 to_compute_bytes;
};

/* policy_stats[vpc_id] (per CPU): what the traffic policy did to the VPC's packets. */
struct cz_policy_counter {
	__u64 small_packets;    /* marked small_dscp */
	__u64 bulk_packets;     /* marked bulk_dscp */
	__u64 flowlet_moves;    /* bulk flows re-hashed after an idle gap */
	__u64 rate_drop_packets;  /* over the VPC's rate (reason CZ_R_DROP_VPC_RATE) */
	__u64 rate_drop_bytes;
	__u64 small_bytes;      /* inner IP bytes marked small_dscp */
	__u64 bulk_bytes;       /* inner IP bytes marked bulk_dscp */
	__u64 bare_packets;     /* of small_packets: TCP segments without payload (policy.h) */
};

/* flows[i]: soft state of one flow (policy.h), a 2-way set of a direct-mapped table of 64-byte
 * slots. The first 44 bytes are the key: (VPC, direction, protocol, family, inner addresses and
 * ports as received); live = 1 marks a used slot. */
struct cz_flow {
	__u32 vpc_id;
	__u8 dir;               /* 1 = to storage, 0 = to compute */
	__u8 proto;
	__u8 family;            /* 4 or 6 */
	__u8 live;
	__u32 src[4];           /* IPv4 in src[0], the rest zero */
	__u32 dst[4];
	__u32 ports;            /* raw (sport, dport) word, 0 without ports */
	__u32 salt;             /* flowlet number: moves the flow's ECMP bucket and VXLAN port */
	__u64 bytes;            /* inner IP bytes seen */
	__u64 last_tick;        /* jiffies at the last packet */
};

/* flows[i]: the two slots of set i, chosen by the flow hash (policy.h): one lookup finds both,
 * and the table is the same bytes as an array of 2^CZ_FLOW_SLOT_BITS slots. */
struct cz_flow_set {
	struct cz_flow slot[2];
};

/* flow_scratch[0] (per CPU): a flow's key as the first five words and the port word of struct
 * cz_flow: (VPC, direction, protocol, family, live), source, destination. */
struct cz_flow_id {
	__u64 w0, s0, s1, d0, d1;
	__u32 ports;
	__u32 vpc_id;           /* again, as policy_stats' key in map memory: no stack slot */
};

/* trace[0] (per CPU, only with CZ_CFG_TRACE): the last packet's verdict, for `fastpath run`. */
struct cz_trace {
	enum cz_reason reason;  /* an enum here puts the reason names into the object's BTF */
	__u32 port;             /* egress port, or CZ_NO_PORT */
	__u32 vpc_id;
	__u32 seq;
};

#define CZ_NO_PORT 0xffffffffu

#endif
