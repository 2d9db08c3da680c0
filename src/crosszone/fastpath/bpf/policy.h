/* Traffic policy: large flows not congested, small requests not delayed, no tenant starved.
 *
 * - Per-flow soft state (flows map): a flow is (VPC, direction, inner 5-tuple as received). Until
 *   it has sent elephant_bytes of inner IP bytes its packets are marked small_dscp (the strict
 *   priority class), then bulk_dscp (the low class): a short request never waits behind bulk
 *   transfers, and no application says which is which (in the manner of PIAS). A flow idle for
 *   flow_idle_ticks jiffies is forgotten, so a connection reused for small requests after a bulk
 *   transfer is small again. A flow not yet demoted that is silent for a flowlet gap starts a
 *   new message and counts from zero: PIAS per message, so a keep-alive connection carrying
 *   small requests stays small however much it moves in all, while a demoted flow stays bulk
 *   until it is forgotten. Slots come in sets of two; a new flow takes a free or forgotten slot of its set,
 *   else the one idle longest. State is soft: written without locks by every CPU, a lost or torn
 *   update only mis-marks a packet or moves a flow once more; nothing forwards differently for it.
 * - TCP segments without payload (SYN, SYN-ACK, pure ACKs, FIN, RST) are always small and never
 *   touch the flow table: a new connection's set-up is never queued behind bulk data, the ACKs
 *   that clock a bulk transfer in the other direction never wait behind (or are dropped with) the
 *   bulk data of this one, and ACKs neither count to a flow's bytes nor keep it from aging.
 *   (Measured, issue 27: with a read's ACK flow demoted, its ACKs waited in the storage ports'
 *   bulk FIFO behind checkpoint data.)
 * - Flowlets: a bulk flow idle for flowlet_gap_ticks jiffies has drained the path it was
 *   on, so its next burst may take another one without reordering (its salt moves it to another
 *   ECMP bucket toward storage, another VXLAN source port, so another underlay path, toward
 *   compute). Small flows never move.
 * - Per-VPC rate (vpc_buckets): a token bucket per VPC and direction kept as one time stamp, the
 *   time the bucket is empty until (a virtual clock, as in the kernel's EDT pacing): a packet
 *   costs len * rate_ns_per_mib / 2^20 ns, the stamp may lag now by at most burst_ns, and a
 *   packet that would push it past now is dropped (CZ_R_DROP_VPC_RATE). Read and written without
 *   atomics: two CPUs may both admit a packet against the same credit, so a VPC can exceed its
 *   rate by at most one packet per CPU per refill; a greedy tenant is still held to its rate.
 *
 * Marking keeps the two ECN bits; an IPv4 header checksum follows incrementally. Transport
 * checksums do not cover the traffic class, and the outer UDP checksum of our VXLAN is zero. */
#ifndef CZ_POLICY_H
#define CZ_POLICY_H

#include <linux/ip.h>
#include <linux/ipv6.h>
#include "maps.h"
#include "verdict.h"
#include "csum.h"

#define CZ_DIR_TO_COMPUTE 0
#define CZ_DIR_TO_STORAGE 1

/* Two clocks. A flow's state (aging, the slot a new flow takes, the flowlet gap) is kept in
 * jiffies: bpf_jiffies64 is inlined by the verifier as one load, while bpf_ktime_get_ns costs
 * 20-40 ns a call under KVM (an rdtscp), more than the policy's whole budget. The durations come
 * in ticks, rounded so that a flow never moves or is forgotten before the intent's duration
 * (abi/ticks.py: d jiffies prove more than d - 1 ticks of silence). The token buckets pace at the
 * nanosecond and read the fine clock, only for a VPC with a rate. Both are read in clock.h; the
 * test build stands its own clock.h in (test_clock.h), so a test sets time exactly and the
 * product's program pays nothing for that. */
#include "clock.h"

/* The VPC's policy counters of this CPU. The key is read where it already lies (the VPC record,
 * the flow key's scratch slot): a key copied to the stack took a slot more in every inlined
 * caller, and the benchmark builds of the gateway passed the verifier's 512 bytes. */
static __always_inline struct cz_policy_counter *cz_policy_stats(const __u32 *vpc_id)
{
	return bpf_map_lookup_elem(&policy_stats, vpc_id);
}

/* 1 when the packet fits the VPC's rate (or the VPC has none), else 0 with the verdict set. The
 * fine clock is read here, after the VPC is known to have a rate: a helper call cannot be moved
 * past a branch by the compiler, so read before it every packet would pay for it. */
