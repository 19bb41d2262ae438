// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * remote.bpf.c: pier's DNAT for remote clients at tc, before netfilter and conntrack.
 *
 * Theory of operation: the kernel path for a remote client of a published port is
 * netfilter's: conntrack looks up (or creates) an entry for every packet, nat rewrites
 * it, the IP stack routes it through the FORWARD hook to the container's bridge. These
 * two programs do the same translation without any of that, the way Cilium's eBPF
 * NodePort does, on the tc ingress hook (tcx links):
 *   pier_tc_in     on every uplink (a host interface remote clients come in through):
 *                  a TCP/UDP packet for a published (host address, port) is rewritten to
 *                  (container address, port), checksums updated incrementally, and
 *                  redirected to the container's bridge after a FIB lookup (MACs from it,
 *                  or the neighbour subsystem's when it has none yet);
 *   pier_tc_reply  on every pier bridge: a packet of such a flow coming back from the
 *                  container gets the host address and port back as its source and is
 *                  redirected out the way the FIB says the client is.
 * The client's address is never touched: the container sees the real remote peer.
 * What is published for remote clients is the hash map `pier_remote`, a mirror of the
 * nat engine's DNAT elements written by the auto engine: keyed by (host address, port,
 * protocol) like pier_publish in publish.bpf.c (addresses 16 bytes, IPv4 v4-mapped);
 * the wildcard is ::ffff:0.0.0.0 for IPv4 and :: for IPv6 (nft has one wildcard map per
 * family too). A specific address's value names the interface holding it, and only
 * packets coming in there are taken (nft's `fib daddr . iif type local`); a wildcard
 * entry takes any non-loopback destination the FIB calls local.
 * Flows: `pier_flows` (client, front) -> target and `pier_rflows` (target, client) ->
 * front, LRU hashes written when a flow starts (a TCP SYN without ACK; any UDP packet).
 * A TCP packet of a flow that started before these programs saw it (netfilter DNATed its
 * SYN, conntrack owns it) is left to netfilter, so a flow is never split between the
 * two. Every packet looks the published entry up again, so an unpublish (or a port
 * published again to another container) takes effect on established flows at once.
 * Anything not handled here (fragments, IPv4 options, IPv6 extension headers, SCTP, a
 * container of the other family, forwarding disabled, no route) passes untouched to the
 * kernel, where the nat engine's nft rules serve it: these programs only make the
 * common case fast, they never decide reachability alone.
 * ICMP errors about a flow are translated like its packets, as conntrack does for
 * related errors: on an uplink, an error about a reply (its embedded packet goes from
 * the front to the client: a router's "fragmentation needed" or "packet too big" on
 * the way back) goes to the container with the front replaced by the target in the
 * outer destination and in the embedded source; on the bridge, an error the container
 * sends about a client's packet (port unreachable for UDP) goes to the client with
 * the target replaced by the front. Path MTU discovery therefore works through the
 * fast path, and the container's address never leaks. The ICMP checksum is patched
 * for every byte changed (the embedded IPv4 header checksum included); the embedded
 * L4 checksum is left alone, as receivers of errors never check it.
 * Forwarding: the hop limit (TTL) is decremented as a router's would be; a packet
 * that would leave with none, or is larger than the egress MTU, is left to the kernel,
 * whose forwarding path sends the ICMP error its sender needs.
 * Limits: an LRU eviction of an active flow's reverse entry under more than 65,536
 * concurrent flows breaks that flow.
 * `pier_remote_stats` (per CPU): packets translated in, out, flows started, packets
 * left to the kernel because the FIB had no answer (or the MTU was too small), and ICMP
 * errors translated; read by tests and doctor.
 *
 * Byte order: addresses and ports as on the wire (network order), like publish.bpf.c.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "pier_addr.h"

#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define AF_INET 2
#define AF_INET6 10
#define PACKET_HOST 0
#define IP_FRAGMENT 0x3fff /* MF | offset */
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10
#define PROTO_TCP 6
#define PROTO_UDP 17
#define PROTO_ICMP 1
#define PROTO_ICMPV6 58

/* A published front for remote clients: where it goes, and who may use it. */
struct pier_remote_target {
	struct pier_addr addr; /* the container's address, of the key's family */
	__u16 port;
	__u16 pad;
	__u32 ifindex; /* specific address: the interface holding it; 0 for a wildcard */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pier_key);
	__type(value, struct pier_remote_target);
} pier_remote SEC(".maps");

