/* Benchmark builds only (-DCZ_BENCH). BPF_PROG_TEST_RUN with `repeat N` replays the program on
 * the buffer the previous iteration rewrote, and live-frames mode recycles page-pool pages
 * without re-copying the frame once it has been transmitted and dropped (measured here: a
 * decapsulating program then sees its own output). So a bench build saves the first
 * CZ_BENCH_SAVE bytes and the length on entry and restores both on exit: every iteration starts
 * from the original frame. The floor program gets the same harness, so the harness' cost cancels
 * in the ratio; the bench checks freshness by counting every iteration's reason. */
#ifndef CZ_BENCH_HARNESS_H
#define CZ_BENCH_HARNESS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define CZ_BENCH_SAVE 128   /* covers every byte a stage rewrites (headers up to inner L4 csum) */

struct cz_bench_save {
	__u64 words[CZ_BENCH_SAVE / 8];
	__u32 len;
};

/* Eight bytes at a time: __builtin_memcpy on packet memory of unknown alignment compiles to
 * byte copies, which made the harness cost ~85 ns instead of a few. x86 JITs unaligned loads. */
static __always_inline void cz_copy_words(__u64 *dst, const __u64 *src)
{
#pragma unroll
	for (int i = 0; i < CZ_BENCH_SAVE / 8; i++)
		dst[i] = src[i];
}

/* The saved bytes live on the caller's stack (a map would cost a lookup per iteration). */
static __always_inline struct cz_bench_save *cz_bench_enter(struct xdp_md *ctx,
							    struct cz_bench_save *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (data + CZ_BENCH_SAVE > data_end)
		return 0;
	cz_copy_words(s->words, data);
	s->len = bpf_xdp_get_buff_len(ctx);
	return s;
}

static __always_inline void cz_bench_leave(struct xdp_md *ctx, struct cz_bench_save *s)
{
	int delta = (int)bpf_xdp_get_buff_len(ctx) - (int)s->len;

	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + CZ_BENCH_SAVE > data_end)
		return;
	cz_copy_words(data, s->words);
}

#endif
