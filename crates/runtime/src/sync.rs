//! The socket between the runtime and the process it forked (init or exec'd process).
//!
//! Theory of operation: a `SOCK_SEQPACKET` pair, close-on-exec, keeps message boundaries and
//! reports end-of-file when the other side is gone (exited, or exec'd since the fd is CLOEXEC).
//! Messages are one tag byte and a payload:
//! - parent → child `Go(state)`: id maps written, cgroups joined, createRuntime hooks done; the
//!   payload is the OCI state JSON the container hooks get;
//! - child → parent `Created`: the init is set up and waits on the exec fifo;
//! - child → parent `Failed(text)`: the step that failed, reported by the parent.
//!
//! End-of-file after the child was told to exec means the exec succeeded.
//!
//! Privileges: none. Tests: unit tests below.
use nix::sys::socket::{recv, send, socketpair, AddressFamily, MsgFlags, SockFlag, SockType};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const GO: u8 = b'G';
const CREATED: u8 = b'C';
const FAILED: u8 = b'E';
const MAX_MESSAGE: usize = 1 << 16;

/// A message on the sync socket.
#[derive(Debug, PartialEq, Eq)]
pub enum Msg {
    /// Parent's permission to continue, with the state JSON for hooks.
    Go(Vec<u8>),
    /// The init is ready and held.
    Created,
    /// The child failed; the text names the step.
    Failed(String),
}

/// One end of the sync socket.
#[derive(Debug)]
pub struct Sync {
    fd: OwnedFd,
}

/// Creates the pair: (parent end, child end).
pub fn pair() -> io::Result<(Sync, Sync)> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    Ok((Sync { fd: a }, Sync { fd: b }))
}

impl Sync {
    /// Sends one message.
    pub fn send(&self, msg: &Msg) -> io::Result<()> {
        let mut buf = Vec::new();
        match msg {
            Msg::Go(state) => {
                buf.push(GO);
                buf.extend_from_slice(state);
            }
            Msg::Created => buf.push(CREATED),
            Msg::Failed(text) => {
                buf.push(FAILED);
                buf.extend_from_slice(&text.as_bytes()[..text.len().min(MAX_MESSAGE - 1)]);
            }
        }
        loop {
            match send(self.fd.as_raw_fd(), &buf, MsgFlags::MSG_NOSIGNAL) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => return other.map(drop).map_err(io::Error::from),
            }
        }
    }

    /// Receives one message; `None` at end-of-file.
    pub fn recv(&self) -> io::Result<Option<Msg>> {
        let mut buf = vec![0u8; MAX_MESSAGE];
        let n = loop {
            match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other?,
            }
        };
        buf.truncate(n);
        Ok(match buf.first() {
            None => None,
            Some(&GO) => Some(Msg::Go(buf.split_off(1))),
            Some(&CREATED) => Some(Msg::Created),
            Some(_) => Some(Msg::Failed(String::from_utf8_lossy(&buf[1..]).into_owned())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_eof() {
        let (a, b) = pair().unwrap();
        a.send(&Msg::Go(b"{}".to_vec())).unwrap();
        b.send(&Msg::Failed("mount /x: ENOENT".into())).unwrap();
        assert_eq!(b.recv().unwrap(), Some(Msg::Go(b"{}".to_vec())));
        assert_eq!(
            a.recv().unwrap(),
            Some(Msg::Failed("mount /x: ENOENT".into()))
        );
        b.send(&Msg::Created).unwrap();
        assert_eq!(a.recv().unwrap(), Some(Msg::Created));
        drop(b);
        assert_eq!(a.recv().unwrap(), None);
    }
}