/* A packet's addresses and ports, source first, as they are on the wire. */
struct pier_flow_key {
	struct pier_addr src;
	struct pier_addr dst;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* The other end of a translation: a target (forward) or a front (reverse). */
struct pier_flow {
	struct pier_addr addr;
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pier_flow_key);
	__type(value, struct pier_flow);
} pier_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pier_flow_key);
	__type(value, struct pier_flow);
} pier_rflows SEC(".maps");

enum { STAT_IN, STAT_OUT, STAT_FLOWS, STAT_NO_ROUTE, STAT_ICMP, STAT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} pier_remote_stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *n = bpf_map_lookup_elem(&pier_remote_stats, &stat);

	if (n)
		*n += 1;
}

static __always_inline int same(const struct pier_flow *f, const struct pier_remote_target *t)
{
	return f->port == t->port && f->addr.a[0] == t->addr.a[0] && f->addr.a[1] == t->addr.a[1] &&
	       f->addr.a[2] == t->addr.a[2] && f->addr.a[3] == t->addr.a[3];
}

/* One parsed TCP or UDP packet. */
struct pkt {
	struct pier_flow_key k;
	__u32 l4_off;
	__u32 csum_off;
	__u64 csum_flags;
	int v6;
	int starts; /* a TCP SYN without ACK, or any UDP packet */
};

static __always_inline int parse_l3(struct __sk_buff *skb, struct pkt *p)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end)
			return 0;
		/* No options (ihl 5), no fragments: the kernel handles the rare rest. */
		if ((*(__u8 *)ip & 0x0f) != 5 || (ip->frag_off & bpf_htons(IP_FRAGMENT)))
			return 0;
		set_v4mapped(&p->k.src, ip->saddr);
		set_v4mapped(&p->k.dst, ip->daddr);
		p->k.proto = ip->protocol;
		p->l4_off = ETH_HLEN + sizeof(*ip);
		return 1;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end)
			return 0;
		__builtin_memcpy(&p->k.src, &ip6->saddr, sizeof(p->k.src));
		__builtin_memcpy(&p->k.dst, &ip6->daddr, sizeof(p->k.dst));
		p->k.proto = ip6->nexthdr; /* extension headers: not TCP/UDP here, left alone */
		p->l4_off = ETH_HLEN + sizeof(*ip6);
		p->v6 = 1;
		return 1;
	}
	return 0;
}

