// SPDX-License-Identifier: GPL-2.0
/* `crosszone bench fastpath`'s gateway builds (build/bench_gateway*.o): the product's program body
 * (gateway.h) inside the benchmark harness (bench_harness.h), so every iteration of a test run
 * sees the original frame. What each build's name says comes from the Makefile's BENCH_FLAGS:
 * -DCZ_ROUTES_LPM_TRIE the trie baseline (bench_lpm_route.h), -DCZ_TEST_CLOCK the test clock
 * (test_clock.h: the policy without the clock read), -DCZ_BENCH_SPREAD=N spread destinations
 * (bench_spread.h), -DCZ_BENCH_LIVE the live-frames harness. Never attached to a device. */
#ifdef CZ_ROUTES_LPM_TRIE
#include "bench_lpm_route.h"
#endif
#ifdef CZ_TEST_CLOCK
#include "test_clock.h"
#endif
#include "gateway.h"
#include "bench_harness.h"
#ifdef CZ_BENCH_SPREAD
#include "bench_spread.h"
#endif

SEC("xdp.frags")
int cz_gateway(struct xdp_md *ctx)
{
	if (!cz_bench_enter(ctx, cz_bench_slot()))
		return XDP_ABORTED;   /* bench frames are always long enough */
#ifdef CZ_BENCH_SPREAD
	cz_bench_spread(ctx);
#endif
	int action = cz_gateway_run(ctx);
	/* The save slot is looked up again rather than kept: a pointer live across the program's
	 * body took a stack slot of its own, and the body with its deepest call already uses the
	 * verifier's 512 bytes. */
	struct cz_bench_save *bench = cz_bench_slot();

	if (bench)
		cz_bench_leave(ctx, bench);
	return action;
}

char _license[] SEC("license") = "GPL";
