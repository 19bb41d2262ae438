// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * publish.bpf.c: pier's socket-level port publishing for IPv4 and IPv6 clients.
 *
 * Theory of operation: the programs run in the cgroup sock_addr hooks, i.e. inside
 * connect(2), sendmsg(2), recvmsg(2), getpeername(2) and bind(2) of every process in
 * the cgroup they are attached to, before any packet exists. A published
 * (host address, host port, protocol) is one entry of the hash map `pier_publish`:
 *   connect4/6, sendmsg4/6  rewrite that destination to (container address, port),
 *                      and remember the address the client dialled in socket-local
 *                      storage (`pier_orig`, freed with the socket);
 *   getpeername4/6, recvmsg4/6  translate the container address back to the dialled
 *                      one, so the client only ever sees what it asked for;
 *   bind4/6            refuse (EPERM) a host program binding a published port:
 *                      the port stays reserved without any process listening.
 * Addresses are 16 bytes everywhere, IPv4 ones in their v4-mapped form
 * (::ffff:a.b.c.d). That is also what a dual-stack IPv6 socket dials for an IPv4
 * peer, so an IPv6 client (::1) reaches an IPv4-only container through the same
 * entry. An IPv4 socket cannot reach an IPv6 target: such entries do not match it.
 * Kernel limit: an unconnected IPv6 UDP socket whose sendmsg6 is rewritten to a
 * v4-mapped target gets ENOTSUPP from the kernel; connected UDP (connect6) works.
 * The all-zero host address in a key is the wildcard. It matches only loopback
 * destinations (127.0.0.0/8, ::1; other host addresses are published as entries of
 * their own), so a wildcard publish of port 80 never captures a connection to a
 * remote server. A bind of the wildcard address is refused when the port is
 * published on the wildcard or on loopback (not for other specific addresses).
 * Who is served: sockets of the host's network namespace (the one whose cookie the
 * loader wrote into entry 0 of `pier_config`: the namespace pier runs in, or the
 * initial one when 0), and sockets of a registered client namespace: an entry of the
 * hash map `pier_clients`, keyed by netns cookie, whose value lists the networks the
 * container is on (address and mask, v4-mapped for IPv4; an all-zero mask is an empty
 * slot). A client's connect/sendmsg is rewritten only when the published target lies
 * on one of its networks: same bridge, so routable directly and allowed by pier's
 * isolation; a target elsewhere is left to the nat engine's DNAT, which applies the
 * isolation rules. A client's loopback and unspecified addresses are its own (no
 * wildcard match, no exact match either). bind4/6 guard the host's namespace only: a
 * container's binds are its business. Every other namespace (a neighbour's, another
 * runtime's container, a container pier has not registered) is left alone entirely:
 * it may have no route to the target. Cookies are never reused while the kernel runs,
 * so a stale `pier_clients` entry can match nothing; `netns_ino` in it lets pier's gc
 * tell whose namespace is gone. getpeername/recvmsg translate back exactly the sockets
 * connect/sendmsg rewrote (their socket storage), whichever namespace they are in.
 * `pier_owner` is not read by the programs: it names, per published key, the
 * container that published it, so a conflicting publish can say whose port it is.
 *
 * Byte order: addresses and ports in keys and values are in network byte order,
 * exactly as the hooks see them in struct bpf_sock_addr; cookies (keys of
 * `pier_clients`, entry 0 of `pier_config`) and `netns_ino` in host order.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "pier_addr.h"

#define SYS_REJECT 0
#define SYS_PROCEED 1

struct pier_target {
	struct pier_addr addr;
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pier_key);
	__type(value, struct pier_target);
} pier_publish SEC(".maps");

/* Which container published a key (userspace bookkeeping, 64-byte id). */
struct pier_owner_id {
	char id[64];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pier_key);
	__type(value, struct pier_owner_id);
} pier_owner SEC(".maps");

/* Entry 0: the host network namespace's cookie, written by the loader (0: the initial one). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} pier_config SEC(".maps");

/* A network a client namespace is on: addr & mask == addr; an all-zero mask is an empty slot. */
struct pier_subnet {
	struct pier_addr addr;
	struct pier_addr mask;
};

#define PIER_CLIENT_SUBNETS 4

/* A registered client namespace (a container's): its networks, and its netns inode for gc. */
struct pier_client {
	struct pier_subnet nets[PIER_CLIENT_SUBNETS];
	__u64 netns_ino;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pier_client);
} pier_clients SEC(".maps");

