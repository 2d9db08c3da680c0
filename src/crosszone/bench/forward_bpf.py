"""The XDP programs of `crosszone bench forward`: a validating sink and a bare forward (floor).

Both are compiled by the bench with clang (as the tests do) into a temporary directory, so the
bench does not depend on the fast path's build beyond `build/xdp_floor.o` (the generator) and
`build/xdp_drop.o` (the generator's own rate). The generator (`cz_bench_gen`) is
build/xdp_floor.o's idea (XDP_TX in a live-frames test run) plus a header rewrite, see GEN_C.

The sink drops every frame after classifying it into a per-CPU counter:
good (expected addresses, MAC, lengths, IPv4 header checksum, payload pattern; and, on one frame
in 64 picked at random, the full UDP checksum), misrouted (wrong destination MAC or addresses: a
frame the gateway sent where it should not have), corrupted (right flow, wrong bytes), other
(not the bench's flow). The floor strips the 50 outer bytes and redirects: the same output as a
gateway, with no parse, lookup or translation, so it is the path's limit.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

COUNT_GOOD, COUNT_CORRUPTED, COUNT_MISROUTED, COUNT_OTHER = range(4)
PAYLOAD_MAGIC = 0xC2A5F00D
PAYLOAD_WORDS_CHECKED = 16

SINK_C = r"""
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
"""

FLOOR_FWD_C = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

struct fwd { __u32 ifindex; __u8 dmac[6]; __u8 smac[6]; };
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1);
         __type(key, __u32); __type(value, struct fwd); } fwd_cfg SEC(".maps");

SEC("xdp.frags")
int cz_bench_fwd(struct xdp_md *ctx)
{
	__u32 key = 0;
	struct fwd *f = bpf_map_lookup_elem(&fwd_cfg, &key);
	struct ethhdr *eth;
	void *data, *data_end;

	if (!f)
		return XDP_DROP;
	/* Outer Ethernet + IPv4 + UDP + VXLAN: 50 bytes, not even looked at. */
	if (bpf_xdp_adjust_head(ctx, 50))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(eth->h_dest, f->dmac, 6);
	__builtin_memcpy(eth->h_source, f->smac, 6);
	return bpf_redirect(f->ifindex, 0);
}

char _license[] SEC("license") = "GPL";
"""


GEN_HEADER_BYTES = 96

GEN_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct hdr { __u8 b[96]; };
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1);
         __type(key, __u32); __type(value, struct hdr); } gen_hdr SEC(".maps");

/* Live-frames test runs recycle their pages and restore a frame only when its pointers moved:
 * a receiver that rewrote bytes in place (the legacy gateway's nftables translation does) would
 * hand the next iteration a stale frame. Writing the 96 header bytes (outer + inner headers)
 * on every run makes every frame the original one, whoever had it before. */
SEC("xdp")
int cz_bench_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 key = 0;
	struct hdr *h = bpf_map_lookup_elem(&gen_hdr, &key);

	if (!h || data + sizeof(*h) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(data, h->b, sizeof(*h));
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
"""


def compile_programs(out_dir: Path) -> dict[str, Path]:
    """Compile the generator, the sink and the floor forward; returns {name: object path}."""
    arch = subprocess.run(["uname", "-m"], capture_output=True, text=True,
                          check=True).stdout.strip()
    objs = {}
    for name, src in (("gen", GEN_C), ("sink", SINK_C), ("floor_fwd", FLOOR_FWD_C)):
        c, o = out_dir / f"{name}.c", out_dir / f"{name}.o"
        c.write_text(src)
        # the same flags as the Makefile's for the gateway, so the floor is built alike
        subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-mcpu=v3",
                        f"-I/usr/include/{arch}-linux-gnu", "-c", str(c), "-o", str(o)],
                       check=True, capture_output=True)
        objs[name] = o
    return objs
