/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * pier_addr.h: the address and key layout both BPF objects share with the Rust loader
 * (crates/bpf/src/lib.rs, remote.rs), and the helpers on it.
 *
 * Addresses are 16 bytes in network byte order, IPv4 in v4-mapped form (::ffff:a.b.c.d);
 * a key is (address, port in network order, IP protocol). Include after vmlinux.h and
 * <bpf/bpf_endian.h>.
 */
#ifndef PIER_ADDR_H
#define PIER_ADDR_H

struct pier_addr {
	__u32 a[4];
};

struct pier_key {
	struct pier_addr addr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

#define V4MAPPED_WORD bpf_htonl(0x0000ffff)

static __always_inline int is_v4mapped(const struct pier_addr *a)
{
	return a->a[0] == 0 && a->a[1] == 0 && a->a[2] == V4MAPPED_WORD;
}

static __always_inline void set_v4mapped(struct pier_addr *a, __u32 ip4)
{
	a->a[0] = 0;
	a->a[1] = 0;
	a->a[2] = V4MAPPED_WORD;
	a->a[3] = ip4;
}

/* 127.0.0.0/8 (v4-mapped) or ::1. */
static __always_inline int is_loopback(const struct pier_addr *a)
{
	if (is_v4mapped(a))
		return (bpf_ntohl(a->a[3]) >> 24) == 127;
	return a->a[0] == 0 && a->a[1] == 0 && a->a[2] == 0 && a->a[3] == bpf_htonl(1);
}

#endif
