// SPDX-License-Identifier: GPL-2.0
/* cz_bench_gen: the generator of `crosszone bench forward` (bench/forward.py), never attached to
 * a device. Run by BPF_PROG_TEST_RUN in live-frames mode with ingress g0: it rewrites the 96
 * header bytes (outer + inner headers, map gen_hdr) of the frame and sends it back out (XDP_TX),
 * build/xdp_floor.o's idea plus a header rewrite. Built by `make build` (build/bench_forward_gen.o). */
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
