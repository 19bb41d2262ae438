//! A synchronous rtnetlink handle: typed requests for links, addresses and routes.
//!
//! Theory of operation: [`Netlink`] owns one `NETLINK_ROUTE` socket (netlink-sys) and builds
//! messages with netlink-packet-route, as netavark and youki do, without an async runtime. Every
//! request carries `NLM_F_ACK` and a fresh sequence number; [`Netlink::request`] reads datagrams
//! until the kernel's ACK (an error message with code 0), an error (errno kept), or the end of a
//! dump. A netlink socket acts in the network namespace it was opened in, so to work inside a
//! container's namespace open the handle inside [`crate::netns::NetNs::run`].
//! Privileges: `CAP_NET_ADMIN` in the namespace for every change; dumps need none.
//! Tests: crates/net/tests/priv_net.rs.
mod addr;
mod link;
mod route;

use std::io;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

pub use link::{IpvlanMode, LinkSummary};
pub use route::Route;

use crate::NetError;

/// An rtnetlink socket bound in the network namespace of the thread that opened it.
#[derive(Debug)]
pub struct Netlink {
    socket: Socket,
    sequence: u32,
}

impl Netlink {
    /// Opens a `NETLINK_ROUTE` socket in the calling thread's network namespace.
    pub fn open() -> Result<Self, NetError> {
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(NetError::Socket)?;
        socket.bind_auto().map_err(NetError::Socket)?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(NetError::Socket)?;
        socket.set_ext_ack(true).map_err(NetError::Socket)?;
        Ok(Self {
            socket,
            sequence: 0,
        })
    }

    /// Sends one change request and waits for the kernel's acknowledgement.
    fn change(&mut self, message: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        self.request(message, flags | NLM_F_ACK).map(drop)
    }

    /// Sends a dump request and collects every message of the answer.
    fn dump(&mut self, message: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.request(message, NLM_F_DUMP)
    }

    /// Sends `message` and reads the answer up to its ACK, error or `NLMSG_DONE`.
    fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
        packet.finalize();
        let mut buffer = vec![0; packet.buffer_len()];
        packet.serialize(&mut buffer);
        self.socket.send(&buffer, 0)?;
        let mut answers = Vec::new();
        while !self.read_reply(&mut answers)? {}
        Ok(answers)
    }

    /// Reads one datagram; true when it ended the exchange.
    fn read_reply(&mut self, answers: &mut Vec<RouteNetlinkMessage>) -> io::Result<bool> {
        let (datagram, _) = self.socket.recv_from_full()?;
        let mut offset = 0;
        while offset < datagram.len() {
            let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram[offset..])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let length = message.header.length as usize;
            offset += length.max(1).next_multiple_of(4);
            if message.header.sequence_number != self.sequence {
                continue;
            }
            match message.payload {
                NetlinkPayload::InnerMessage(inner) => answers.push(inner),
                NetlinkPayload::Error(error) if error.code.is_some() => return Err(error.to_io()),
                NetlinkPayload::Error(_) | NetlinkPayload::Done(_) => return Ok(true),
                _ => {}
            }
        }
        Ok(false)
    }
}
