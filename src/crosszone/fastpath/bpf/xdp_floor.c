// SPDX-License-Identifier: GPL-2.0
/* Benchmark floor: swap the MACs and bounce the frame (XDP_TX). Nothing can forward for less on
 * this path, so every fast-path figure is reported next to this one, measured in the same run. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#ifdef CZ_BENCH
#include "bench_harness.h"
#endif

SEC("xdp.frags")
int cz_floor(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char tmp[ETH_ALEN];

#ifdef CZ_BENCH
	struct cz_bench_save *bench = cz_bench_enter(ctx, cz_bench_slot());

	if (!bench)
		return XDP_ABORTED;   /* bench frames are always long enough */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
#endif
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
#ifdef CZ_BENCH
	cz_bench_leave(ctx, bench);
#endif
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
