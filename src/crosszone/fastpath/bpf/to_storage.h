/* Compute zone -> storage zone: VXLAN from a GPU host's vSwitch to our anycast VTEP.
 * Checks VNI and source VTEP, routes on (VPC, inner dst), translates the inner source into the
 * VPC's storage-facing prefix (stateless, checksums corrected incrementally), decrements the TTL,
 * picks an ECMP next hop, strips the outer headers and sends the inner frame on. An ICMP error a
 * host sends about a reply has its quoted destination translated the same way (l4.h). Once a packet is
 * known to be VXLAN for us, malformations drop it; before that, the kernel decides (XDP_PASS). */
#ifndef CZ_TO_STORAGE_H
#define CZ_TO_STORAGE_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "verdict.h"
#include "route.h"
#include "ecmp.h"
#include "hash.h"
#include "l4.h"
#include "policy.h"

#define CZ_VXLAN_HLEN 8
#define CZ_OUTER_L4 (sizeof(struct iphdr) + sizeof(struct udphdr) + CZ_VXLAN_HLEN)
#define CZ_IP_MF 0x2000
#define CZ_IP_OFFSET 0x1fff

struct cz_vxlanhdr {
	__u8 flags;
	__u8 reserved1[3];
	__u8 vni[3];
	__u8 reserved2;
};

/* A route's action as a verdict: 1 = forward; otherwise the verdict is set (miss, blackhole or
 * slow path) and the caller stops. */
static __always_inline int cz_route_forwards(struct cz_verdict *v, const struct cz_route *r)
{
	if (!r->action)
		cz_set(v, XDP_DROP, CZ_R_DROP_ROUTE_MISS);
	else if (r->action == CZ_ACT_BLACKHOLE)
		cz_set(v, XDP_DROP, CZ_R_DROP_ROUTE_BLACKHOLE);
	else if (r->action != CZ_ACT_FORWARD)
		cz_set(v, XDP_PASS, CZ_R_PASS_ROUTE_SLOWPATH);
	else
		return 1;
	return 0;
}

/* Strips everything before the inner Ethernet header and writes its MACs. */
static __always_inline int cz_decap(struct xdp_md *ctx, __u32 inner_eth_off,
				    const struct cz_egress *eg)
{
	if (bpf_xdp_adjust_head(ctx, (int)inner_eth_off))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, eg->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eg->smac, ETH_ALEN);
	return 0;
}

static __always_inline void cz_inner4(struct xdp_md *ctx, const struct cz_config *cfg,
				      const struct cz_vpc *vpc, __u32 inner_off, __u32 avail,
				      struct cz_verdict *v)
{
	__u64 len = v->in_len;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + inner_off;

	if (avail < sizeof(*ip) || (void *)(ip + 1) > data_end)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	if (ip->version != 4 || ip->ihl < 5)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	if (ip->ihl > 5)
		CZ_PASS(v, CZ_R_PASS_IPV4_OPTIONS);
	__u32 tot = bpf_ntohs(ip->tot_len);
	if (tot < sizeof(*ip) || tot > avail)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	if (ip->frag_off & bpf_htons(CZ_IP_MF | CZ_IP_OFFSET))
		CZ_PASS(v, CZ_R_PASS_IPV4_FRAGMENT);
	if (ip->ttl <= 1)
		CZ_PASS(v, CZ_R_PASS_TTL_EXCEEDED);
	if (!(vpc->flags & CZ_VPC_HAS4) || (ip->saddr & vpc->mask4) != vpc->prefix4)
		CZ_DROP(v, CZ_R_DROP_SRC_NOT_IN_VPC);

	struct cz_l4 l4;
	if (cz_l4_parse(ip + 1, data_end, ip->protocol, tot - sizeof(*ip), 0, &l4))
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	/* An ICMP error a host sends about a reply quotes the reply's destination: that host's own
	 * address, which storage knows only as the storage-facing one. */
	__u32 src = ip->saddr;
	struct cz_quote q = { 0 };
	if ((vpc->flags & CZ_VPC_XLAT4) &&
	    cz_quote_parse(ip + 1, data_end, ip->protocol, tot - sizeof(*ip), 0, 1, &src, &q))
		CZ_DROP(v, CZ_R_DROP_ICMP_QUOTE);

	struct cz_route r = cz_route4(vpc, ip->daddr);
	if (!cz_route_forwards(v, &r))
		return;

