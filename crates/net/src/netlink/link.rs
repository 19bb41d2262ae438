//! Link operations: bridge, veth, macvlan and ipvlan creation, namespace moves, up/down, MTU,
//! MAC address, bridge port flags (hairpin), deletion and lookup by name.
//!
//! The container engine's hot path uses the one-message forms: [`Netlink::create_bridge_port`]
//! makes a veth whose host side is already up and enslaved and whose peer is born inside the
//! container's namespace under its final name, and the `*_in` sublink creators make a macvlan or
//! ipvlan directly inside the target namespace, so no link is ever moved or renamed.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoBridgePort, InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoPortData, InfoPortKind,
    InfoVeth, IpVlanMode, LinkAttribute, LinkFlags, LinkInfo, LinkLayerType, LinkMessage,
    MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;

use super::Netlink;
use crate::NetError;

/// One link as [`Netlink::links`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSummary {
    pub index: u32,
    pub name: String,
    /// The link it is enslaved to (a bridge port's bridge).
    pub master: Option<u32>,
    /// Its kind (`bridge`, `veth`, ...), `None` for a physical device.
    pub kind: Option<String>,
    pub loopback: bool,
    /// Whether it carries Ethernet frames (not a tun, wireguard or other L3 device).
    pub ether: bool,
}

impl LinkSummary {
    fn from_message(link: LinkMessage) -> Self {
        let mut summary = Self {
            index: link.header.index,
            name: String::new(),
            master: None,
            kind: None,
            loopback: link.header.flags.contains(LinkFlags::Loopback),
            ether: link.header.link_layer_type == LinkLayerType::Ether,
        };
        for attr in link.attributes {
            match attr {
                LinkAttribute::IfName(name) => summary.name = name,
                LinkAttribute::Controller(master) => summary.master = Some(master),
                LinkAttribute::LinkInfo(infos) => {
                    summary.kind = infos.into_iter().find_map(|i| match i {
                        LinkInfo::Kind(kind) => Some(kind.to_string()),
                        _ => None,
                    })
                }
                _ => {}
            }
        }
        summary
    }
}

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

