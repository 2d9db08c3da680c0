// SPDX-License-Identifier: GPL-2.0
/* crosszone gateway: the XDP entry point of the product's program (gateway.h has the body). Built
 * from this file alone, with no benchmark or test hook; the variants include this file after the
 * header they stand in (xdp_gateway_lpm.c, xdp_gateway_testclock.c) or wrap the body
 * (bench_gateway.c). Loaded with BPF_F_XDP_HAS_FRAGS (section xdp.frags) so that 9000-byte
 * underlay MTUs work on veth and multi-buffer NICs: all headers sit in the first buffer. */
#include "gateway.h"

SEC("xdp.frags")
int cz_gateway(struct xdp_md *ctx)
{
	return cz_gateway_run(ctx);
}

char _license[] SEC("license") = "GPL";
