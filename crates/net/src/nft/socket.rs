//! The nfnetlink socket that carries [`wire`] batches and dumps, in the network namespace of
//! the calling thread (the socket is made there).
//!
//! Theory of operation: [`commit`] sends a whole batch in one `send`; the kernel processes a
//! batch inside that call and queues one reply per message that asked for an acknowledgement
//! (an error code, 0 for success), so the replies are read without waiting (with a one-second
//! poll as a safety net). The transaction succeeded only if every message was acknowledged
//! with 0; on a failure the kernel aborts the whole batch and the first error is reported.
//! [`dump`] lists sets one after another on one socket (a dump ends with `NLMSG_DONE` or an
//! error, after which the socket takes the next request), each set's elements until its
//! `NLMSG_DONE`; a missing table or set is `None`. A dump deletes nothing, so its socket is
//! closed at once.
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

/// Every element of each of `sets` in table `inet TABLE`, in order, `None` for a missing table
/// or set: one dump after another on one socket (one socket per listing, not per set).
pub(crate) fn dump(
    step: &'static str,
    table: &str,
    sets: &[&str],
) -> Result<Vec<Option<Vec<Elem>>>, NftError> {
    let err = |set: &str| {
        let object = format!("inet {table} {set}");
        move |source| NftError::Netlink {
            step,
            object,
            source,
        }
    };
    let sock = open().map_err(err(sets.first().copied().unwrap_or_default()))?;
    let mut buf = vec![0u8; RECV_BUF];
    let mut out = Vec::with_capacity(sets.len());
    for (seq, set) in (1..).zip(sets) {
        send_all(&sock, &wire::dump_request(table, set, seq)).map_err(err(set))?;
        out.push(dump_one(&sock, &mut buf, seq).map_err(err(set))?);
    }
    Ok(out)
}

/// Reads the replies to dump request `seq` until `NLMSG_DONE` (or its error); `None` for
/// ENOENT. Replies to another sequence number (none are expected) are skipped.
fn dump_one(sock: &OwnedFd, buf: &mut [u8], seq: u32) -> Result<Option<Vec<Elem>>, Errno> {
    let mut elems = Vec::new();
    loop {
        let n = match recv(sock.as_raw_fd(), buf, MsgFlags::empty()) {
            Err(Errno::EINTR) => continue,
            other => other?,
        };
        for (kind, _, payload) in messages(&buf[..n]).filter(|m| m.1 == seq) {
            match kind {
                wire::NLMSG_DONE => return Ok(Some(elems)),
                wire::NLMSG_ERROR => match error_code(payload) {
                    0 => {}
                    code if code == Errno::ENOENT as i32 => return Ok(None),
                    code => return Err(Errno::from_raw(code)),
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
        for (kind, _, payload) in messages(&buf[..n]) {
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

/// The netlink messages in one datagram, as (type, sequence number, payload after the
/// nlmsghdr).
fn messages(mut buf: &[u8]) -> impl Iterator<Item = (u16, u32, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(buf[..4].try_into().ok()?) as usize;
        if len < 16 || len > buf.len() {
            return None;
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        let seq = u32::from_ne_bytes(buf[8..12].try_into().ok()?);
        let payload = &buf[16..len];
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
        Some((kind, seq, payload))
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