/* The TCP or UDP header of a packet parse_l3 took. */
static __always_inline int parse_l4(struct __sk_buff *skb, struct pkt *p)
{
	void *data, *end;
	__u8 *l4;

	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	l4 = data + p->l4_off;
	if (p->k.proto == PROTO_TCP) {
		if (l4 + sizeof(struct tcphdr) > (__u8 *)end)
			return 0;
		p->csum_off = p->l4_off + 16;
		p->starts = (l4[13] & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
	} else if (p->k.proto == PROTO_UDP) {
		if (l4 + sizeof(struct udphdr) > (__u8 *)end)
			return 0;
		p->csum_off = p->l4_off + 6;
		p->csum_flags = BPF_F_MARK_MANGLED_0; /* IPv4 UDP may carry no checksum (0) */
		p->starts = 1;
	} else {
		return 0;
	}
	p->k.sport = *(__u16 *)l4;
	p->k.dport = *(__u16 *)(l4 + 2);
	return 1;
}

/* An ICMP error and the packet it is about (as that packet was sent). */
struct pier_icmp_err {
	struct pier_flow_key inner;
	__u32 csum_off; /* the ICMP checksum */
	__u32 inner_ip; /* the embedded IP header */
	__u32 inner_l4; /* the embedded TCP/UDP header (its ports are all that is read) */
};

/* Destination unreachable (fragmentation needed among them), time exceeded, parameter
 * problem; for ICMPv6 also packet too big. */
static __always_inline int is_error(int v6, __u8 type)
{
	return v6 ? type >= 1 && type <= 4 : type == 3 || type == 11 || type == 12;
}

static __always_inline int parse_icmp_error(struct __sk_buff *skb, const struct pkt *p,
					    struct pier_icmp_err *e)
{
	__u8 type;
	__u16 ports[2];

	if (p->k.proto != (p->v6 ? PROTO_ICMPV6 : PROTO_ICMP) ||
	    bpf_skb_load_bytes(skb, p->l4_off, &type, 1) || !is_error(p->v6, type))
		return 0;
	e->csum_off = p->l4_off + 2;
	e->inner_ip = p->l4_off + 8;
	if (!p->v6) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, e->inner_ip, &ip, sizeof(ip)) || ip.ihl != 5)
			return 0;
		set_v4mapped(&e->inner.src, ip.saddr);
		set_v4mapped(&e->inner.dst, ip.daddr);
		e->inner.proto = ip.protocol;
		e->inner_l4 = e->inner_ip + sizeof(ip);
	} else {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, e->inner_ip, &ip6, sizeof(ip6)))
			return 0;
		__builtin_memcpy(&e->inner.src, &ip6.saddr, sizeof(e->inner.src));
		__builtin_memcpy(&e->inner.dst, &ip6.daddr, sizeof(e->inner.dst));
		e->inner.proto = ip6.nexthdr;
		e->inner_l4 = e->inner_ip + sizeof(ip6);
	}
	if ((e->inner.proto != PROTO_TCP && e->inner.proto != PROTO_UDP) ||
	    bpf_skb_load_bytes(skb, e->inner_l4, ports, sizeof(ports)))
		return 0;
	e->inner.sport = ports[0];
	e->inner.dport = ports[1];
	return 1;
}

static __always_inline int same_addr(const struct pier_addr *a, const struct pier_addr *b)
{
	return a->a[0] == b->a[0] && a->a[1] == b->a[1] && a->a[2] == b->a[2] && a->a[3] == b->a[3];
}

/* The key of the flow a packet belongs to, from a packet going the other way. */
static __always_inline struct pier_flow_key reversed(const struct pier_flow_key *k)
{
	struct pier_flow_key r = {
		.src = k->dst, .dst = k->src, .sport = k->dport, .dport = k->sport, .proto = k->proto,
	};
	return r;
}

/* One less hop (TTL or hop limit) on a packet that goes on; -1 when none would be left. */
static __always_inline int hop(struct __sk_buff *skb, const struct pkt *p)
{
	if (!p->v6) {
		__u32 off = ETH_HLEN + offsetof(struct iphdr, ttl);
		__u16 old, new; /* the TTL and protocol bytes, as one checksummed word */

		if (bpf_skb_load_bytes(skb, off, &old, 2) || *(__u8 *)&old <= 1)
			return -1;
		new = old;
		*(__u8 *)&new -= 1;
		if (bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old, new, 2))
			return -1;
		return bpf_skb_store_bytes(skb, off, &new, 2, 0) ? -1 : 0;
	}
	__u32 off = ETH_HLEN + offsetof(struct ipv6hdr, hop_limit);
	__u8 hops;

	if (bpf_skb_load_bytes(skb, off, &hops, 1) || hops <= 1)
		return -1;
	hops -= 1;
	return bpf_skb_store_bytes(skb, off, &hops, 1, 0) ? -1 : 0;
}

/* FIB lookup as the kernel's forwarding would do it for a packet from src to dst. */
static __always_inline int fib(struct __sk_buff *skb, const struct pkt *p, struct bpf_fib_lookup *f,
			       const struct pier_addr *src, const struct pier_addr *dst)
{
	f->ifindex = skb->ingress_ifindex;
	f->l4_protocol = p->k.proto;
	if (p->v6) {
		f->family = AF_INET6;
		__builtin_memcpy(f->ipv6_src, src->a, sizeof(f->ipv6_src));
		__builtin_memcpy(f->ipv6_dst, dst->a, sizeof(f->ipv6_dst));
	} else {
		f->family = AF_INET;
		f->ipv4_src = src->a[3];
		f->ipv4_dst = dst->a[3];
	}
	return bpf_fib_lookup(skb, f, sizeof(*f), 0);
}

