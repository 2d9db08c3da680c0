/* The fast path's two clocks (policy.h says why two): nanoseconds for the token buckets, jiffies
 * for a flow's state. The test build replaces this header with test_clock.h, which reads both
 * from a map the test sets; the product's program reads the kernel's. */
#ifndef CZ_CLOCK_H
#define CZ_CLOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static __always_inline __u64 cz_now(void)
{
	return bpf_ktime_get_ns();
}

static __always_inline __u64 cz_ticks(void)
{
	return bpf_jiffies64();
}

#endif
