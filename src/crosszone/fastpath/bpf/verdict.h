/* The outcome of one packet: XDP action, named reason, egress port, VPC. Counted in one place. */
#ifndef CZ_VERDICT_H
#define CZ_VERDICT_H

#include <linux/bpf.h>
#include "maps.h"

#define CZ_NO_VPC 0xffffffffu

struct cz_verdict {
	__u32 action;
	__u32 reason;
	__u32 port;
	__u32 vpc_id;
	__u32 out_len;          /* frame length after rewriting (forwarded packets) */
	__u32 to_storage;       /* 1 = compute->storage, 0 = storage->compute */
	__u32 in_len;           /* frame length as received (all fragments); every stage reads it here */
	__u32 cfg_flags;        /* CZ_CFG_* of the gateway's config */
};

static __always_inline void cz_set(struct cz_verdict *v, __u32 action, __u32 reason)
{
	v->action = action;
	v->reason = reason;
}

#define CZ_PASS(v, r) ({ cz_set((v), XDP_PASS, (r)); return; })
#define CZ_DROP(v, r) ({ cz_set((v), XDP_DROP, (r)); return; })

/* XDP_TX when the egress is the ingress, otherwise XDP_REDIRECT through the devmap. */
static __always_inline void cz_send(struct xdp_md *ctx, struct cz_verdict *v, __u32 port_id,
				    __u32 ifindex, __u32 reason)
{
	v->port = port_id;
	v->reason = reason;
	if (ifindex == ctx->ingress_ifindex) {
		v->action = XDP_TX;
		return;
	}
	v->action = bpf_redirect_map(&tx_ports, port_id, 0);
	if (v->action != XDP_REDIRECT)
		cz_set(v, XDP_DROP, CZ_R_DROP_REDIRECT_FAILED);
}

/* Eight bytes of IPv6 extension-header numbers (RFC 8200 section 4, IANA list). */
static __always_inline int cz_is_ipv6_exthdr(__u8 nh)
{
	switch (nh) {
	case 0: case 43: case 44: case 50: case 51: case 60: case 135: case 139: case 140:
	case 253: case 254:
		return 1;
	}
	return 0;
}

#endif