/* The published front of this packet, if remote clients may use it here; *wild on a wildcard. */
static __always_inline struct pier_remote_target *published(struct __sk_buff *skb,
							     const struct pkt *p, int *wild)
{
	struct pier_key key = { .addr = p->k.dst, .port = p->k.dport, .proto = p->k.proto };
	struct pier_remote_target *t;

	if (is_loopback(&key.addr))
		return NULL;
	t = bpf_map_lookup_elem(&pier_remote, &key);
	if (t) {
		*wild = 0;
		return t->ifindex == skb->ingress_ifindex ? t : NULL;
	}
	if (p->v6)
		__builtin_memset(&key.addr, 0, sizeof(key.addr));
	else
		set_v4mapped(&key.addr, 0);
	*wild = 1;
	return bpf_map_lookup_elem(&pier_remote, &key);
}

/* Rewrite the packet's destination (dst) or source to addr:port, checksums included. */
static __always_inline int rewrite(struct __sk_buff *skb, const struct pkt *p, int dst,
				   const struct pier_addr *addr, __u16 port)
{
	__u16 old_port = dst ? p->k.dport : p->k.sport;
	__u32 port_off = p->l4_off + (dst ? 2 : 0);
	struct pier_addr old = dst ? p->k.dst : p->k.src, new = *addr;

	if (!p->v6) {
		__u32 off = ETH_HLEN + (dst ? offsetof(struct iphdr, daddr) : offsetof(struct iphdr, saddr));

		if (bpf_l4_csum_replace(skb, p->csum_off, old.a[3], new.a[3],
					p->csum_flags | BPF_F_PSEUDO_HDR | 4) ||
		    bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old.a[3],
					new.a[3], 4) ||
		    bpf_skb_store_bytes(skb, off, &new.a[3], 4, 0))
			return -1;
	} else {
		__u32 off = ETH_HLEN + (dst ? offsetof(struct ipv6hdr, daddr) : offsetof(struct ipv6hdr, saddr));
		__s64 diff = bpf_csum_diff(old.a, sizeof(old), new.a, sizeof(new), 0);

		if (bpf_l4_csum_replace(skb, p->csum_off, 0, diff, p->csum_flags | BPF_F_PSEUDO_HDR) ||
		    bpf_skb_store_bytes(skb, off, new.a, sizeof(new), 0))
			return -1;
	}
	if (bpf_l4_csum_replace(skb, p->csum_off, old_port, port, p->csum_flags | 2) ||
	    bpf_skb_store_bytes(skb, port_off, &port, sizeof(port), 0))
		return -1;
	return 0;
}

