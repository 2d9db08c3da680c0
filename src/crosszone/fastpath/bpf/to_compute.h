/* Storage zone -> compute zone: a plain IP reply to a storage-facing address.
 * The storage-facing prefix names the VPC; the destination is translated back into the VPC's own
 * space, the host table gives the host's VTEP and MAC, and the packet is wrapped in VXLAN with our
 * anycast VTEP as source, a flow-hash source port, UDP checksum 0, TTL 64 and DF. A reply must
 * arrive on a storage port; an ICMP error (fragmentation needed, packet too big, ...) has the
 * quoted header's source translated back too, so path-MTU discovery works in every VPC (l4.h). */
#ifndef CZ_TO_COMPUTE_H
#define CZ_TO_COMPUTE_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "verdict.h"
#include "hash.h"
#include "l4.h"
#include "to_storage.h"

#define CZ_ENCAP_HLEN (ETH_HLEN + CZ_OUTER_L4 + ETH_HLEN)   /* 64 bytes before the inner IP */

struct cz_encap {
	const struct cz_config *cfg;
	const struct cz_port *port;
	const struct cz_host *host;
	const struct cz_sf *sf;
	__u32 hash;
	__u16 inner_proto;      /* ETH_P_IP or ETH_P_IPV6, network order */
	__u8 tos;
};

