/* Benchmark builds only (-DCZ_BENCH). Every iteration of a BPF_PROG_TEST_RUN must see the
 * original frame, but the gateway rewrites it (decapsulates, translates, encapsulates):
 *
 * - Without live frames, `repeat N` replays the program on the buffer the previous iteration
 *   left, pointers and bytes. So the harness saves the first CZ_BENCH_SAVE bytes and the length
 *   on entry and on exit moves the data pointer back (bpf_xdp_adjust_head) and restores them.
 * - With live frames (-DCZ_BENCH_LIVE, BPF_F_TEST_XDP_LIVE_FRAMES; these builds are run only
 *   after fastpath/live_frames.probe() found the flag allowed: a host with a BPF LSM refuses it
 *   with EPERM, and the benchmark then prints the refusal), the kernel resets the data
 *   pointers before each iteration but recycles page-pool pages without re-copying the frame
 *   (measured here: a decapsulating program then saw its own output). So the harness restores
 *   only bytes, where the program wrote them: after decapsulation the rewritten bytes start at
 *   the old inner Ethernet header, so that region is saved too; after encapsulation they start
 *   CZ_BENCH_SHIFT bytes after the new data pointer. No helper call, so the harness costs the
 *   program the same as the floor (which never moves the pointer).
 *
 * The floor program gets the same harness. The bench checks freshness by counting every
 * iteration's reason: a stale frame would be counted under another reason. */
#ifndef CZ_BENCH_HARNESS_H
#define CZ_BENCH_HARNESS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Bytes saved per region: every byte a stage rewrites, up to the inner L4 checksum (at most 72
 * from the inner Ethernet header, for IPv6); without live frames the outer headers come first. */
#ifdef CZ_BENCH_LIVE
#define CZ_BENCH_SAVE 80
#else
#define CZ_BENCH_SAVE 128
#endif
#define CZ_BENCH_SHIFT 50   /* outer Ethernet + IPv4 + UDP + VXLAN: what decap strips */

struct cz_bench_save {
	__u64 words[CZ_BENCH_SAVE / 8];   /* the frame's first bytes */
#ifdef CZ_BENCH_LIVE
	__u64 inner[CZ_BENCH_SAVE / 8];   /* the bytes from CZ_BENCH_SHIFT on */
#endif
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

/* The saved bytes live in a per-CPU array (an inlined lookup), for the floor as for the
 * gateway: on the stack they would push the gateway, with its out-of-line stages, past the
 * verifier's 512 bytes of combined stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cz_bench_save);
} bench_save SEC(".maps");

static __always_inline struct cz_bench_save *cz_bench_slot(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&bench_save, &zero);
}

static __always_inline struct cz_bench_save *cz_bench_enter(struct xdp_md *ctx,
							    struct cz_bench_save *s)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (!s || data + CZ_BENCH_SHIFT + CZ_BENCH_SAVE > data_end)
		return 0;
	cz_copy_words(s->words, data);
#ifdef CZ_BENCH_LIVE
	cz_copy_words(s->inner, data + CZ_BENCH_SHIFT);
#endif
	s->len = bpf_xdp_get_buff_len(ctx);
	return s;
}

static __always_inline void cz_bench_leave(struct xdp_md *ctx, struct cz_bench_save *s)
{
	int delta = (int)bpf_xdp_get_buff_len(ctx) - (int)s->len;   /* bytes added */

#ifndef CZ_BENCH_LIVE
	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return;
	delta = 0;
#endif
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + CZ_BENCH_SHIFT + CZ_BENCH_SAVE > data_end)
		return;
	if (delta == 0)
		cz_copy_words(data, s->words);
#ifdef CZ_BENCH_LIVE
	else if (delta == -CZ_BENCH_SHIFT)
		cz_copy_words(data, s->inner);
	else if (delta == CZ_BENCH_SHIFT)
		cz_copy_words(data + CZ_BENCH_SHIFT, s->words);
#endif
}

#endif