/* Send the rewritten packet out where the FIB said: MACs from the FIB, or the neighbour's. */
static __always_inline int send(struct __sk_buff *skb, struct bpf_fib_lookup *f, int rc, int v6)
{
	struct bpf_redir_neigh nh = {};

	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (bpf_skb_store_bytes(skb, 0, f->dmac, 6, 0) ||
		    bpf_skb_store_bytes(skb, 6, f->smac, 6, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(f->ifindex, 0);
	}
	if (v6) {
		nh.nh_family = AF_INET6;
		__builtin_memcpy(nh.ipv6_nh, f->ipv6_dst, sizeof(nh.ipv6_nh));
	} else {
		nh.nh_family = AF_INET;
		nh.ipv4_nh = f->ipv4_dst;
	}
	return bpf_redirect_neigh(f->ifindex, &nh, sizeof(nh), 0);
}

/* The FIB found a way out. The skb flavour of the lookup also checks that the packet fits
 * the egress MTU (GSO packets by their segments) and answers FRAG_NEEDED when it does not:
 * such a packet goes to the kernel, which tells its sender. */
static __always_inline int routable(int rc)
{
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH;
}

/* Record both directions of a flow from the client to the front at t. */
static __always_inline void start_flow(const struct pkt *p, const struct pier_remote_target *t)
{
	struct pier_flow target = { .addr = t->addr, .port = t->port };
	struct pier_flow front = { .addr = p->k.dst, .port = p->k.dport };
	struct pier_flow_key reverse = {
		.src = t->addr,
		.dst = p->k.src,
		.sport = t->port,
		.dport = p->k.sport,
		.proto = p->k.proto,
	};

	bpf_map_update_elem(&pier_rflows, &reverse, &front, BPF_ANY);
	bpf_map_update_elem(&pier_flows, &p->k, &target, BPF_ANY);
	count(STAT_FLOWS);
}

/* Local destinations only: the FIB does not forward them. */
static __always_inline int is_local(struct __sk_buff *skb, const struct pkt *p)
{
	struct bpf_fib_lookup f = {};

	return fib(skb, p, &f, &p->k.src, &p->k.dst) == BPF_FIB_LKUP_RET_NOT_FWDED;
}

/* Rewrite an ICMP error about a translated flow: with outer_dst (an uplink's error about a
 * reply) the outer destination, the embedded source and source port become addr:port;
 * otherwise (the container's error about a client's packet) the outer source, the embedded
 * destination and destination port. The ICMP checksum follows every byte changed. */
static __always_inline int rewrite_icmp(struct __sk_buff *skb, const struct pkt *p,
					const struct pier_icmp_err *e, int outer_dst,
					const struct pier_addr *addr, __u16 port)
{
	struct pier_addr old = outer_dst ? p->k.dst : p->k.src, new = *addr;
	__u16 old_port = outer_dst ? e->inner.sport : e->inner.dport;
	__u32 port_off = e->inner_l4 + (outer_dst ? 0 : 2);

	if (!p->v6) {
		__u32 outer = ETH_HLEN + (outer_dst ? offsetof(struct iphdr, daddr) : offsetof(struct iphdr, saddr));
		__u32 inner = e->inner_ip + (outer_dst ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));
		__u32 inner_check = e->inner_ip + offsetof(struct iphdr, check);
		__u16 check_before, check_after;

		if (bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old.a[3], new.a[3], 4) ||
		    bpf_skb_store_bytes(skb, outer, &new.a[3], 4, 0) ||
		    bpf_skb_load_bytes(skb, inner_check, &check_before, 2) ||
		    bpf_l3_csum_replace(skb, inner_check, old.a[3], new.a[3], 4) ||
		    bpf_skb_load_bytes(skb, inner_check, &check_after, 2) ||
		    bpf_l4_csum_replace(skb, e->csum_off, check_before, check_after, 2) ||
		    bpf_l4_csum_replace(skb, e->csum_off, old.a[3], new.a[3], 4) ||
		    bpf_skb_store_bytes(skb, inner, &new.a[3], 4, 0))
			return -1;
	} else {
		__u32 outer = ETH_HLEN + (outer_dst ? offsetof(struct ipv6hdr, daddr) : offsetof(struct ipv6hdr, saddr));
		__u32 inner = e->inner_ip + (outer_dst ? offsetof(struct ipv6hdr, saddr) : offsetof(struct ipv6hdr, daddr));
		__s64 diff = bpf_csum_diff(old.a, sizeof(old), new.a, sizeof(new), 0);

		/* ICMPv6 sums a pseudo-header with the outer addresses, and the message. */
		if (bpf_l4_csum_replace(skb, e->csum_off, 0, diff, BPF_F_PSEUDO_HDR) ||
		    bpf_skb_store_bytes(skb, outer, new.a, sizeof(new), 0) ||
		    bpf_l4_csum_replace(skb, e->csum_off, 0, diff, 0) ||
		    bpf_skb_store_bytes(skb, inner, new.a, sizeof(new), 0))
			return -1;
	}
	if (bpf_l4_csum_replace(skb, e->csum_off, old_port, port, 2) ||
	    bpf_skb_store_bytes(skb, port_off, &port, sizeof(port), 0))
		return -1;
	return 0;
}