static __always_inline int cz_rate_ok(struct cz_verdict *v, const struct cz_vpc *vpc, __u32 dir,
				      __u32 len)
{
	if (!vpc->rate_ns_per_mib)
		return 1;
	__u64 now = cz_now();
	__u32 i = 2 * (vpc->vpc_id & (CZ_MAX_VPCS - 1)) + dir;
	__u64 *empty_until = bpf_map_lookup_elem(&vpc_buckets, &i);
	if (!empty_until)
		return 1;
	__u64 t = *empty_until;
	/* Signed differences: the clock and the stamp may be anywhere in 64 bits. */
	if ((__s64)(t - (now - vpc->burst_ns)) < 0)
		t = now - vpc->burst_ns;
	t += ((__u64)len * vpc->rate_ns_per_mib) >> 20;
	if ((__s64)(t - now) > 0) {
		struct cz_policy_counter *c = cz_policy_stats(&vpc->vpc_id);
		if (c) {
			c->rate_drop_packets++;
			c->rate_drop_bytes += len;
		}
		cz_set(v, XDP_DROP, CZ_R_DROP_VPC_RATE);
		return 0;
	}
	*empty_until = t;
	return 1;
}

/* The scratch flow key of this CPU (never NULL for index 0; checked for the verifier). */
static __always_inline struct cz_flow_id *cz_flow_scratch(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&flow_scratch, &zero);
}

static __always_inline __u64 cz_flow_w0(__u32 vpc_id, __u8 dir, __u8 proto, __u8 family)
{
	return vpc_id | (__u64)dir << 32 | (__u64)proto << 40 | (__u64)family << 48 | 1ull << 56;
}

static __always_inline int cz_flow_is(const struct cz_flow *f, const struct cz_flow_id *k)
{
	const __u64 *a = (const __u64 *)f;

	return a[0] == k->w0 && a[1] == k->s0 && a[2] == k->s1 && a[3] == k->d0 && a[4] == k->d1 &&
	       f->ports == k->ports;
}

/* What the policy decided for one packet. */
struct cz_mark {
	__u32 salt;             /* add salt * CZ_FLOWLET_MIX to the flow hash */
	__u8 dscp;
	__u8 on;                /* 0: policy off, leave the packet as it is */
	__u8 bare;              /* in: a TCP segment without payload (cz_l4.bare); set by the
				 * caller in the mark's padding, not passed: an argument more
				 * pushed the benchmark builds' stack past the verifier's 512 bytes */
};

/* Accounts len inner IP bytes to flow k at jiffies now and sets its mark. The ECMP hash h
 * already covers the 5-tuple and picks the flow's set of two slots (one lookup finds both): no
 * second hash. A flow's byte count stops at demotion, since only "at least elephant_bytes" is
 * ever asked of it and aging resets it; so in a bulk flow's steady state (same jiffy, no move)
 * nothing is written to its slot, whose cache line stays clean and shared between CPUs. */
static __always_inline void cz_flow_account(const struct cz_config *cfg, const struct cz_flow_id *k,
					    __u32 h, __u32 len, __u64 now, struct cz_mark *m)
{
	__u32 set = h >> (32 - (CZ_FLOW_SLOT_BITS - 1));
	struct cz_flow_set *fs = bpf_map_lookup_elem(&flows, &set);
	if (!fs)
		return;
	struct cz_flow *a = &fs->slot[0], *b = &fs->slot[1], *f;
	if (cz_flow_is(a, k))
		f = a;
	else if (cz_flow_is(b, k))
		f = b;
	else {
		/* A new flow: the free or forgotten slot of the set, else the one idle longer. */
		int a_free = !a->live || now - a->last_tick >= cfg->flow_idle_ticks;
		int b_free = !b->live || now - b->last_tick >= cfg->flow_idle_ticks;
		f = a_free ? a : b_free ? b : (__s64)(a->last_tick - b->last_tick) <= 0 ? a : b;
		__u64 *w = (__u64 *)f;
		w[0] = k->w0;
		w[1] = k->s0;
		w[2] = k->s1;
		w[3] = k->d0;
		w[4] = k->d1;
		f->ports = k->ports;
		f->salt = 0;
		f->bytes = 0;
		f->last_tick = now;
	}
	__u64 idle = now - f->last_tick;
	__u64 bytes = f->bytes;
	__u32 salt = f->salt;
	if (idle >= cfg->flow_idle_ticks) {
		/* forgotten: a new flow on the slot it had */
		salt = 0;
		bytes = 0;
		f->salt = 0;
		f->bytes = 0;
	}
	struct cz_policy_counter *c = cz_policy_stats(&k->vpc_id);
	if (bytes >= cfg->elephant_bytes) {
		if (idle >= cfg->flowlet_gap_ticks) {
			f->salt = ++salt;
			if (c)
				c->flowlet_moves++;
		}
		m->dscp = cfg->bulk_dscp;
		if (c) {
			c->bulk_packets++;
			c->bulk_bytes += len;
		}
	} else {
		m->dscp = cfg->small_dscp;
		if (c) {
			c->small_packets++;
			c->small_bytes += len;
		}
		/* A small flow silent for a flowlet gap starts a new message (a keep-alive
		 * connection's next response) and counts from zero. Never a demoted flow (the
		 * branch above): its packets may still wait in the bulk queue, and a promotion before
		 * flow_idle_ticks would overtake them (measured, issue 27: 3.6 % of segments
		 * reordered with flow_idle at 10 ms). */
		if (idle >= cfg->flowlet_gap_ticks)
			bytes = 0;
		f->bytes = bytes + len;
	}
	if (idle)
		f->last_tick = now;
	m->salt = salt;
	m->on = 1;
}

