/* Test builds only (xdp_gateway_testclock.c, bench_gateway_testclock*.o): the fast path's clocks
 * as the test set them. Included before the product's code, it stands in for clock.h (same
 * include guard): cz_now reads test_clock[0] (ns), cz_ticks test_clock[1] (jiffies), so a test
 * sets time exactly (fastpath/testing/testrun.py). */
#ifndef CZ_CLOCK_H
#define CZ_CLOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* The clocks as the test set them: [0] ns (cz_now), [1] jiffies (cz_ticks). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} test_clock SEC(".maps");

static __always_inline __u64 cz_test_clock(__u32 i)
{
	__u64 *t = bpf_map_lookup_elem(&test_clock, &i);

	return t ? *t : 0;
}

static __always_inline __u64 cz_now(void)
{
	return cz_test_clock(0);
}

static __always_inline __u64 cz_ticks(void)
{
	return cz_test_clock(1);
}

#endif
