// SPDX-License-Identifier: GPL-2.0
/* cz_bench_sink: the validating sink of `crosszone bench forward` (bench/forward.py), on r0.
 * Drops every frame after classifying it into a per-CPU counter: good (expected addresses, MAC,
 * lengths, IPv4 header checksum, payload pattern; and, on one frame in 64 picked at random, the
 * full UDP checksum), misrouted (wrong destination MAC or addresses: a frame the gateway sent
 * where it should not have), corrupted (right flow, wrong bytes), other (not the bench's flow).
 * The payload words are 0xC2A5F00D ^ k (forward.PAYLOAD_MAGIC). Built by `make build`
 * (build/bench_forward_sink.o). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct expect { __u32 saddr; __u32 daddr; __u8 dmac[6]; __u16 dport; };
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1);
         __type(key, __u32); __type(value, struct expect); } expect SEC(".maps");
/* 0 good, 1 corrupted, 2 misrouted, 3 other */
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, 4);
         __type(key, __u32); __type(value, __u64); } counts SEC(".maps");

static __always_inline int count(__u32 k, int verdict)
{
	__u64 *c = bpf_map_lookup_elem(&counts, &k);
	if (c)
		*c += 1;
	return verdict;
}

static __always_inline __u16 fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

SEC("xdp.frags")
int cz_bench_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	struct expect *e;
	__u32 key = 0;
	__u64 sum = 0;
	__u32 *p;

	if ((void *)(eth + 1) > data_end)
		return count(3, XDP_DROP);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return count(3, XDP_PASS);      /* ARP, ND: the kernel's */
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return count(1, XDP_DROP);
	if (ip->protocol != IPPROTO_UDP)
		return count(3, XDP_PASS);
	e = bpf_map_lookup_elem(&expect, &key);
	if (!e)
		return XDP_DROP;
	if (ip->ihl != 5)
		return count(1, XDP_DROP);
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > data_end)
		return count(1, XDP_DROP);
	if (udp->dest != bpf_htons(e->dport))
		return count(3, XDP_PASS);
	if (ip->saddr != e->saddr || ip->daddr != e->daddr)
		return count(2, XDP_DROP);
#pragma unroll
	for (int i = 0; i < 6; i++)
		if (eth->h_dest[i] != e->dmac[i])
			return count(2, XDP_DROP);
	{
		__u16 *w = (void *)ip;
#pragma unroll
		for (int i = 0; i < 10; i++)
			sum += w[i];
		if (fold(sum) != 0xffff)
			return count(1, XDP_DROP);
	}
	if (bpf_ntohs(udp->len) + 20 != bpf_ntohs(ip->tot_len))
		return count(1, XDP_DROP);
	p = (void *)(udp + 1);
#pragma unroll
	for (int k = 0; k < 16; k++) {
		if ((void *)(p + k + 1) > data_end)
			return count(1, XDP_DROP);
		if (p[k] != bpf_htonl(0xC2A5F00D ^ k))
			return count(1, XDP_DROP);
	}
	if ((bpf_get_prandom_u32() & 63) == 0 && udp->check) {
		/* Full UDP checksum of the linear part (the bench's frames fit in it). */
		__u16 *q = (void *)udp;
		__u32 ulen = bpf_ntohs(udp->len);
		sum = (ip->saddr & 0xffff) + (ip->saddr >> 16) + (ip->daddr & 0xffff) +
			(ip->daddr >> 16) + bpf_htons(IPPROTO_UDP) + udp->len;
		for (int i = 0; i < 760; i++) {
			if ((__u32)(i * 2 + 2) > ulen || (void *)(q + i + 1) > data_end)
				break;
			sum += q[i];
		}
		if (fold(sum) != 0xffff)
			return count(1, XDP_DROP);
	}
	return count(0, XDP_DROP);
}

char _license[] SEC("license") = "GPL";