/* Per socket: the address the client dialled and where it went instead. */
struct pier_orig {
	struct pier_target dialled;
	struct pier_target target;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct pier_orig);
} pier_orig SEC(".maps");

static __always_inline __u64 host_netns(void)
{
	__u32 zero = 0;
	__u64 *configured = bpf_map_lookup_elem(&pier_config, &zero);

	if (configured && *configured)
		return *configured;
	return bpf_get_netns_cookie(NULL);
}

static __always_inline int in_host_netns(struct bpf_sock_addr *ctx)
{
	return bpf_get_netns_cookie(ctx) == host_netns();
}

static __always_inline int is_any(const struct pier_addr *a)
{
	return (a->a[0] | a->a[1] | a->a[2] | a->a[3]) == 0 || (is_v4mapped(a) && a->a[3] == 0);
}

/*
 * The hooks' address as a 16-byte address (v4-mapped for an IPv4 hook). The kernel
 * allows user_ip4 only in *4 hooks and user_ip6 only in *6 hooks, so the family is a
 * compile-time constant of each program (v6), never read from the context.
 */
static __always_inline void user_addr(struct bpf_sock_addr *ctx, int v6, struct pier_addr *a)
{
	if (!v6) {
		set_v4mapped(a, ctx->user_ip4);
		return;
	}
	a->a[0] = ctx->user_ip6[0];
	a->a[1] = ctx->user_ip6[1];
	a->a[2] = ctx->user_ip6[2];
	a->a[3] = ctx->user_ip6[3];
}

/* Write a into the context; an IPv4 socket takes only v4-mapped addresses. */
static __always_inline int set_user_addr(struct bpf_sock_addr *ctx, int v6,
					 const struct pier_addr *a)
{
	if (!v6) {
		if (!is_v4mapped(a))
			return 0;
		ctx->user_ip4 = a->a[3];
		return 1;
	}
	ctx->user_ip6[0] = a->a[0];
	ctx->user_ip6[1] = a->a[1];
	ctx->user_ip6[2] = a->a[2];
	ctx->user_ip6[3] = a->a[3];
	return 1;
}

static __always_inline int same(const struct pier_addr *x, const struct pier_addr *y)
{
	return x->a[0] == y->a[0] && x->a[1] == y->a[1] && x->a[2] == y->a[2] && x->a[3] == y->a[3];
}

static __always_inline int in_subnet(const struct pier_subnet *n, const struct pier_addr *a)
{
	const __u32 *m = n->mask.a;

	return (m[0] | m[1] | m[2] | m[3]) != 0 && (a->a[0] & m[0]) == n->addr.a[0] &&
	       (a->a[1] & m[1]) == n->addr.a[1] && (a->a[2] & m[2]) == n->addr.a[2] &&
	       (a->a[3] & m[3]) == n->addr.a[3];
}

static __always_inline int on_client_network(const struct pier_client *c, const struct pier_addr *a)
{
	for (int i = 0; i < PIER_CLIENT_SUBNETS; i++)
		if (in_subnet(&c->nets[i], a))
			return 1;
	return 0;
}

/* A registered container's connection: exact entries only, targets on its own networks only. */
static __always_inline struct pier_target *lookup_client(const struct pier_client *c,
							  struct pier_key *key)
{
	struct pier_target *t;

	if (is_loopback(&key->addr) || is_any(&key->addr))
		return NULL;
	t = bpf_map_lookup_elem(&pier_publish, key);
	return t && on_client_network(c, &t->addr) ? t : NULL;
}

static __always_inline struct pier_target *lookup(struct bpf_sock_addr *ctx,
						   const struct pier_addr *addr, __u16 port)
{
	struct pier_key key = { .addr = *addr, .port = port, .proto = ctx->protocol };
	__u64 cookie = bpf_get_netns_cookie(ctx);
	struct pier_client *client;
	struct pier_target *t;

	if (cookie != host_netns()) {
		client = bpf_map_lookup_elem(&pier_clients, &cookie);
		return client ? lookup_client(client, &key) : NULL;
	}
	t = bpf_map_lookup_elem(&pier_publish, &key);
	if (t || !is_loopback(addr))
		return t;
	__builtin_memset(&key.addr, 0, sizeof(key.addr));
	return bpf_map_lookup_elem(&pier_publish, &key);
}