/* Sends a translated ICMP error on: to the target (outer_dst) or to the client. */
static __always_inline int forward_icmp(struct __sk_buff *skb, const struct pkt *p,
					const struct pier_icmp_err *e, int outer_dst,
					const struct pier_flow *to)
{
	struct bpf_fib_lookup f = {};
	int rc;

	if (outer_dst)
		rc = fib(skb, p, &f, &p->k.src, &to->addr);
	else
		rc = fib(skb, p, &f, &to->addr, &p->k.dst);
	if (!routable(rc) || hop(skb, p))
		return TC_ACT_OK;
	if (rewrite_icmp(skb, p, e, outer_dst, &to->addr, to->port))
		return TC_ACT_SHOT;
	count(STAT_ICMP);
	return send(skb, &f, rc, p->v6);
}

/* An ICMP error about a translated flow. On an uplink (outer_dst): about a reply (front ->
 * client), found in pier_flows, it goes to the target. On a bridge: the container's error
 * about a client's packet (client -> target), found in pier_rflows, goes to the client as
 * the front's. */
static __always_inline int icmp_error(struct __sk_buff *skb, const struct pkt *p, int outer_dst)
{
	struct pier_flow_key k;
	struct pier_flow *flow, to;
	struct pier_icmp_err e = {};

	if (!parse_icmp_error(skb, p, &e) || !same_addr(&p->k.dst, &e.inner.src))
		return TC_ACT_OK;
	k = reversed(&e.inner);
	if (outer_dst)
		flow = bpf_map_lookup_elem(&pier_flows, &k);
	else
		flow = bpf_map_lookup_elem(&pier_rflows, &k);
	if (!flow)
		return TC_ACT_OK;
	to = *flow;
	return forward_icmp(skb, p, &e, outer_dst, &to);
}

SEC("tc")
int pier_tc_in(struct __sk_buff *skb)
{
	struct bpf_fib_lookup f = {};
	struct pier_remote_target *t, target;
	struct pier_flow *flow;
	struct pkt p = {};
	int wild, rc;

	if (skb->pkt_type != PACKET_HOST || !parse_l3(skb, &p))
		return TC_ACT_OK;
	if (p.k.proto == PROTO_ICMP || p.k.proto == PROTO_ICMPV6)
		return icmp_error(skb, &p, 1);
	if (!parse_l4(skb, &p))
		return TC_ACT_OK;
	t = published(skb, &p, &wild);
	if (!t || is_v4mapped(&t->addr) == p.v6)
		return TC_ACT_OK;
	target = *t;
	flow = bpf_map_lookup_elem(&pier_flows, &p.k);
	if (!flow || !same(flow, &target)) {
		if (!p.starts || (wild && !is_local(skb, &p)))
			return TC_ACT_OK;
		flow = NULL;
	}
	rc = fib(skb, &p, &f, &p.k.src, &target.addr);
	if (!routable(rc)) {
		count(STAT_NO_ROUTE);
		return TC_ACT_OK;
	}
	if (hop(skb, &p))
		return TC_ACT_OK;
	if (!flow)
		start_flow(&p, &target);
	if (rewrite(skb, &p, 1, &target.addr, target.port))
		return TC_ACT_SHOT;
	count(STAT_IN);
	return send(skb, &f, rc, p.v6);
}

SEC("tc")
int pier_tc_reply(struct __sk_buff *skb)
{
	struct bpf_fib_lookup f = {};
	struct pier_flow *flow, front;
	struct pkt p = {};
	int rc;

	if (!parse_l3(skb, &p))
		return TC_ACT_OK;
	if (p.k.proto == PROTO_ICMP || p.k.proto == PROTO_ICMPV6)
		return icmp_error(skb, &p, 0);
	if (!parse_l4(skb, &p))
		return TC_ACT_OK;
	flow = bpf_map_lookup_elem(&pier_rflows, &p.k);
	if (!flow)
		return TC_ACT_OK;
	front = *flow;
	rc = fib(skb, &p, &f, &front.addr, &p.k.dst);
	if (!routable(rc)) {
		count(STAT_NO_ROUTE);
		return TC_ACT_OK;
	}
	if (hop(skb, &p))
		return TC_ACT_OK;
	if (rewrite(skb, &p, 0, &front.addr, front.port))
		return TC_ACT_SHOT;
	count(STAT_OUT);
	return send(skb, &f, rc, p.v6);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
