// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * publish.bpf.c: pier's socket-level port publishing for IPv4 clients.
 *
 * Theory of operation: the programs run in the cgroup sock_addr hooks, i.e. inside
 * connect(2), sendmsg(2), recvmsg(2), getpeername(2) and bind(2) of every process in
 * the cgroup they are attached to, before any packet exists. A published
 * (host address, host port, protocol) is one entry of the hash map `pier_publish`:
 *   connect4/sendmsg4  rewrite that destination to (container address, port), and
 *                      remember the address the client dialled in socket-local
 *                      storage (`pier_orig`, freed with the socket);
 *   getpeername4/recvmsg4  translate the container address back to the dialled one,
 *                      so the client only ever sees what it asked for;
 *   bind4              refuses (EPERM) a host program binding a published port:
 *                      the port stays reserved without any process listening.
 * Host address 0 in a key is the wildcard. It matches only destinations in
 * 127.0.0.0/8 (other host addresses are published as entries of their own), so a
 * wildcard publish of port 80 never captures a connection to a remote server.
 * Loopback matches and bind refusals apply to sockets of the host's network
 * namespace only: a container's own 127.0.0.1 and its own binds are its business.
 *
 * Byte order: addresses and ports in keys and values are in network byte order,
 * exactly as the hooks see them in struct bpf_sock_addr.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define SYS_REJECT 0
#define SYS_PROCEED 1

struct pier_key {
	__u32 addr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct pier_target {
	__u32 addr;
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pier_key);
	__type(value, struct pier_target);
} pier_publish SEC(".maps");

/* Per socket: the address the client dialled (addr/port) and where it went (target). */
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

static __always_inline int in_host_netns(struct bpf_sock_addr *ctx)
{
	return bpf_get_netns_cookie(ctx) == bpf_get_netns_cookie(NULL);
}

static __always_inline int is_loopback(__u32 addr)
{
	return (bpf_ntohl(addr) >> 24) == 127;
}

static __always_inline struct pier_target *lookup(struct bpf_sock_addr *ctx, __u32 addr,
						   __u16 port)
{
	struct pier_key key = { .addr = addr, .port = port, .proto = ctx->protocol };
	struct pier_target *t;
	int host = in_host_netns(ctx);

	if (is_loopback(addr) && !host)
		return NULL;
	t = bpf_map_lookup_elem(&pier_publish, &key);
	if (t || !is_loopback(addr))
		return t;
	key.addr = 0;
	return bpf_map_lookup_elem(&pier_publish, &key);
}

/* Rewrite the destination of ctx if it is published; remember the original. */
static __always_inline int redirect(struct bpf_sock_addr *ctx)
{
	__u32 addr = ctx->user_ip4;
	__u16 port = (__u16)ctx->user_port;
	struct pier_target *t = lookup(ctx, addr, port);
	struct pier_orig *o;

	if (!t)
		return SYS_PROCEED;
	o = bpf_sk_storage_get(&pier_orig, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (o) {
		o->dialled.addr = addr;
		o->dialled.port = port;
		o->target.addr = t->addr;
		o->target.port = t->port;
	}
	ctx->user_ip4 = t->addr;
	ctx->user_port = t->port;
	return SYS_PROCEED;
}

/* Show the dialled address where the kernel would show the container's. */
static __always_inline int translate_back(struct bpf_sock_addr *ctx)
{
	struct pier_orig *o = bpf_sk_storage_get(&pier_orig, ctx->sk, 0, 0);

	if (!o)
		return SYS_PROCEED;
	if (ctx->user_ip4 == o->target.addr && (__u16)ctx->user_port == o->target.port) {
		ctx->user_ip4 = o->dialled.addr;
		ctx->user_port = o->dialled.port;
	}
	return SYS_PROCEED;
}

SEC("cgroup/connect4")
int pier_connect4(struct bpf_sock_addr *ctx)
{
	return redirect(ctx);
}

SEC("cgroup/sendmsg4")
int pier_sendmsg4(struct bpf_sock_addr *ctx)
{
	return redirect(ctx);
}

SEC("cgroup/getpeername4")
int pier_getpeername4(struct bpf_sock_addr *ctx)
{
	return translate_back(ctx);
}

SEC("cgroup/recvmsg4")
int pier_recvmsg4(struct bpf_sock_addr *ctx)
{
	return translate_back(ctx);
}

SEC("cgroup/bind4")
int pier_bind4(struct bpf_sock_addr *ctx)
{
	struct pier_key key = { .port = (__u16)ctx->user_port, .proto = ctx->protocol };

	if (!in_host_netns(ctx) || key.port == 0)
		return SYS_PROCEED;
	key.addr = ctx->user_ip4;
	if (bpf_map_lookup_elem(&pier_publish, &key))
		return SYS_REJECT;
	/* Binding the wildcard takes the port on every address, loopback included. */
	if (key.addr == 0) {
		key.addr = bpf_htonl(0x7f000001);
		if (bpf_map_lookup_elem(&pier_publish, &key))
			return SYS_REJECT;
	} else if (is_loopback(key.addr)) {
		key.addr = 0;
		if (bpf_map_lookup_elem(&pier_publish, &key))
			return SYS_REJECT;
	}
	return SYS_PROCEED;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