/* Rewrite the destination of ctx if it is published; remember the original. */
static __always_inline int redirect(struct bpf_sock_addr *ctx, int v6)
{
	struct pier_addr addr = {};
	__u16 port = (__u16)ctx->user_port;
	struct pier_target *t;
	struct pier_orig *o;

	user_addr(ctx, v6, &addr);
	t = lookup(ctx, &addr, port);
	if (!t || (!v6 && !is_v4mapped(&t->addr)))
		return SYS_PROCEED;
	o = bpf_sk_storage_get(&pier_orig, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (o) {
		o->dialled.addr = addr;
		o->dialled.port = port;
		o->target.addr = t->addr;
		o->target.port = t->port;
	}
	set_user_addr(ctx, v6, &t->addr);
	ctx->user_port = t->port;
	return SYS_PROCEED;
}

/* Show the dialled address where the kernel would show the container's. */
static __always_inline int translate_back(struct bpf_sock_addr *ctx, int v6)
{
	struct pier_orig *o = bpf_sk_storage_get(&pier_orig, ctx->sk, 0, 0);
	struct pier_addr addr = {};

	if (!o)
		return SYS_PROCEED;
	user_addr(ctx, v6, &addr);
	if (same(&addr, &o->target.addr) && (__u16)ctx->user_port == o->target.port &&
	    set_user_addr(ctx, v6, &o->dialled.addr))
		ctx->user_port = o->dialled.port;
	return SYS_PROCEED;
}

static __always_inline int published(struct pier_key *key)
{
	return bpf_map_lookup_elem(&pier_publish, key) != NULL;
}

/* Refuse binding a published port in the host's network namespace. */
static __always_inline int guard_bind(struct bpf_sock_addr *ctx, int v6)
{
	struct pier_key key = { .port = (__u16)ctx->user_port, .proto = ctx->protocol };
	int any;

	if (key.port == 0 || !in_host_netns(ctx))
		return SYS_PROCEED;
	user_addr(ctx, v6, &key.addr);
	any = is_any(&key.addr);
	if (any)
		__builtin_memset(&key.addr, 0, sizeof(key.addr));
	if (published(&key))
		return SYS_REJECT;
	if (any) {
		/* The wildcard takes the port on loopback too, both families if dual-stack. */
		set_v4mapped(&key.addr, bpf_htonl(0x7f000001));
		if (published(&key))
			return SYS_REJECT;
		__builtin_memset(&key.addr, 0, sizeof(key.addr));
		key.addr.a[3] = bpf_htonl(1);
		return published(&key) ? SYS_REJECT : SYS_PROCEED;
	}
	if (is_loopback(&key.addr)) {
		__builtin_memset(&key.addr, 0, sizeof(key.addr));
		return published(&key) ? SYS_REJECT : SYS_PROCEED;
	}
	return SYS_PROCEED;
}

SEC("cgroup/connect4")
int pier_connect4(struct bpf_sock_addr *ctx)
{
	return redirect(ctx, 0);
}

SEC("cgroup/connect6")
int pier_connect6(struct bpf_sock_addr *ctx)
{
	return redirect(ctx, 1);
}

SEC("cgroup/sendmsg4")
int pier_sendmsg4(struct bpf_sock_addr *ctx)
{
	return redirect(ctx, 0);
}

SEC("cgroup/sendmsg6")
int pier_sendmsg6(struct bpf_sock_addr *ctx)
{
	return redirect(ctx, 1);
}

SEC("cgroup/getpeername4")
int pier_getpeername4(struct bpf_sock_addr *ctx)
{
	return translate_back(ctx, 0);
}

SEC("cgroup/getpeername6")
int pier_getpeername6(struct bpf_sock_addr *ctx)
{
	return translate_back(ctx, 1);
}

SEC("cgroup/recvmsg4")
int pier_recvmsg4(struct bpf_sock_addr *ctx)
{
	return translate_back(ctx, 0);
}

SEC("cgroup/recvmsg6")
int pier_recvmsg6(struct bpf_sock_addr *ctx)
{
	return translate_back(ctx, 1);
}

SEC("cgroup/bind4")
int pier_bind4(struct bpf_sock_addr *ctx)
{
	return guard_bind(ctx, 0);
}

SEC("cgroup/bind6")
int pier_bind6(struct bpf_sock_addr *ctx)
{
	return guard_bind(ctx, 1);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
