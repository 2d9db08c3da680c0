// SPDX-License-Identifier: GPL-2.0
/* XDP_PASS, for the veth peer of a gateway port: veth delivers an XDP_REDIRECT into a device only
 * when its peer runs an XDP program (drivers/net/veth.c), and the kernel then handles the frame. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp.frags")
int cz_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
