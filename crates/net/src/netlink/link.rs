//! Link operations: bridge, veth, macvlan and ipvlan creation, namespace moves, up/down, MTU,
//! deletion and lookup by name.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoVeth, IpVlanMode, LinkAttribute, LinkFlags,
    LinkInfo, LinkMessage, MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use super::Netlink;
use crate::NetError;

/// The ipvlan modes pier offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpvlanMode {
    L2,
    L3,
}

fn named(name: &str, info: Vec<LinkInfo>) -> LinkMessage {
    let mut message = LinkMessage::default();
    message
        .attributes
        .push(LinkAttribute::IfName(name.to_string()));
    message.attributes.push(LinkAttribute::LinkInfo(info));
    message
}

fn indexed(index: u32) -> LinkMessage {
    let mut message = LinkMessage::default();
    message.header.index = index;
    message
}

/// Whether an ipvlan creation error means the kernel has no ipvlan driver at all.
fn ipvlan_missing(error: &io::Error) -> bool {
    let errno = error.raw_os_error().map(Errno::from_raw);
    matches!(errno, Some(Errno::EOPNOTSUPP | Errno::ENODEV))
}

impl Netlink {
    fn create(
        &mut self,
        op: &'static str,
        name: &str,
        message: LinkMessage,
    ) -> Result<(), NetError> {
        self.change(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| NetError::netlink(op, name, e))
    }

    fn set(&mut self, op: &'static str, index: u32, message: LinkMessage) -> Result<(), NetError> {
        self.change(RouteNetlinkMessage::SetLink(message), 0)
            .map_err(|e| NetError::netlink(op, format!("link #{index}"), e))
    }

    /// Creates a bridge `name` (down).
    pub fn create_bridge(&mut self, name: &str) -> Result<(), NetError> {
        let message = named(name, vec![LinkInfo::Kind(InfoKind::Bridge)]);
        self.create("create bridge", name, message)
    }

    /// Creates a veth pair `name` <-> `peer`; the peer is created directly in the namespace
    /// `peer_netns` when given (no later move, no name clash with the host).
    pub fn create_veth(
        &mut self,
        name: &str,
        peer: &str,
        peer_netns: Option<BorrowedFd<'_>>,
    ) -> Result<(), NetError> {
        let mut peer_message = LinkMessage::default();
        peer_message
            .attributes
            .push(LinkAttribute::IfName(peer.to_string()));
        if let Some(fd) = peer_netns {
            peer_message
                .attributes
                .push(LinkAttribute::NetNsFd(fd.as_raw_fd()));
        }
        let info = vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_message))),
        ];
        self.create("create veth", &format!("{name}/{peer}"), named(name, info))
    }

    /// Creates a macvlan `name` in bridge mode on the parent link `parent`.
    pub fn create_macvlan(&mut self, name: &str, parent: u32) -> Result<(), NetError> {
        let info = vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(
                MacVlanMode::Bridge,
            )])),
        ];
        let mut message = named(name, info);
        message.attributes.push(LinkAttribute::Link(parent));
        self.create("create macvlan", name, message)
    }

    /// Creates an ipvlan `name` on `parent`; a kernel without the driver gives
    /// [`NetError::IpvlanUnavailable`].
    pub fn create_ipvlan(
        &mut self,
        name: &str,
        parent: u32,
        mode: IpvlanMode,
    ) -> Result<(), NetError> {
        let mode = match mode {
            IpvlanMode::L2 => IpVlanMode::L2,
            IpvlanMode::L3 => IpVlanMode::L3,
        };
        let info = vec![
            LinkInfo::Kind(InfoKind::IpVlan),
            LinkInfo::Data(InfoData::IpVlan(vec![InfoIpVlan::Mode(mode)])),
        ];
        let mut message = named(name, info);
        message.attributes.push(LinkAttribute::Link(parent));
        self.change(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| match ipvlan_missing(&e) {
            true => NetError::IpvlanUnavailable,
            false => NetError::netlink("create ipvlan", name, e),
        })
    }

    /// Moves link `index` into the network namespace `netns`.
    pub fn move_to_netns(&mut self, index: u32, netns: BorrowedFd<'_>) -> Result<(), NetError> {
        let mut message = indexed(index);
        message
            .attributes
            .push(LinkAttribute::NetNsFd(netns.as_raw_fd()));
        self.set("move to netns", index, message)
    }

    /// Sets link `index` administratively up or down.
    pub fn set_up(&mut self, index: u32, up: bool) -> Result<(), NetError> {
        let mut message = indexed(index);
        message.header.change_mask = LinkFlags::Up;
        message.header.flags = if up {
            LinkFlags::Up
        } else {
            LinkFlags::empty()
        };
        self.set(if up { "set up" } else { "set down" }, index, message)
    }

    /// Sets the MTU of link `index`.
    pub fn set_mtu(&mut self, index: u32, mtu: u32) -> Result<(), NetError> {
        let mut message = indexed(index);
        message.attributes.push(LinkAttribute::Mtu(mtu));
        self.set("set mtu", index, message)
    }

    /// Attaches link `index` to the bridge `bridge` (its master).
    pub fn set_master(&mut self, index: u32, bridge: u32) -> Result<(), NetError> {
        let mut message = indexed(index);
        message.attributes.push(LinkAttribute::Controller(bridge));
        self.set("set master", index, message)
    }

    /// Deletes link `index` (a veth takes its peer with it).
    pub fn delete_link(&mut self, index: u32) -> Result<(), NetError> {
        self.change(RouteNetlinkMessage::DelLink(indexed(index)), 0)
            .map_err(|e| NetError::netlink("delete link", format!("link #{index}"), e))
    }

    /// The index of the link called `name`, or `None` when there is no such link.
    pub fn link_index(&mut self, name: &str) -> Result<Option<u32>, NetError> {
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(name.to_string()));
        match self.request(RouteNetlinkMessage::GetLink(message), NLM_F_ACK) {
            Ok(answers) => Ok(answers.into_iter().find_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => Some(link.header.index),
                _ => None,
            })),
            Err(e) if e.raw_os_error() == Some(Errno::ENODEV as i32) => Ok(None),
            Err(e) => Err(NetError::netlink("get link", name, e)),
        }
    }
}