/// A link `name` of kind `info` on the parent link `parent`, created inside `netns` if given
/// (the parent is still looked up in the requesting namespace).
fn sublink(
    name: &str,
    info: Vec<LinkInfo>,
    parent: u32,
    netns: Option<BorrowedFd<'_>>,
) -> LinkMessage {
    let mut message = named(name, info);
    message.attributes.push(LinkAttribute::Link(parent));
    if let Some(fd) = netns {
        message
            .attributes
            .push(LinkAttribute::NetNsFd(fd.as_raw_fd()));
    }
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

    /// Creates a veth pair whose host side `name` is up and a port of the bridge `bridge`, and
    /// whose peer `peer` is created inside `peer_netns` (down), in one request.
    pub fn create_bridge_port(
        &mut self,
        name: &str,
        peer: &str,
        peer_netns: BorrowedFd<'_>,
        bridge: u32,
    ) -> Result<(), NetError> {
        let mut peer_message = LinkMessage::default();
        peer_message
            .attributes
            .push(LinkAttribute::IfName(peer.to_string()));
        peer_message
            .attributes
            .push(LinkAttribute::NetNsFd(peer_netns.as_raw_fd()));
        let info = vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_message))),
        ];
        let mut message = named(name, info);
        message.header.flags = LinkFlags::Up;
        message.header.change_mask = LinkFlags::Up;
        message.attributes.push(LinkAttribute::Controller(bridge));
        self.create("create veth", &format!("{name}/{peer}"), message)
    }

    /// Turns hairpin mode on for the bridge port `name`, so a frame the port sent can be
    /// forwarded back out of it (a container reaching itself through a DNATed host port).
    pub fn set_hairpin(&mut self, name: &str) -> Result<(), NetError> {
        let info = vec![
            LinkInfo::PortKind(InfoPortKind::Bridge),
            LinkInfo::PortData(InfoPortData::BridgePort(vec![InfoBridgePort::HairpinMode(
                true,
            )])),
        ];
        self.change(RouteNetlinkMessage::NewLink(named(name, info)), 0)
            .map_err(|e| NetError::netlink("set hairpin on", name, e))
    }

    /// Creates a macvlan `name` in bridge mode on the parent link `parent`.
    pub fn create_macvlan(&mut self, name: &str, parent: u32) -> Result<(), NetError> {
        self.create_macvlan_in(name, parent, None)
    }

    /// Creates a macvlan `name` in bridge mode on `parent` (a link of this namespace), inside
    /// `netns` when given.
    pub fn create_macvlan_in(
        &mut self,
        name: &str,
        parent: u32,
        netns: Option<BorrowedFd<'_>>,
    ) -> Result<(), NetError> {
        let info = vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(
                MacVlanMode::Bridge,
            )])),
        ];
        let message = sublink(name, info, parent, netns);
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
        self.create_ipvlan_in(name, parent, mode, None)
    }

    /// Creates an ipvlan `name` on `parent` (a link of this namespace), inside `netns` when
    /// given; a kernel without the driver gives [`NetError::IpvlanUnavailable`].
    pub fn create_ipvlan_in(
        &mut self,
        name: &str,
        parent: u32,
        mode: IpvlanMode,
        netns: Option<BorrowedFd<'_>>,
    ) -> Result<(), NetError> {
        let mode = match mode {
            IpvlanMode::L2 => IpVlanMode::L2,
            IpvlanMode::L3 => IpVlanMode::L3,
        };
        let info = vec![
            LinkInfo::Kind(InfoKind::IpVlan),
            LinkInfo::Data(InfoData::IpVlan(vec![InfoIpVlan::Mode(mode)])),
        ];
        let message = sublink(name, info, parent, netns);
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

    /// Sets the MAC address of link `index`. A bridge given its address this way keeps it
    /// (the kernel otherwise takes the lowest port's, changing the gateway's MAC under the
    /// containers' ARP caches each time a port joins or leaves).
    pub fn set_mac(&mut self, index: u32, mac: [u8; 6]) -> Result<(), NetError> {
        let mut message = indexed(index);
        message
            .attributes
            .push(LinkAttribute::Address(mac.to_vec()));
        self.set("set mac address", index, message)
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

    /// Deletes the link called `name` if it exists; returns whether it did (idempotent teardown).
    pub fn delete_link_named(&mut self, name: &str) -> Result<bool, NetError> {
        let Some(index) = self.link_index(name)? else {
            return Ok(false);
        };
        match self.change(RouteNetlinkMessage::DelLink(indexed(index)), 0) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(Errno::ENODEV as i32) => Ok(false),
            Err(e) => Err(NetError::netlink("delete link", name, e)),
        }
    }

    /// The name of link `index`, or `None` when there is no such link.
    pub fn link_name(&mut self, index: u32) -> Result<Option<String>, NetError> {
        match self.request(RouteNetlinkMessage::GetLink(indexed(index)), NLM_F_ACK) {
            Ok(answers) => Ok(answers.into_iter().find_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => {
                    link.attributes.into_iter().find_map(|attr| match attr {
                        LinkAttribute::IfName(name) => Some(name),
                        _ => None,
                    })
                }
                _ => None,
            })),
            Err(e) if e.raw_os_error() == Some(Errno::ENODEV as i32) => Ok(None),
            Err(e) => Err(NetError::netlink("get link", format!("link #{index}"), e)),
        }
    }

    /// Every link of this namespace, with its master (a bridge port's bridge) and kind.
    pub fn links(&mut self) -> Result<Vec<LinkSummary>, NetError> {
        let answers = self
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
            .map_err(|e| NetError::netlink("list links", "all links", e))?;
        Ok(answers
            .into_iter()
            .filter_map(|answer| match answer {
                RouteNetlinkMessage::NewLink(link) => Some(LinkSummary::from_message(link)),
                _ => None,
            })
            .collect())
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