/* Prepends outer Ethernet, IPv4, UDP, VXLAN and inner Ethernet in front of the IP packet at l3_off. */
static __always_inline int cz_encap(struct xdp_md *ctx, __u32 l3_off, __u64 len,
				    const struct cz_encap *e)
{
	__u32 inner_len = len - l3_off;
	if (bpf_xdp_adjust_head(ctx, (int)l3_off - (int)CZ_ENCAP_HLEN))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	struct cz_vxlanhdr *vx = (void *)(udp + 1);
	struct ethhdr *ieth = (void *)(vx + 1);
	if ((void *)(ieth + 1) > data_end)
		return -1;

	__builtin_memcpy(eth->h_dest, e->port->next_hop_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, e->port->mac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	__u32 tot = CZ_OUTER_L4 + ETH_HLEN + inner_len;
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = e->tos;
	ip->tot_len = bpf_htons(tot);
	ip->id = 0;
	ip->frag_off = bpf_htons(0x4000);   /* DF: the underlay MTU is sized for it */
	ip->ttl = CZ_OUTER_TTL;
	ip->protocol = IPPROTO_UDP;
	ip->check = 0;
	ip->saddr = e->cfg->vtep;
	ip->daddr = e->host->vtep;
	ip->check = cz_ipv4_csum((__u16 *)ip);

	udp->source = bpf_htons(CZ_SPORT_BASE | (e->hash & CZ_SPORT_MASK));
	udp->dest = bpf_htons(CZ_VXLAN_PORT);
	udp->len = bpf_htons(tot - sizeof(*ip));
	udp->check = 0;      /* RFC 7348: zero over IPv4 */

	vx->flags = 0x08;
	vx->reserved1[0] = vx->reserved1[1] = vx->reserved1[2] = 0;
	vx->vni[0] = e->sf->vni >> 16;
	vx->vni[1] = e->sf->vni >> 8;
	vx->vni[2] = e->sf->vni;
	vx->reserved2 = 0;

	__builtin_memcpy(ieth->h_dest, e->host->mac, ETH_ALEN);
	__builtin_memcpy(ieth->h_source, e->sf->router_mac, ETH_ALEN);
	ieth->h_proto = e->inner_proto;
	return 0;
}

/* The compute port, which a reply must not arrive on: exactly one port has the compute role and
 * every other port is a storage port (intent/checks.py), so "not the compute port's ifindex" is
 * "a storage port". Without this check anything on the compute side could send plain IP to a
 * storage-facing address and have it wrapped into a tenant's VXLAN. NULL with the verdict set. */
static __always_inline struct cz_port *cz_reply_port(struct xdp_md *ctx, const struct cz_config *cfg,
						     struct cz_verdict *v)
{
	__u32 port_id = cfg->compute_port;
	struct cz_port *port = CZ_RECORD(ports, port_id);

	if (!port || !port->ifindex) {
		cz_set(v, XDP_DROP, CZ_R_DROP_NO_NEXTHOP);
		return 0;
	}
	if (port->ifindex == ctx->ingress_ifindex) {
		cz_set(v, XDP_DROP, CZ_R_DROP_REPLY_WRONG_PORT);
		return 0;
	}
	return port;
}

/* The VPC record whose token bucket a reply passes, only when some VPC has a rate: replies
 * otherwise never read it. */
static __always_inline const struct cz_vpc *cz_rated_vpc(const struct cz_config *cfg,
							 const struct cz_sf *sf)
{
	if (!(cfg->flags & CZ_CFG_RATES))
		return 0;
	return CZ_RECORD(vpcs, sf->vpc_id);
}

static __noinline void cz_reply4(struct xdp_md *ctx, const struct cz_config *cfg,
			       const struct cz_sf *sf, __u32 l3_off, struct cz_verdict *v)
{
	__u64 len = v->in_len;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + l3_off;

	v->vpc_id = sf->vpc_id;
	struct cz_port *port = cz_reply_port(ctx, cfg, v);
	if (!port)
		return;
	if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl < 5)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	if (ip->ihl > 5)
		CZ_PASS(v, CZ_R_PASS_IPV4_OPTIONS);
	__u32 tot = bpf_ntohs(ip->tot_len);
	if (tot < sizeof(*ip) || tot > len - l3_off)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	if (ip->frag_off & bpf_htons(CZ_IP_MF | CZ_IP_OFFSET))
		CZ_PASS(v, CZ_R_PASS_IPV4_FRAGMENT);
	if (ip->ttl <= 1)
		CZ_PASS(v, CZ_R_PASS_TTL_EXCEEDED);

	struct cz_l4 l4;
	if (cz_l4_parse(ip + 1, data_end, ip->protocol, tot - sizeof(*ip), 0, &l4))
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);

	__u32 from = ip->daddr;
	__u32 to = (from & ~*(__u32 *)sf->mask) | *(__u32 *)sf->prefix;
	struct cz_quote q = { 0 };
	if (!sf->identity &&
	    cz_quote_parse(ip + 1, data_end, ip->protocol, tot - sizeof(*ip), 0, 0, &from, &q))
		CZ_DROP(v, CZ_R_DROP_ICMP_QUOTE);
	struct cz_host_key hk = { .vpc_id = sf->vpc_id, .family = 4 };
	*(__u32 *)hk.addr = to;
	struct cz_host *host = bpf_map_lookup_elem(&hosts, &hk);
	if (!host)
		CZ_DROP(v, CZ_R_DROP_HOST_UNKNOWN);

	__u32 h = cz_flow_hash4(ip->saddr, ip->daddr, l4.ports, ip->protocol);
	struct cz_mark m = { .bare = l4.bare };
	if ((cfg->flags & (CZ_CFG_POLICY | CZ_CFG_RATES)) &&
	    cz_policy(v, cfg, cz_rated_vpc(cfg, sf), CZ_DIR_TO_COMPUTE, cz_flow_id4(sf->vpc_id,
		      CZ_DIR_TO_COMPUTE, ip->protocol, ip->saddr, ip->daddr, l4.ports), h, tot, &m))
		return;
	if (m.on)
		cz_mark4(ip, m.dscp);
	struct cz_encap e = {
		.cfg = cfg, .port = port, .host = host, .sf = sf,
		.hash = h + m.salt * CZ_FLOWLET_MIX,
		.inner_proto = bpf_htons(ETH_P_IP), .tos = ip->tos,
	};
	if (!sf->identity) {
		cz_l4_fix(&l4, &from, &to, 1);
		cz_quote_fix(&q, &from, &to, 1);
		ip->check = cz_csum_replace4(ip->check, from, to);
		ip->daddr = to;
	}
	cz_ipv4_ttl_dec(&ip->ttl, &ip->check);

	if (cz_encap(ctx, l3_off, len, &e))
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	v->out_len = len - l3_off + CZ_ENCAP_HLEN;
	cz_send(ctx, v, cfg->compute_port, port->ifindex, CZ_R_FWD_TO_COMPUTE);
}

