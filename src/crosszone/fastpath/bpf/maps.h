/* Every map of the gateway program, one line each on what it holds. Python opens them by name
 * (crosszone/fastpath/maps_io.py); the hashes are not preallocated so that memory follows use,
 * the slot tables are sized at compile time (limits.h).
 *
 * Records of more than one word (config, ports, vpcs, ecmp_groups, nexthops) are double-buffered:
 * record i has two copies, at 2i and 2i + 1, and <map>_sel[i] (0 or 1) names the live one. The
 * kernel rewrites an ARRAY value with a plain memcpy under running programs, so a record written
 * in place could be read half old, half new. The writer (crosszone/fastpath/record_table.py)
 * writes only the copy that is not live, and only after an RCU grace period has passed since it
 * was last live (every XDP run is inside an RCU read-side section), then flips the selector: a
 * packet reads one whole copy. docs/architecture.md, "What a packet sees during a change". */
#ifndef CZ_MAPS_H
#define CZ_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "structs.h"
#include "reasons.h"

/* The gateway itself: anycast VTEP, flags, compute-facing port. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);          /* two copies per record */
	__type(key, __u32);
	__type(value, struct cz_config);
} config SEC(".maps");

/* config index -> its live copy (0 or 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} config_sel SEC(".maps");

/* Port index -> ifindex and MACs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * CZ_MAX_PORTS);     /* two copies per record */
	__type(key, __u32);
	__type(value, struct cz_port);
} ports SEC(".maps");

/* ports index -> its live copy (0 or 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CZ_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} ports_sel SEC(".maps");

/* Port index -> ifindex, for bpf_redirect_map. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, CZ_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

/* VPC id -> VPC (translation, prefix lengths in use). An array: its lookup is inlined. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * CZ_MAX_VPCS);     /* two copies per record */
	__type(key, __u32);
	__type(value, struct cz_vpc);
} vpcs SEC(".maps");

/* vpcs index -> its live copy (0 or 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CZ_MAX_VPCS);
	__type(key, __u32);
	__type(value, __u32);
} vpcs_sel SEC(".maps");

/* (VNI, outer source) -> VPC id: the anti-spoofing set and the VNI lookup in one slot-table probe
 * (slots.h; mmapable so the control plane writes each slot with aligned 8-byte stores). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CZ_VTEP_SLOTS + CZ_SLOT_PROBES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct cz_vtep_slot);
} vtep_slots SEC(".maps");

/* VNI -> VPC id; read only when vtep_slots has no (VNI, VTEP) entry, to tell an unknown VNI from a
 * spoofed VTEP. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CZ_MAX_VPCS);
	__type(key, __u32);
	__type(value, __u32);
} vpc_by_vni SEC(".maps");

/* route4_slots and route6_slots, the route slot tables, are declared in route.h beside their
 * lookup: the benchmark's LPM-trie baseline (bench_lpm_route.h) replaces that header whole. */

/* ECMP group -> bucket table. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * CZ_MAX_GROUPS);     /* two copies per record */
	__type(key, __u32);
	__type(value, struct cz_group);
} ecmp_groups SEC(".maps");

/* ecmp_groups index -> its live copy (0 or 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CZ_MAX_GROUPS);
	__type(key, __u32);
	__type(value, __u32);
} ecmp_groups_sel SEC(".maps");

/* Next hop id -> port and MAC. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * CZ_MAX_NEXTHOPS);     /* two copies per record */
	__type(key, __u32);
	__type(value, struct cz_nexthop);
} nexthops SEC(".maps");

/* nexthops index -> its live copy (0 or 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CZ_MAX_NEXTHOPS);
	__type(key, __u32);
	__type(value, __u32);
} nexthops_sel SEC(".maps");

/* Storage-facing IPv4 prefix -> VPC (replies from the storage zone). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, CZ_MAX_SF);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cz_sf4_key);
	__type(value, struct cz_sf);
} sf4 SEC(".maps");

/* Storage-facing IPv6 prefix -> VPC. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, CZ_MAX_SF);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cz_sf6_key);
	__type(value, struct cz_sf);
} sf6 SEC(".maps");

/* (VPC, family, inner address) -> host VTEP and MAC. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CZ_MAX_HOSTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cz_host_key);
	__type(value, struct cz_host);
} hosts SEC(".maps");

/* Reason -> packets and bytes, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CZ_R_MAX);
	__type(key, __u32);
	__type(value, struct cz_counter);
} reason_stats SEC(".maps");

/* VPC id -> forwarded packets and bytes in both directions, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CZ_MAX_VPCS);
	__type(key, __u32);
	__type(value, struct cz_vpc_counter);
} vpc_stats SEC(".maps");

/* VPC id -> what the traffic policy did (marks, flowlet moves, rate drops), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CZ_MAX_VPCS);
	__type(key, __u32);
	__type(value, struct cz_policy_counter);
} policy_stats SEC(".maps");

/* Flow soft state of the traffic policy in sets of two slots, written by the fast path only
 * (policy.h); mmapable so that tests read and clear it in one go. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CZ_FLOW_SLOTS / 2);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct cz_flow_set);
} flows SEC(".maps");

/* 2 * VPC id + direction -> the time the VPC's token bucket is empty until (policy.h); written by
 * the fast path only. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * CZ_MAX_VPCS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} vpc_buckets SEC(".maps");

/* The flow key of the packet in hand, per CPU (policy.h): the stages' stack frames are near the
 * verifier's 512 bytes, so the key is built here. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cz_flow_id);
} flow_scratch SEC(".maps");

/* The last verdict on this CPU (debugging: `crosszone fastpath run`). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cz_trace);
} trace SEC(".maps");

/* The live copy of double-buffered record `index` of map (NULL past the end). The selector is
 * loaded once; the copy's address depends on it, so no load of the copy can move before it. */
#define CZ_RECORD(map, index) ({                                                   \
		__u32 _ri = (index);                                                \
		__u32 *_rs = bpf_map_lookup_elem(&map##_sel, &_ri);                \
		__u32 _rc = _rs ? 2 * _ri + (*(volatile __u32 *)_rs & 1) : ~0u;    \
		bpf_map_lookup_elem(&map, &_rc);                                    \
	})

#endif