	__u32 h = cz_flow_hash4(ip->saddr, ip->daddr, l4.ports, ip->protocol);
	struct cz_mark m = { .bare = l4.bare };
	if ((v->cfg_flags & (CZ_CFG_POLICY | CZ_CFG_RATES)) &&
	    cz_policy(v, cfg, vpc, CZ_DIR_TO_STORAGE, cz_flow_id4(vpc->vpc_id, CZ_DIR_TO_STORAGE,
		      ip->protocol, ip->saddr, ip->daddr, l4.ports), h, tot, &m))
		return;
	struct cz_egress eg;
	if (cz_ecmp_pick(r.group, h + m.salt * CZ_FLOWLET_MIX, &eg))
		CZ_DROP(v, CZ_R_DROP_NO_NEXTHOP);

	if (vpc->flags & CZ_VPC_XLAT4) {
		__u32 from = ip->saddr;
		__u32 to = vpc->sf4 | (from & ~vpc->mask4);
		cz_l4_fix(&l4, &from, &to, 1);
		cz_quote_fix(&q, &from, &to, 1);
		ip->check = cz_csum_replace4(ip->check, from, to);
		ip->saddr = to;
	}
	if (m.on)
		cz_mark4(ip, m.dscp);
	cz_ipv4_ttl_dec(&ip->ttl, &ip->check);

	if (cz_decap(ctx, inner_off - ETH_HLEN, &eg))
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	v->out_len = len - (inner_off - ETH_HLEN);
	cz_send(ctx, v, eg.port_id, eg.ifindex, CZ_R_FWD_TO_STORAGE);
}

static __noinline void cz_inner6(struct xdp_md *ctx, const struct cz_vpc *vpc, __u32 inner_off,
			       __u32 avail, struct cz_verdict *v)
{
	__u64 len = v->in_len;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + inner_off;

	if (avail < sizeof(*ip6) || (void *)(ip6 + 1) > data_end)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	if (ip6->version != 6)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	__u32 plen = bpf_ntohs(ip6->payload_len);
	if (plen + sizeof(*ip6) > avail)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	if (cz_is_ipv6_exthdr(ip6->nexthdr))
		CZ_PASS(v, CZ_R_PASS_IPV6_EXTHDR);
	/* Neighbour discovery is the kernel's (or the vSwitch's) business, like ARP: its
	 * link-local sources and on-link targets are not routable storage traffic. */
	__u8 *icmp_type = (void *)(ip6 + 1);
	if (ip6->nexthdr == CZ_IPPROTO_ICMPV6 && plen >= 1 && (void *)(icmp_type + 1) <= data_end &&
	    *icmp_type >= 133 && *icmp_type <= 137)
		CZ_PASS(v, CZ_R_PASS_INNER_ND);
	if (ip6->hop_limit <= 1)
		CZ_PASS(v, CZ_R_PASS_TTL_EXCEEDED);

	__u32 src[4], dst[4], masked[4];
	__builtin_memcpy(src, &ip6->saddr, 16);
	__builtin_memcpy(dst, &ip6->daddr, 16);
	if (!(vpc->flags & CZ_VPC_HAS6))
		CZ_DROP(v, CZ_R_DROP_SRC_NOT_IN_VPC);
	const __u32 *m6 = (const __u32 *)vpc->mask6, *p6 = (const __u32 *)vpc->prefix6;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		masked[i] = src[i] & m6[i];
		if (masked[i] != p6[i])
			CZ_DROP(v, CZ_R_DROP_SRC_NOT_IN_VPC);
	}

	struct cz_l4 l4;
	if (cz_l4_parse(ip6 + 1, data_end, ip6->nexthdr, plen, 1, &l4))
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	struct cz_quote q = { 0 };
	if ((vpc->flags & CZ_VPC_XLAT6) &&
	    cz_quote_parse(ip6 + 1, data_end, ip6->nexthdr, plen, 1, 1, src, &q))
		CZ_DROP(v, CZ_R_DROP_ICMP_QUOTE);

	struct cz_route r = cz_route6(vpc, dst);
	if (!cz_route_forwards(v, &r))
		return;

	__u32 h = cz_flow_hash6(src, dst, l4.ports, ip6->nexthdr);
	struct cz_mark m = { .bare = l4.bare };
	/* The config is looked up again: this stage's five arguments are taken. */
	if ((v->cfg_flags & (CZ_CFG_POLICY | CZ_CFG_RATES)) &&
	    cz_policy(v, CZ_RECORD(config, 0), vpc, CZ_DIR_TO_STORAGE, cz_flow_id6(vpc->vpc_id,
		      CZ_DIR_TO_STORAGE, ip6->nexthdr, src, dst, l4.ports), h, plen + sizeof(*ip6),
		      &m))
		return;
	struct cz_egress eg;
	if (cz_ecmp_pick(r.group, h + m.salt * CZ_FLOWLET_MIX, &eg))
		CZ_DROP(v, CZ_R_DROP_NO_NEXTHOP);

	if (vpc->flags & CZ_VPC_XLAT6) {
		__u32 to[4];
		const __u32 *sf = (const __u32 *)vpc->sf6;
#pragma unroll
		for (int i = 0; i < 4; i++)
			to[i] = sf[i] | (src[i] & ~m6[i]);
		cz_l4_fix(&l4, src, to, 4);
		cz_quote_fix(&q, src, to, 4);
		__builtin_memcpy(&ip6->saddr, to, 16);
	}
	if (m.on)
		cz_mark6(ip6, m.dscp);
	ip6->hop_limit--;

	if (cz_decap(ctx, inner_off - ETH_HLEN, &eg))
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	v->out_len = len - (inner_off - ETH_HLEN);
	cz_send(ctx, v, eg.port_id, eg.ifindex, CZ_R_FWD_TO_STORAGE);
}

