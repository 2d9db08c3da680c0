/* crosszone gateway: the program's body, apart from its entry point (xdp_gateway.c) so that the
 * benchmark's build (bench_gateway.c) wraps the same code in its harness. Classifies each frame
 * (VXLAN to our VTEP, a reply to a storage-facing address, or something for the kernel), runs the
 * matching direction's stages and counts the verdict by reason. */
#ifndef CZ_GATEWAY_H
#define CZ_GATEWAY_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "maps.h"
#include "verdict.h"
#include "to_storage.h"
#include "to_compute.h"

struct cz_vlanhdr {
	__be16 tci;
	__be16 proto;
};

static __always_inline void cz_classify(struct xdp_md *ctx, const struct cz_config *cfg,
					struct cz_verdict *v)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 l3_off = sizeof(*eth);

	if ((void *)(eth + 1) > data_end)
		CZ_PASS(v, CZ_R_PASS_OUTER_MALFORMED);
	__u16 proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct cz_vlanhdr *vh = (void *)(eth + 1);
		if ((void *)(vh + 1) > data_end)
			CZ_PASS(v, CZ_R_PASS_OUTER_MALFORMED);
		proto = vh->proto;
		l3_off += sizeof(*vh);
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + l3_off;
		if ((void *)(ip + 1) > data_end)
			CZ_PASS(v, CZ_R_PASS_OUTER_MALFORMED);
		if (cfg->vtep && ip->daddr == cfg->vtep)
			return cz_from_compute(ctx, cfg, l3_off, v);
		struct cz_sf4_key k = { .prefixlen = 32, .addr = ip->daddr };
		struct cz_sf *sf = bpf_map_lookup_elem(&sf4, &k);
		if (sf)
			return cz_reply4(ctx, cfg, sf, l3_off, v);
		CZ_PASS(v, CZ_R_PASS_NOT_OURS);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + l3_off;
		if ((void *)(ip6 + 1) > data_end)
			CZ_PASS(v, CZ_R_PASS_OUTER_MALFORMED);
		struct cz_sf6_key k = { .prefixlen = 128 };
		__builtin_memcpy(k.addr, &ip6->daddr, 16);
		struct cz_sf *sf = bpf_map_lookup_elem(&sf6, &k);
		if (sf)
			return cz_reply6(ctx, cfg, sf, l3_off, v);
		CZ_PASS(v, CZ_R_PASS_NOT_OURS);
	}
	CZ_PASS(v, CZ_R_PASS_NOT_IP);
}

static __always_inline void cz_count(const struct cz_config *cfg, struct cz_verdict *v)
{
	__u32 reason = v->reason;
	struct cz_counter *c = bpf_map_lookup_elem(&reason_stats, &reason);
	if (c) {
		c->packets++;
		c->bytes += v->in_len;
	}
	if (reason <= CZ_R_FWD_TO_COMPUTE) {
		__u32 vpc = v->vpc_id;
		struct cz_vpc_counter *vc = bpf_map_lookup_elem(&vpc_stats, &vpc);
		if (vc && v->to_storage) {
			vc->to_storage_packets++;
			vc->to_storage_bytes += v->out_len;
		} else if (vc) {
			vc->to_compute_packets++;
			vc->to_compute_bytes += v->out_len;
		}
	}
	if (cfg && (cfg->flags & CZ_CFG_TRACE)) {
		__u32 zero = 0;
		struct cz_trace *t = bpf_map_lookup_elem(&trace, &zero);
		if (t) {
			t->reason = v->reason;
			t->port = v->port;
			t->vpc_id = v->vpc_id;
			t->seq++;
		}
	}
}

/* One frame through the gateway: the verdict's XDP action. */
static __always_inline int cz_gateway_run(struct xdp_md *ctx)
{
	struct cz_verdict v = {
		.action = XDP_PASS, .reason = CZ_R_PASS_NOT_OURS, .port = CZ_NO_PORT,
		.vpc_id = CZ_NO_VPC,
	};
	__u32 zero = 0;
	v.in_len = bpf_xdp_get_buff_len(ctx);
	struct cz_config *cfg = CZ_RECORD(config, zero);

	if (cfg) {
		v.cfg_flags = cfg->flags;
		cz_classify(ctx, cfg, &v);
	}
	cz_count(cfg, &v);
	return v.action;
}

#endif