static __noinline void cz_reply6(struct xdp_md *ctx, const struct cz_config *cfg,
			       const struct cz_sf *sf, __u32 l3_off, struct cz_verdict *v)
{
	__u64 len = v->in_len;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + l3_off;

	v->vpc_id = sf->vpc_id;
	struct cz_port *port = cz_reply_port(ctx, cfg, v);
	if (!port)
		return;
	if ((void *)(ip6 + 1) > data_end || ip6->version != 6)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	__u32 plen = bpf_ntohs(ip6->payload_len);
	if (plen + sizeof(*ip6) > len - l3_off)
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	if (cz_is_ipv6_exthdr(ip6->nexthdr))
		CZ_PASS(v, CZ_R_PASS_IPV6_EXTHDR);
	if (ip6->hop_limit <= 1)
		CZ_PASS(v, CZ_R_PASS_TTL_EXCEEDED);

	struct cz_l4 l4;
	if (cz_l4_parse(ip6 + 1, data_end, ip6->nexthdr, plen, 1, &l4))
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);

	__u32 src[4], from[4], to[4];
	__builtin_memcpy(src, &ip6->saddr, 16);
	__builtin_memcpy(from, &ip6->daddr, 16);
	const __u32 *m = (const __u32 *)sf->mask, *p = (const __u32 *)sf->prefix;
#pragma unroll
	for (int i = 0; i < 4; i++)
		to[i] = (from[i] & ~m[i]) | p[i];
	struct cz_quote q = { 0 };
	if (!sf->identity && cz_quote_parse(ip6 + 1, data_end, ip6->nexthdr, plen, 1, 0, from, &q))
		CZ_DROP(v, CZ_R_DROP_ICMP_QUOTE);
	struct cz_host_key hk = { .vpc_id = sf->vpc_id, .family = 6 };
	__builtin_memcpy(hk.addr, to, 16);
	struct cz_host *host = bpf_map_lookup_elem(&hosts, &hk);
	if (!host)
		CZ_DROP(v, CZ_R_DROP_HOST_UNKNOWN);

	__u32 h = cz_flow_hash6(src, from, l4.ports, ip6->nexthdr);
	struct cz_mark mk = { .bare = l4.bare };
	if ((cfg->flags & (CZ_CFG_POLICY | CZ_CFG_RATES)) &&
	    cz_policy(v, cfg, cz_rated_vpc(cfg, sf), CZ_DIR_TO_COMPUTE, cz_flow_id6(sf->vpc_id,
		      CZ_DIR_TO_COMPUTE, ip6->nexthdr, src, from, l4.ports), h, plen + sizeof(*ip6),
		      &mk))
		return;
	if (mk.on)
		cz_mark6(ip6, mk.dscp);
	__u8 tc = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	struct cz_encap e = {
		.cfg = cfg, .port = port, .host = host, .sf = sf,
		.hash = h + mk.salt * CZ_FLOWLET_MIX,
		.inner_proto = bpf_htons(ETH_P_IPV6), .tos = tc,
	};
	if (!sf->identity) {
		cz_l4_fix(&l4, from, to, 4);
		cz_quote_fix(&q, from, to, 4);
		__builtin_memcpy(&ip6->daddr, to, 16);
	}
	ip6->hop_limit--;

	if (cz_encap(ctx, l3_off, len, &e))
		CZ_DROP(v, CZ_R_DROP_INNER_MALFORMED);
	v->out_len = len - l3_off + CZ_ENCAP_HLEN;
	cz_send(ctx, v, cfg->compute_port, port->ifindex, CZ_R_FWD_TO_COMPUTE);
}

#endif
