// SPDX-License-Identifier: GPL-2.0
/* cz_bench_fwd: the floor row of `crosszone bench forward` (bench/forward.py). It strips the 50
 * outer bytes, rewrites the MACs and redirects through a devmap, as the gateway does (its
 * redirects are bulked per NAPI poll; a plain bpf_redirect() took a different, slower path
 * here): the same output as a gateway, with no parse, lookup or translation, so it is the
 * path's limit. Built by `make build` (build/bench_forward_floor.o). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

struct fwd { __u32 ifindex; __u8 dmac[6]; __u8 smac[6]; };
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1);
         __type(key, __u32); __type(value, struct fwd); } fwd_cfg SEC(".maps");
/* slot 0: the egress device (fwd.ifindex, written by the bench) */
struct { __uint(type, BPF_MAP_TYPE_DEVMAP); __uint(max_entries, 1);
         __type(key, __u32); __type(value, __u32); } fwd_port SEC(".maps");

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
	return bpf_redirect_map(&fwd_port, 0, 0);
}

char _license[] SEC("license") = "GPL";
