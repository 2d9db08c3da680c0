/* Benchmark builds only (-DCZ_BENCH_SPREAD=N): BPF_PROG_TEST_RUN replays one frame, so a single
 * destination would keep every lookup in cache. This rewrites the inner IPv4 destination of an
 * untagged VXLAN frame to one of N addresses in distinct /24 routes, visited in a scattered order
 * (index * 7919 mod N, spaced 6 routes apart: consecutive routes sit next to each other in the
 * trie's memory, which would flatter the baseline), and fixes the inner checksum. Its own cost is
 * counted against the program, and the LPM-trie baseline pays the same. */
#ifndef CZ_BENCH_SPREAD_H
#define CZ_BENCH_SPREAD_H

#include "maps.h"
#include "csum.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_seq SEC(".maps");

#define CZ_SPREAD_DST_OFF (14 + 36 + 14 + 16)   /* inner IPv4 daddr */
#define CZ_SPREAD_CSUM_OFF (14 + 36 + 14 + 10)

static __always_inline void cz_bench_spread(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	__u32 *seq = bpf_map_lookup_elem(&bench_seq, &zero);

	if (!seq || data + CZ_SPREAD_DST_OFF + 4 > data_end)
		return;
	__u32 *dst = data + CZ_SPREAD_DST_OFF;
	__u16 *check = data + CZ_SPREAD_CSUM_OFF;
	__u32 n = ((*seq)++ * 7919u) % CZ_BENCH_SPREAD;
	__u32 old = *dst;
	__u32 new = bpf_htonl(bpf_ntohl(old) + n * 6 * 256);
	*check = cz_csum_replace4(*check, old, new);
	*dst = new;
}

#endif
