// SPDX-License-Identifier: GPL-2.0
/* XDP_DROP everything: the benchmark's sink on the far end of a veth, and the "silent failure"
 * injected by failover tests (link up, every packet lost: only BFD notices). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp.frags")
int cz_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