/* The packet's flow key, built in this CPU's scratch slot (NULL never happens: slot 0 exists).
 * Not in registers: the IPv4 stage is inlined into the entry point, and the spills of a key
 * passed by value pushed its frame plus cz_reply6's past the verifier's 512 bytes. */
static __always_inline struct cz_flow_id *cz_flow_id4(__u32 vpc_id, __u8 dir, __u8 proto,
						      __u32 src, __u32 dst, __u32 ports)
{
	struct cz_flow_id *k = cz_flow_scratch();

	if (k) {
		k->w0 = cz_flow_w0(vpc_id, dir, proto, 4);
		k->s0 = src;
		k->s1 = 0;
		k->d0 = dst;
		k->d1 = 0;
		k->ports = ports;
		k->vpc_id = vpc_id;
	}
	return k;
}

static __always_inline struct cz_flow_id *cz_flow_id6(__u32 vpc_id, __u8 dir, __u8 proto,
						      const __u32 *src, const __u32 *dst,
						      __u32 ports)
{
	struct cz_flow_id *k = cz_flow_scratch();

	if (k) {
		k->w0 = cz_flow_w0(vpc_id, dir, proto, 6);
		k->s0 = src[0] | (__u64)src[1] << 32;
		k->s1 = src[2] | (__u64)src[3] << 32;
		k->d0 = dst[0] | (__u64)dst[1] << 32;
		k->d1 = dst[2] | (__u64)dst[3] << 32;
		k->ports = ports;
		k->vpc_id = vpc_id;
	}
	return k;
}

/* A TCP segment without payload: small, salt 0, no flow state read or written. */
static __always_inline void cz_mark_bare(const struct cz_config *cfg, const struct cz_flow_id *k,
					 __u32 len, struct cz_mark *m)
{
	struct cz_policy_counter *c = cz_policy_stats(&k->vpc_id);

	if (c) {
		c->small_packets++;
		c->small_bytes += len;
		c->bare_packets++;
	}
	m->dscp = cfg->small_dscp;
	m->salt = 0;
	m->on = 1;
}

/* The rate check and the flow's mark for one packet: 0 = forward with *m, -1 = dropped (the
 * verdict is set). With the policy off, m->on stays 0. vpc is NULL when no VPC has a rate. cfg
 * is the config the caller already has (the entry point's lookup), not looked up again; NULL
 * (never, once the entry point found one) marks nothing. m->bare: the caller's, a TCP segment
 * without payload. */
static __always_inline int cz_policy(struct cz_verdict *v, const struct cz_config *cfg,
				     const struct cz_vpc *vpc, __u8 dir,
				     const struct cz_flow_id *k, __u32 h, __u32 len,
				     struct cz_mark *m)
{
	if (vpc && !cz_rate_ok(v, vpc, dir, len))
		return -1;
	if ((v->cfg_flags & CZ_CFG_POLICY) && k && cfg) {
		if (m->bare)
			cz_mark_bare(cfg, k, len, m);
		else
			cz_flow_account(cfg, k, h, len, cz_ticks(), m);
	}
	return 0;
}

/* DSCP into an IPv4 header, ECN kept, checksum updated (RFC 1624). */
static __always_inline void cz_mark4(struct iphdr *ip, __u8 dscp)
{
	__u16 *word = (__u16 *)ip;   /* version, IHL and TOS */
	__u16 old = *word;

	ip->tos = (dscp << 2) | (ip->tos & 3);
	ip->check = cz_csum_replace2(ip->check, old, *word);
}

/* DSCP into an IPv6 traffic class (bits 4..11 of the first word), ECN kept. */
static __always_inline void cz_mark6(struct ipv6hdr *ip6, __u8 dscp)
{
	__u8 *b = (__u8 *)ip6;

	b[0] = (b[0] & 0xf0) | (dscp >> 2);
	b[1] = ((dscp & 3) << 6) | (b[1] & 0x3f);
}

#endif
