// SPDX-License-Identifier: GPL-2.0
/* Benchmark floor: swap the MACs and bounce the frame (XDP_TX). Nothing can forward for less on
 * this path, so every fast-path figure is reported next to this one, measured in the same run.
 *
 * Two variants bound what the LPM-trie comparison can show (bench.py, "ceiling"):
 * - -DCZ_FLOOR_DECAP (bench_floor_decap*.o) strips the 50 outer bytes first, as the gateway does:
 *   the least any decapsulating gateway can cost;
 * - with -DCZ_ROUTES_LPM_TRIE as well (bench_floor_decap_lpm*.o) it also looks the inner IPv4
 *   destination up in the same 1M-route trie as the gateway's baseline build.
 *
 * Four more bound what the traffic policy can cost (bench/fastpath_policy.py, "ceiling"): with
 * -DCZ_FLOOR_CLOCK=n the floor adds one reading of a time source to a per-CPU sum, n = 0 a
 * constant (bench_floor_sink*.o: the sum alone), 1 bpf_ktime_get_ns (bench_floor_clock*.o),
 * 2 bpf_ktime_get_coarse_ns (bench_floor_coarse*.o), 3 bpf_jiffies64 (bench_floor_jiffies*.o). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#ifdef CZ_BENCH
#include "bench_harness.h"
#endif

#ifdef CZ_ROUTES_LPM_TRIE
#include "lpm_routes.h"

/* Outer Ethernet, IPv4, UDP, VXLAN, inner Ethernet, then the inner IPv4 daddr at 16. */
#define CZ_FLOOR_INNER_DST (14 + 20 + 8 + 8 + 14 + 16)

/* Lookups that found a route: the bench checks that every iteration did. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} floor_hits SEC(".maps");

/* 0 when the inner destination (VPC 0, as in the bench tables) has a route. */
static __always_inline int cz_floor_route(void *data, void *data_end)
{
	__be32 *dst = data + CZ_FLOOR_INNER_DST;
	__u32 zero = 0;

	if ((void *)(dst + 1) > data_end)
		return -1;
	struct cz_lpm4_key key = { .prefixlen = 64, .vpc_id = 0, .addr = *dst };
	if (!bpf_map_lookup_elem(&routes4_lpm, &key))
		return -1;
	__u64 *hits = bpf_map_lookup_elem(&floor_hits, &zero);
	if (hits)
		(*hits)++;
	return 0;
}
#endif

#ifdef CZ_FLOOR_CLOCK
/* The sum of the readings: a result the compiler cannot drop. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} floor_sum SEC(".maps");

static __always_inline __u64 cz_floor_time(void)
{
#if CZ_FLOOR_CLOCK == 1
	return bpf_ktime_get_ns();
#elif CZ_FLOOR_CLOCK == 2
	return bpf_ktime_get_coarse_ns();
#elif CZ_FLOOR_CLOCK == 3
	return bpf_jiffies64();
#else
	return 1;
#endif
}
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
#ifdef CZ_ROUTES_LPM_TRIE
	if (cz_floor_route(data, data_end))
		return XDP_DROP;
#endif
#ifdef CZ_FLOOR_CLOCK
	__u32 zero = 0;
	__u64 *sum = bpf_map_lookup_elem(&floor_sum, &zero);
	if (sum)
		*sum += cz_floor_time();
#endif
#ifdef CZ_FLOOR_DECAP
	if (bpf_xdp_adjust_head(ctx, 50))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
#endif
	__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
#ifdef CZ_BENCH
	cz_bench_leave(ctx, bench);
#endif
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
