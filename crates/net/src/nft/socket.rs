//! The nfnetlink socket that carries [`wire`] batches and dumps, in the network namespace of
//! the calling thread (the socket is made there).
//!
//! Theory of operation: [`commit`] sends a whole batch in one `send`; the kernel processes a
//! batch inside that call and queues one reply per message that asked for an acknowledgement
//! (an error code, 0 for success), so the replies are read without waiting (with a one-second
//! poll as a safety net). The transaction succeeded only if every message was acknowledged
//! with 0; on a failure the kernel aborts the whole batch and the first error is reported.
//! [`dump`] reads a set's elements until `NLMSG_DONE`; a missing table or set is `None`.
//! A socket whose batch deleted something is closed by [`pier_sys::process::close_in_orphan`]:
//! releasing an nftables socket while the kernel still has committed objects to free waits
//! for an RCU grace period (`nft_rcv_nl_event`), 10-20 ms here, which would otherwise land on
//! `pier rm` and on the exit of `pier run --rm`.
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};

use super::wire::{self, Batch, Elem};
use super::NftError;

/// The largest batch the default send buffer takes (`wmem_default` less the kernel's slack).
const DEFAULT_SNDBUF: usize = 200 * 1024;
const RECV_BUF: usize = 64 * 1024;

/// Applies `batch` as one transaction.
pub(crate) fn commit(step: &'static str, object: &str, batch: Batch) -> Result<(), NftError> {
    let deletes = batch.deletes();
    let (bytes, acked) = batch.finish();
    if acked.is_empty() {
        return Ok(());
    }
    let err = |source| NftError::Netlink {
        step,
        object: object.to_string(),
        source,
    };
    let sock = open().map_err(err)?;
    let sent = send_all(&sock, &bytes).map_err(err);
    let result = sent.and_then(|()| acknowledgements(&sock, acked.len()).map_err(err));
    match deletes {
        true => pier_sys::process::close_in_orphan(sock).map_err(|e| {
            err(Errno::from_raw(
                e.raw_os_error().unwrap_or(Errno::EIO as i32),
            ))
        }),
        false => Ok(()),
    }
    .and(result)
}

/// Every element of `set` in table `inet TABLE`; `None` when the table or the set is missing.
pub(crate) fn dump(
    step: &'static str,
    table: &str,
    set: &str,
) -> Result<Option<Vec<Elem>>, NftError> {
    let err = |source| NftError::Netlink {
        step,
        object: format!("inet {table} {set}"),
        source,
    };
    let sock = open().map_err(err)?;
    send_all(&sock, &wire::dump_request(table, set, 1)).map_err(err)?;
    let mut elems = Vec::new();
    let mut buf = vec![0u8; RECV_BUF];
    loop {
        let n = match recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Err(Errno::EINTR) => continue,
            other => other.map_err(err)?,
        };
        for (kind, payload) in messages(&buf[..n]) {
            match kind {
                wire::NLMSG_DONE => return Ok(Some(elems)),
                wire::NLMSG_ERROR => match error_code(payload) {
                    0 => {}
                    code if code == Errno::ENOENT as i32 => return Ok(None),
                    code => return Err(err(Errno::from_raw(code))),
                },
                _ => elems.extend(wire::parse_elements(payload.get(4..).unwrap_or(&[]))),
            }
        }
    }
}

fn open() -> Result<OwnedFd, Errno> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    Ok(fd)
}

fn send_all(sock: &OwnedFd, bytes: &[u8]) -> Result<(), Errno> {
    if bytes.len() > DEFAULT_SNDBUF {
        setsockopt(sock, sockopt::SndBufForce, &(bytes.len() + 4096))?;
    }
    let sent = send(sock.as_raw_fd(), bytes, MsgFlags::empty())?;
    match sent == bytes.len() {
        true => Ok(()),
        false => Err(Errno::EMSGSIZE),
    }
}

/// Reads `expected` acknowledgements; the first non-zero one is the batch's error.
fn acknowledgements(sock: &OwnedFd, expected: usize) -> Result<(), Errno> {
    let mut buf = vec![0u8; RECV_BUF];
    let mut seen = 0;
    let mut first_error = None;
    while seen < expected {
        let n = match recv(sock.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => {
                let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::from(1000u16)) {
                    Ok(0) => return Err(first_error.unwrap_or(Errno::ETIMEDOUT)),
                    Ok(_) | Err(Errno::EINTR) => continue,
                    Err(e) => return Err(e),
                }
            }
            other => other?,
        };
        for (kind, payload) in messages(&buf[..n]) {
            if kind != wire::NLMSG_ERROR {
                continue;
            }
            seen += 1;
            match error_code(payload) {
                0 => {}
                code => {
                    first_error.get_or_insert(Errno::from_raw(code));
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The netlink messages in one datagram, as (type, payload after the nlmsghdr).
fn messages(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(buf[..4].try_into().ok()?) as usize;
        if len < 16 || len > buf.len() {
            return None;
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        let payload = &buf[16..len];
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
        Some((kind, payload))
    })
}

/// The positive errno of an `NLMSG_ERROR` payload (0 for an acknowledgement).
fn error_code(payload: &[u8]) -> i32 {
    let code = payload
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(-(Errno::EPROTO as i32), i32::from_ne_bytes);
    -code
}
