//! Handing the user-notification listener fd to the seccomp agent at `listenerPath`.
//!
//! Theory of operation (OCI runtime spec, "seccomp"): the runtime connects to the UNIX stream
//! socket at `listenerPath` and sends one message whose payload is the container process state
//! (`ContainerProcessState` JSON) and whose SCM_RIGHTS control message carries the listener
//! fd. The agent then answers notifications on that fd; pier does not keep it.
//! Privileges: whatever the socket's permissions ask. Tests: tests/priv_load.rs.
use crate::Error;
use nix::sys::socket::{
    connect, sendmsg, socket, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr,
};
use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

pub(crate) fn send_to_listener(
    path: &Path,
    fd: BorrowedFd<'_>,
    state_json: &[u8],
) -> Result<(), Error> {
    let connect_err = |source| Error::ListenerConnect {
        path: path.to_owned(),
        source,
    };
    let sock = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(connect_err)?;
    let addr = UnixAddr::new(path).map_err(connect_err)?;
    connect(sock.as_raw_fd(), &addr).map_err(connect_err)?;
    let fds = [fd.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [IoSlice::new(state_json)];
    let sent = sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None).map_err(
        |source| Error::ListenerSend {
            path: path.to_owned(),
            source,
        },
    )?;
    if sent != state_json.len() {
        return Err(Error::ListenerSend {
            path: path.to_owned(),
            source: nix::Error::EMSGSIZE,
        });
    }
    Ok(())
}