/* An IPv4 packet addressed to our VTEP, at l3_off. */
static __always_inline void cz_from_compute(struct xdp_md *ctx, const struct cz_config *cfg,
					    __u32 l3_off, struct cz_verdict *v)
{
	__u64 len = v->in_len;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + l3_off;

	if ((void *)(ip + 1) > data_end)
		CZ_PASS(v, CZ_R_PASS_OUTER_MALFORMED);
	if (ip->version != 4 || ip->ihl < 5)
		CZ_PASS(v, CZ_R_PASS_OUTER_MALFORMED);
	if (ip->protocol != IPPROTO_UDP)
		CZ_PASS(v, CZ_R_PASS_TO_GATEWAY);
	if (ip->frag_off & bpf_htons(CZ_IP_MF | CZ_IP_OFFSET))
		CZ_PASS(v, CZ_R_PASS_OUTER_FRAGMENT);
	if (ip->ihl > 5)
		CZ_PASS(v, CZ_R_PASS_OUTER_OPTIONS);
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > data_end)
		CZ_PASS(v, CZ_R_PASS_OUTER_MALFORMED);
	if (udp->dest != bpf_htons(CZ_VXLAN_PORT))
		CZ_PASS(v, CZ_R_PASS_TO_GATEWAY);

	/* From here on the packet is VXLAN for us. */
	__u32 tot = bpf_ntohs(ip->tot_len);
	if (tot < CZ_OUTER_L4 + ETH_HLEN || tot > len - l3_off ||
	    bpf_ntohs(udp->len) != tot - sizeof(*ip))
		CZ_DROP(v, CZ_R_DROP_VXLAN_MALFORMED);
	struct cz_vxlanhdr *vx = (void *)(udp + 1);
	struct ethhdr *ieth = (void *)(vx + 1);
	if ((void *)(ieth + 1) > data_end)
		CZ_DROP(v, CZ_R_DROP_VXLAN_MALFORMED);
	if (!(vx->flags & 0x08))
		CZ_DROP(v, CZ_R_DROP_VXLAN_FLAGS);

	__u32 vni = ((__u32)vx->vni[0] << 16) | ((__u32)vx->vni[1] << 8) | vx->vni[2];
	__u32 vpc_id = cz_vtep_vpc(vni, ip->saddr);
	if (vpc_id == CZ_NO_VPC_ID) {
		/* Off the fast path: which of the two checks failed. */
		__u32 *known = bpf_map_lookup_elem(&vpc_by_vni, &vni);
		if (!known)
			CZ_DROP(v, CZ_R_DROP_UNKNOWN_VNI);
		v->vpc_id = *known;
		CZ_DROP(v, CZ_R_DROP_VTEP_NOT_ALLOWED);
	}
	struct cz_vpc *vpc = CZ_RECORD(vpcs, vpc_id);
	if (!vpc)
		CZ_DROP(v, CZ_R_DROP_UNKNOWN_VNI);
	v->vpc_id = vpc->vpc_id;

	__u16 itype = ieth->h_proto;
	__u32 inner_off = l3_off + CZ_OUTER_L4 + ETH_HLEN;
	__u32 avail = tot - CZ_OUTER_L4 - ETH_HLEN;
	v->to_storage = 1;
	if (itype == bpf_htons(ETH_P_IP))
		return cz_inner4(ctx, cfg, vpc, inner_off, avail, v);
	if (itype == bpf_htons(ETH_P_IPV6))
		return cz_inner6(ctx, vpc, inner_off, avail, v);
	CZ_PASS(v, CZ_R_PASS_INNER_NOT_IP);
}

#endif
