/* Flow hash over the inner 5-tuple: the raw (little-endian loaded) address words, the port word
 * and the protocol, packed into 64-bit words, each multiplied by its own odd constant, xored, then
 * one xor-shift and multiply (a two-round multiplicative mixer). The products are independent, so
 * on x86 the whole hash is about two multiply latencies; murmur3's 32-bit rounds, used before,
 * chained ten multiplies. Bucket and port spread were checked
 * against sequential source ports, hosts, destinations and destination ports (chi-square of the
 * 256 ECMP buckets within a random hash's range). Mirrored bit for bit in
 * crosszone/fastpath/model.py. It picks the ECMP bucket and the VXLAN source port (entropy for the
 * underlay's ECMP and RSS). */
#ifndef CZ_HASH_H
#define CZ_HASH_H

#include <linux/types.h>

#define CZ_FLOW_SEED 0x63727a3163727a31ull   /* "crz1crz1" */
#define CZ_FLOW_K1   0x9e3779b97f4a7c15ull
#define CZ_FLOW_K2   0xc2b2ae3d27d4eb4full
#define CZ_FLOW_K3   0x165667b19e3779f9ull
#define CZ_FLOW_K4   0xd6e8feb86659fd93ull
#define CZ_FLOW_K5   0xff51afd7ed558ccdull
#define CZ_FLOW_K6   0xc4ceb9fe1a85ec53ull

static __always_inline __u32 cz_flow_final(__u64 x)
{
	x ^= x >> 32;
	x *= CZ_FLOW_K4;
	return (__u32)(x >> 32);
}

static __always_inline __u64 cz_word64(__u32 lo, __u32 hi)
{
	return ((__u64)hi << 32) | lo;
}

static __always_inline __u32 cz_flow_hash4(__u32 src, __u32 dst, __u32 ports, __u32 proto)
{
	__u64 a = cz_word64(dst, src) ^ CZ_FLOW_SEED;
	__u64 b = cz_word64(proto, ports);

	return cz_flow_final((a * CZ_FLOW_K1) ^ (b * CZ_FLOW_K2));
}

static __always_inline __u32 cz_flow_hash6(const __u32 *src, const __u32 *dst, __u32 ports,
					   __u32 proto)
{
	__u64 s0 = cz_word64(src[0], src[1]) ^ CZ_FLOW_SEED, s1 = cz_word64(src[2], src[3]);
	__u64 d0 = cz_word64(dst[0], dst[1]), d1 = cz_word64(dst[2], dst[3]);
	__u64 b = cz_word64(proto | (6u << 8), ports);

	return cz_flow_final((s0 * CZ_FLOW_K1) ^ (s1 * CZ_FLOW_K3) ^ (d0 * CZ_FLOW_K5) ^
			     (d1 * CZ_FLOW_K6) ^ (b * CZ_FLOW_K2));
}

#endif
