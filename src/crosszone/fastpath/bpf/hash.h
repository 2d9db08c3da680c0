/* Flow hash over the inner 5-tuple: murmur3's 32-bit mixing over the raw (little-endian loaded)
 * address words, the port word and the protocol. Mirrored bit for bit in crosszone/fastpath/model.py.
 * It picks the ECMP bucket and the VXLAN source port (entropy for the underlay's ECMP and RSS). */
#ifndef CZ_HASH_H
#define CZ_HASH_H

#include <linux/types.h>

#define CZ_HASH_SEED 0x63727a31u   /* "crz1" */

static __always_inline __u32 cz_rotl(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 cz_mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51u;
	k = cz_rotl(k, 15);
	k *= 0x1b873593u;
	h ^= k;
	h = cz_rotl(h, 13);
	return h * 5 + 0xe6546b64u;
}

static __always_inline __u32 cz_fmix(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* words: src then dst address (1 word each for IPv4, 4 for IPv6). */
static __always_inline __u32 cz_flow_hash4(__u32 src, __u32 dst, __u32 ports, __u32 proto)
{
	__u32 h = CZ_HASH_SEED;
	h = cz_mix(h, src);
	h = cz_mix(h, dst);
	h = cz_mix(h, ports);
	h = cz_mix(h, proto);
	return cz_fmix(h ^ 16);
}

static __always_inline __u32 cz_flow_hash6(const __u32 *src, const __u32 *dst, __u32 ports,
					   __u32 proto)
{
	__u32 h = CZ_HASH_SEED;
#pragma unroll
	for (int i = 0; i < 4; i++)
		h = cz_mix(h, src[i]);
#pragma unroll
	for (int i = 0; i < 4; i++)
		h = cz_mix(h, dst[i]);
	h = cz_mix(h, ports);
	h = cz_mix(h, proto);
	return cz_fmix(h ^ 40);
}

#endif
