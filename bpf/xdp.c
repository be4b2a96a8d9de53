//go:build ignore

// XDP steering program for xdproce: RoCEv2 frames (UDP destination port 4791)
// addressed to one of this device's own IP addresses go to the AF_XDP socket
// of the receive queue (XSKMAP slot = rx queue index); everything else, and
// anything that cannot be parsed, goes to the kernel stack (XDP_PASS), so ARP,
// ND, ICMP and TCP keep working.
//
// Self-contained on purpose (no kernel or libbpf headers), so the object built
// by `make generate` does not depend on the host's header versions.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum xdp_action { XDP_ABORTED = 0, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT };

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_XSKMAP = 17,
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;
static __u64 (*bpf_xdp_get_buff_len)(struct xdp_md *ctx) = (void *)188;
static long (*bpf_xdp_load_bytes)(struct xdp_md *ctx, __u32 offset, void *buf, __u32 len) = (void *)189;

#define bswap16(x) __builtin_bswap16(x)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define htons(x) ((__u16)bswap16(x))
#else
#define htons(x) ((__u16)(x))
#endif

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define IPPROTO_UDP 17
#define IPPROTO_FRAGMENT 44
#define ROCE_PORT 4791

// Verdicts, the index of the stats map. Keep in step with the Verdict
// constants in bpf.go.
enum verdict {
	V_REDIRECT = 0,  // handed to the AF_XDP socket of the rx queue
	V_NO_SOCKET,     // RoCE for us, but no socket on this queue: passed
	V_NOT_IP,        // not IPv4/IPv6 (ARP, LLDP, ...): passed
	V_NOT_ROCE,      // IP but not UDP to port 4791: passed
	V_NOT_LOCAL,     // RoCE to an address that is not ours: passed
	V_TRUNCATED,     // headers cut short: passed
	V_FRAGMENT,      // an IP fragment: passed
	V_MAX,
};

struct counter {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

// Local IPv4 addresses, in network byte order.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} local_v4 SEC(".maps");

struct in6 {
	__u8 b[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct in6);
	__type(value, __u8);
} local_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, V_MAX);
	__type(key, __u32);
	__type(value, struct counter);
} stats SEC(".maps");

struct ethhdr {
	__u8 dst[6];
	__u8 src[6];
	__u16 proto;
} __attribute__((packed));

struct vlanhdr {
	__u16 tci;
	__u16 proto;
} __attribute__((packed));

struct iphdr {
	__u8 ver_ihl;
	__u8 tos;
	__u16 tot_len;
	__u16 id;
	__u16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__u32 saddr;
	__u32 daddr;
} __attribute__((packed));

struct ipv6hdr {
	__u32 ver_tc_flow;
	__u16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	struct in6 saddr;
	struct in6 daddr;
} __attribute__((packed));

struct udphdr {
	__u16 source;
	__u16 dest;
	__u16 len;
	__u16 check;
} __attribute__((packed));

// count adds the frame to verdict v's counter and returns action. The length
// comes from the helper rather than data_end - data: subtracting one packet
// pointer from another needs CAP_PERFMON, and the README's capabilities
// (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_IPC_LOCK) must be enough to load
// this program. The helper also counts the fragments of a multi-buffer frame.
static __attribute__((always_inline)) int count(struct xdp_md *ctx, __u32 v, int action)
{
	struct counter *c = bpf_map_lookup_elem(&stats, &v);
	if (c) {
		c->packets++;
		c->bytes += bpf_xdp_get_buff_len(ctx);
	}
	return action;
}

SEC("xdp.frags")
int xdp_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *l3;
	__u32 l3off = sizeof(*eth);
	struct udphdr *udp;
	__u16 proto;

	if ((void *)(eth + 1) > end)
		return count(ctx, V_TRUNCATED, XDP_PASS);
	proto = eth->proto;
	l3 = eth + 1;
	if (proto == htons(ETH_P_8021Q) || proto == htons(ETH_P_8021AD)) {
		struct vlanhdr *vh = l3;
		if ((void *)(vh + 1) > end)
			return count(ctx, V_TRUNCATED, XDP_PASS);
		proto = vh->proto;
		l3 = vh + 1;
		l3off += sizeof(*vh);
	}

	if (proto == htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		__u32 ihl;
		if ((void *)(ip + 1) > end)
			return count(ctx, V_TRUNCATED, XDP_PASS);
		ihl = (ip->ver_ihl & 0x0f) * 4;
		if ((ip->ver_ihl >> 4) != 4 || ihl < sizeof(*ip))
			return count(ctx, V_TRUNCATED, XDP_PASS);
		// More-fragments flag or a fragment offset: not a whole datagram.
		if (ip->frag_off & htons(0x3fff))
			return count(ctx, V_FRAGMENT, XDP_PASS);
		if (ip->protocol != IPPROTO_UDP)
			return count(ctx, V_NOT_ROCE, XDP_PASS);
		// The UDP header sits at a variable offset (IP options). Adding a
		// variable to a packet pointer needs CAP_PERFMON, so copy the
		// header out by offset instead; the helper checks the bounds.
		struct udphdr uh;
		if (bpf_xdp_load_bytes(ctx, l3off + ihl, &uh, sizeof(uh)) < 0)
			return count(ctx, V_TRUNCATED, XDP_PASS);
		if (uh.dest != htons(ROCE_PORT))
			return count(ctx, V_NOT_ROCE, XDP_PASS);
		__u32 daddr = ip->daddr;
		if (!bpf_map_lookup_elem(&local_v4, &daddr))
			return count(ctx, V_NOT_LOCAL, XDP_PASS);
	} else if (proto == htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end)
			return count(ctx, V_TRUNCATED, XDP_PASS);
		if ((ip6->ver_tc_flow & htons(0xf000)) != htons(0x6000))
			return count(ctx, V_TRUNCATED, XDP_PASS);
		if (ip6->nexthdr == IPPROTO_FRAGMENT)
			return count(ctx, V_FRAGMENT, XDP_PASS);
		// RoCEv2 puts UDP right after the IPv6 header; extension headers
		// mean it is not ours.
		if (ip6->nexthdr != IPPROTO_UDP)
			return count(ctx, V_NOT_ROCE, XDP_PASS);
		udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > end)
			return count(ctx, V_TRUNCATED, XDP_PASS);
		if (udp->dest != htons(ROCE_PORT))
			return count(ctx, V_NOT_ROCE, XDP_PASS);
		struct in6 daddr = ip6->daddr;
		if (!bpf_map_lookup_elem(&local_v6, &daddr))
			return count(ctx, V_NOT_LOCAL, XDP_PASS);
	} else {
		return count(ctx, V_NOT_IP, XDP_PASS);
	}

	// The low bits of flags are the action when the slot is empty.
	long act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	if (act == XDP_REDIRECT)
		return count(ctx, V_REDIRECT, XDP_REDIRECT);
	return count(ctx, V_NO_SOCKET, (int)act);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
