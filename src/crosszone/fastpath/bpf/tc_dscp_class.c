// SPDX-License-Identifier: GPL-2.0
/* tc classifier for the emulator's priority queues: the class of a packet is its DSCP.
 *
 * Attached with `tc filter ... bpf obj tc_dscp_class.o` (classifier mode, not direct-action) under
 * an htb root with handle CZ_QUEUE_MAJOR:, it returns the class id
 * CZ_QUEUE_MAJOR:(CZ_QUEUE_DSCP_BASE + DSCP) (tc_queue.h). For a VXLAN frame (IPv4/UDP to
 * CZ_VXLAN_PORT) the DSCP is the inner packet's: the legacy gateway marks only the packet it
 * encapsulates (a Linux VXLAN device writes outer TOS 0 unless told to inherit), the crosszone
 * fast path marks both, and the compute side's queues must treat the two kinds alike. ECN bits
 * are not part of the class. Anything that is not IP gets DSCP 0 (the default class).
 *
 * bpf_skb_load_bytes rather than direct packet access: behind GRO the inner headers of a VXLAN
 * super-packet need not be in the linear part, and a classifier must not pull (it would copy). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "limits.h"
#include "tc_queue.h"

#define VXLAN_HDR_LEN 8

/* DSCP of the IP header at `off` with ethertype `proto`; -1 when it is not IP or is cut short. */
static __always_inline int dscp_at(struct __sk_buff *skb, __u32 off, __u16 proto)
{
	__u8 b[2];

	if (bpf_skb_load_bytes(skb, off, b, sizeof(b)) < 0)
		return -1;
	if (proto == bpf_htons(ETH_P_IP))
		return b[1] >> 2;
	if (proto == bpf_htons(ETH_P_IPV6))
		/* version(4) | traffic class(8) | flow label(20): the class straddles bytes 0 and 1 */
		return ((b[0] & 0x0f) << 2) | (b[1] >> 6);
	return -1;
}

/* DSCP of the packet inside a VXLAN frame whose outer IPv4 header starts at `l3`; -1 otherwise. */
static __always_inline int inner_dscp(struct __sk_buff *skb, __u32 l3)
{
	struct iphdr ip;
	struct udphdr udp;
	struct ethhdr eth;
	__u32 off;

	if (bpf_skb_load_bytes(skb, l3, &ip, sizeof(ip)) < 0)
		return -1;
	if (ip.protocol != IPPROTO_UDP || ip.ihl < 5 || (ip.frag_off & bpf_htons(0x1fff)))
		return -1;
	off = l3 + ip.ihl * 4;
	if (bpf_skb_load_bytes(skb, off, &udp, sizeof(udp)) < 0)
		return -1;
	if (udp.dest != bpf_htons(CZ_VXLAN_PORT))
		return -1;
	off += sizeof(udp) + VXLAN_HDR_LEN;
	if (bpf_skb_load_bytes(skb, off, &eth, sizeof(eth)) < 0)
		return -1;
	return dscp_at(skb, off + sizeof(eth), eth.h_proto);
}

SEC("tc")
int cz_dscp_class(struct __sk_buff *skb)
{
	__u16 proto = skb->protocol;
	int dscp = -1;

	if (proto == bpf_htons(ETH_P_IP))
		dscp = inner_dscp(skb, ETH_HLEN);
	if (dscp < 0)
		dscp = dscp_at(skb, ETH_HLEN, proto);
	if (dscp < 0)
		dscp = 0;
	return (CZ_QUEUE_MAJOR << 16) | (CZ_QUEUE_DSCP_BASE + dscp);
}

char _license[] SEC("license") = "GPL";
