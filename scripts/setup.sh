#!/usr/bin/env bash
# setup.sh: make this Debian 12 machine ready to build, test and benchmark pier. Idempotent:
# installs only the Debian packages that are missing, checks the Rust toolchain, builds pier.
#
#   scripts/setup.sh            # packages + debug build (tests)
#   scripts/setup.sh --release  # packages + static release build (demo, benchmarks)
#
# Needs root (apt, and pier itself creates namespaces, mounts and cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."

# What each package is for:
#   gcc libc6-dev   the linker and glibc (static libc.a too) that cargo links with
#   busybox-static  the rootfs of test and benchmark containers
#   crun runc       peers: benchmark rows and behaviour oracles
#   libseccomp-dev pkg-config  the seccomp compiler's test oracle (dev-dependency only)
#   docker.io podman containerd  real clients that drive pier as their runtime (tests)
#   hyperfine       ad-hoc timing of whole commands
#   iproute2 util-linux procps  ip, unshare, nsenter, ps used by tests and benchmarks
#   nftables        the `nft` binary pier-net's nat engine drives
#   clang           compiles pier-bpf's C eBPF programs (-target bpf) in its build.rs
#   libbpf-dev      <bpf/bpf_helpers.h> for those programs
#   bpftool         generates vmlinux.h from the kernel's BTF in pier-bpf's build.rs
#   libelf-dev zlib1g-dev make  libbpf-sys builds its vendored libbpf with make (and pkg-config) against them
#   wrk             the load generator of `pier bench net` and `bench scale`
#   nginx libnginx-mod-stream haproxy  peer forwarders (`bench net` rows)
#   iptables        Docker-style kernel NAT rows (`bench net`, `bench scale`)
#   postgresql      `pier bench net --workload pg` (server and pgbench)
#   strace python3  tests: counting a listing's sockets (pier-net), passing a listener on fd 4 (proxy)
PACKAGES=(gcc libc6-dev busybox-static crun runc libseccomp-dev pkg-config docker.io podman containerd hyperfine
          iproute2 util-linux procps nftables clang libbpf-dev bpftool libelf-dev zlib1g-dev make
          wrk nginx libnginx-mod-stream haproxy iptables postgresql strace python3)

need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "setup: pier's setup and tests need root (namespaces, mounts, cgroups): run as root" >&2
        exit 1
    fi
}

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "setup: installing ${missing[*]}" >&2
    apt-get update -qq
    # Packages like docker.io must not start their daemons here: pier's tests start their own,
    # with private state, and leave the host's firewall untouched.
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ "$created_policy" = 1 ] && rm -f "$policy"
    return 0
}

check_rust() {
    if ! command -v cargo >/dev/null; then
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null; then
        echo "setup: cargo not found: pier needs Rust >= 1.95 (install it with rustup, then re-run)" >&2
        exit 1
    fi
    local v
    v=$(rustc --version | awk '{print $2}')
    if ! printf '1.95.0\n%s\n' "$v" | sort -V -C; then
        echo "setup: rustc $v is too old: pier needs Rust >= 1.95 (rustup update stable)" >&2
        exit 1
    fi
}

host_triple() { rustc -vV | sed -n 's/^host: //p'; }

need_root
install_packages
check_rust
if [ "${1:-}" = "--release" ]; then
    # The shipped binary is static and non-PIE: Docker and containerd run the runtime several
    # times per container (create, start, state, delete), and the dynamic loader's relocation
    # work was 0.6 ms of each run here. `--target` keeps these flags off build scripts and
    # proc-macros, which must stay dynamic. Result: target/<host triple>/release/pier.
    RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" \
        cargo build --release --locked -p pier --target "$(host_triple)"
else
    cargo build --locked --workspace --all-targets
fi
