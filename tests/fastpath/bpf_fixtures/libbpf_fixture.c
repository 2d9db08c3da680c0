// Fixture for tests/fastpath/test_libbpf.py: one map of each type the binding must handle,
// a struct and an enum for the BTF reader, and small XDP programs.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

// Reasons the fixture counts; read back by enum_values().
enum fx_reason {
	FX_REASON_NONE = 0,
	FX_REASON_TX = 3,
	FX_REASON_SHORT = 7,
	FX_REASON_BIG = 0x10000,
};

struct fx_key {
	__u32 src;
	__u32 dst;
	__u16 sport;
	__u16 dport;
}; // 12 bytes

struct fx_inner {
	__u16 port;
	__u8 proto;
	__u8 flags;
};

// BTF layout test: nested struct, array field, named union, anonymous struct, enum, typedef.
typedef __u64 fx_counter_t;
struct fx_record {
	__u32 addr;
	struct fx_inner inner;
	__u8 mac[6];
	fx_counter_t counter;
	union {
		__u32 vni;
		__u8 raw[4];
	} u;
	struct {
		__u16 lo;
		__u16 hi;
	};
	enum fx_reason reason;
	struct fx_inner hops[3];
};

struct fx_lpm_key {
	__u32 prefixlen;
	__u32 addr;
};

// flows: 12-byte flow key -> u64, for batch updates.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, struct fx_key);
	__type(value, __u64);
} fx_flows SEC(".maps");

// routes: IPv4 prefix -> u32 next hop; LPM tries have no batch ops.
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fx_lpm_key);
	__type(value, __u32);
} fx_routes SEC(".maps");

// counters: per-CPU packet counters indexed by program (0 swap, 1 frags, 2 pass).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} fx_counters SEC(".maps");

// records: fx_record values, for the BTF test; slot 0 gets the last frame length seen.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, struct fx_record);
} fx_records SEC(".maps");

// ports: redirect targets by ifindex.
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u32);
} fx_ports SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&fx_counters, &idx);
	if (c)
		*c += 1;
}

static __always_inline int swap_macs(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	unsigned char tmp[ETH_ALEN];
	__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
	return 0;
}

SEC("xdp")
int fx_swap(struct xdp_md *ctx)
{
	count(0);
	if (swap_macs((void *)(long)ctx->data, (void *)(long)ctx->data_end))
		return XDP_DROP;
	return XDP_TX;
}

SEC("xdp.frags")
int fx_frags(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct fx_record *rec = bpf_map_lookup_elem(&fx_records, &zero);
	count(1);
	if (rec) {
		rec->counter = bpf_xdp_get_buff_len(ctx);
		rec->reason = FX_REASON_BIG;
	}
	if (swap_macs((void *)(long)ctx->data, (void *)(long)ctx->data_end))
		return XDP_DROP;
	return XDP_TX;
}

SEC("xdp")
int fx_pass(struct xdp_md *ctx)
{
	count(2);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
