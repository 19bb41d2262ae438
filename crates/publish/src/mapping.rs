//! Docker's `-p` syntax: `[HOST_IP:][HOST_PORT[-END]:]CONTAINER_PORT[-END][/tcp|/udp|/sctp]`.
//!
//! Theory of operation: the protocol suffix is split off at the last `/`; a leading `[` starts an
//! IPv6 host address that runs to the matching `]`; the rest splits at `:` into one part (the
//! container ports), two (host ports, container ports) or three (host address, host ports that
//! may be empty, container ports). More colons without brackets can only be an unbracketed IPv6
//! address, which is refused with a hint. An empty or missing host port means "pick a free one"
//! (`host_ports == None`). Ranges stay ranges ([`PortRange`], inclusive, never empty) and a host
//! range must have as many ports as its container range. Every error names the whole
//! specification and the part that is wrong.
//!
//! Privileges: none. Tests: below (every form and error, and a Display/parse round trip).
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// The transport protocol of a published port.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The lowercase name Docker uses (`tcp`, `udp`, `sctp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = MappingError;
    fn from_str(s: &str) -> Result<Self, MappingError> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            "sctp" => Ok(Protocol::Sctp),
            _ => Err(MappingError::Protocol {
                spec: s.to_string(),
                value: s.to_string(),
            }),
        }
    }
}

/// An inclusive, non-empty range of ports in 1..=65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PortRange {
    start: u16,
    end: u16,
}

impl PortRange {
    /// The range `start..=end`; `None` when a port is 0 or `end < start`.
    pub fn new(start: u16, end: u16) -> Option<Self> {
        (start >= 1 && start <= end).then_some(Self { start, end })
    }
    /// A range of one port; `None` for port 0.
    pub fn single(port: u16) -> Option<Self> {
        Self::new(port, port)
    }
    pub fn start(self) -> u16 {
        self.start
    }
    pub fn end(self) -> u16 {
        self.end
    }
    /// How many ports the range holds (1..=65535).
    pub fn len(self) -> u32 {
        u32::from(self.end - self.start) + 1
    }
    /// Never true: a range holds at least one port (here for clippy's `len_without_is_empty`).
    pub fn is_empty(self) -> bool {
        false
    }
    /// The ports, lazily.
    pub fn iter(self) -> std::ops::RangeInclusive<u16> {
        self.start..=self.end
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

/// One `-p` argument: which host address and ports forward to which container ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PortMapping {
    /// The host address to listen on; `None` is every address.
    pub host_ip: Option<IpAddr>,
    /// The host ports; `None` means "pick a free one" (host port 0).
    pub host_ports: Option<PortRange>,
    pub container_ports: PortRange,
    pub protocol: Protocol,
}

impl PortMapping {
    /// The (host port, container port) pairs, lazily; host port 0 when it is to be picked.
    pub fn pairs(&self) -> impl Iterator<Item = (u16, u16)> + '_ {
        let host = self.host_ports;
        self.container_ports.iter().enumerate().map(move |(i, c)| {
            // Parsing guarantees equal lengths, so the offset stays inside the host range.
            let h = host.map_or(0, |h| h.start() + i as u16);
            (h, c)
        })
    }
}

/// Why a `-p` specification does not parse; each names the specification and the bad part.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MappingError {
    #[error("-p {spec}: the container port is missing")]
    MissingContainerPort { spec: String },
    #[error("-p {spec}: {role} port {value:?} is not a number in 1..=65535")]
    Port {
        spec: String,
        role: &'static str,
        value: String,
    },
    #[error("-p {spec}: {role} range {value} ends before it starts")]
    ReversedRange {
        spec: String,
        role: &'static str,
        value: String,
    },
    #[error("-p {spec}: host range has {host} ports, container range {container}")]
    RangeLengths {
        spec: String,
        host: u32,
        container: u32,
    },
    #[error("-p {spec}: protocol {value:?} is not tcp, udp or sctp")]
    Protocol { spec: String, value: String },
    #[error("-p {spec}: host address {value:?} is not an IP address")]
    HostIp { spec: String, value: String },
    #[error("-p {spec}: an IPv6 host address must be in brackets, as in [::1]:8080:80")]
    UnbracketedIpv6 { spec: String },
    #[error("-p {spec}: the bracketed host address must be followed by \":PORT:\"")]
    AfterBracket { spec: String },
}

impl FromStr for PortMapping {
    type Err = MappingError;
    fn from_str(spec: &str) -> Result<Self, MappingError> {
        let (ports, protocol) = match spec.rsplit_once('/') {
            Some((ports, proto)) => (ports, parse_protocol(spec, proto)?),
            None => (spec, Protocol::Tcp),
        };
        let (host_ip, host, container) = split_parts(spec, ports)?;
        let container_ports = parse_range(spec, "container", container)?;
        let host_ports = match host {
            Some(h) if !h.is_empty() => Some(parse_range(spec, "host", h)?),
            _ => None,
        };
        if let Some(h) = host_ports {
            if h.len() != container_ports.len() {
                return Err(MappingError::RangeLengths {
                    spec: spec.to_string(),
                    host: h.len(),
                    container: container_ports.len(),
                });
            }
        }
        Ok(PortMapping {
            host_ip,
            host_ports,
            container_ports,
            protocol,
        })
    }
}

fn parse_protocol(spec: &str, proto: &str) -> Result<Protocol, MappingError> {
    proto.parse().map_err(|_| MappingError::Protocol {
        spec: spec.to_string(),
        value: proto.to_string(),
    })
}

/// Splits `ports` into (host address, host ports, container ports).
fn split_parts<'a>(
    spec: &str,
    ports: &'a str,
) -> Result<(Option<IpAddr>, Option<&'a str>, &'a str), MappingError> {
    if let Some(rest) = ports.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or_else(|| MappingError::HostIp {
            spec: spec.to_string(),
            value: ports.to_string(),
        })?;
        let after = after.strip_prefix(':').ok_or(MappingError::AfterBracket {
            spec: spec.to_string(),
        })?;
        let (host, container) = after.split_once(':').ok_or(MappingError::AfterBracket {
            spec: spec.to_string(),
        })?;
        return Ok((Some(parse_ip(spec, ip)?), Some(host), container));
    }
    let parts: Vec<&str> = ports.split(':').collect();
    match parts.as_slice() {
        [container] => Ok((None, None, container)),
        [host, container] => Ok((None, Some(host), container)),
        [ip, host, container] => Ok((Some(parse_ip(spec, ip)?), Some(host), container)),
        _ => Err(MappingError::UnbracketedIpv6 {
            spec: spec.to_string(),
        }),
    }
}

fn parse_ip(spec: &str, ip: &str) -> Result<IpAddr, MappingError> {
    ip.parse().map_err(|_| MappingError::HostIp {
        spec: spec.to_string(),
        value: ip.to_string(),
    })
}

fn parse_range(spec: &str, role: &'static str, text: &str) -> Result<PortRange, MappingError> {
    if text.is_empty() && role == "container" {
        return Err(MappingError::MissingContainerPort {
            spec: spec.to_string(),
        });
    }
    let (start, end) = match text.split_once('-') {
        Some((s, e)) => (parse_port(spec, role, s)?, parse_port(spec, role, e)?),
        None => {
            let p = parse_port(spec, role, text)?;
            (p, p)
        }
    };
    PortRange::new(start, end).ok_or_else(|| MappingError::ReversedRange {
        spec: spec.to_string(),
        role,
        value: text.to_string(),
    })
}

fn parse_port(spec: &str, role: &'static str, text: &str) -> Result<u16, MappingError> {
    let bad = || MappingError::Port {
        spec: spec.to_string(),
        role,
        value: text.to_string(),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match text.parse::<u16>() {
        Ok(p) if p >= 1 => Ok(p),
        _ => Err(bad()),
    }
}

impl fmt::Display for PortMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host_ip {
            Some(IpAddr::V6(ip)) => write!(f, "[{ip}]:")?,
            Some(IpAddr::V4(ip)) => write!(f, "{ip}:")?,
            None => {}
        }
        match (self.host_ip, self.host_ports) {
            (_, Some(h)) => write!(f, "{h}:")?,
            (Some(_), None) => f.write_str(":")?,
            (None, None) => {}
        }
        write!(f, "{}/{}", self.container_ports, self.protocol)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> PortMapping {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        s.parse::<PortMapping>().unwrap_err().to_string()
    }

    fn r(a: u16, b: u16) -> PortRange {
        PortRange::new(a, b).unwrap()
    }

    #[test]
    fn container_port_only_picks_a_host_port() {
        let m = p("80");
        assert_eq!(m.host_ip, None);
        assert_eq!(m.host_ports, None);
        assert_eq!(m.container_ports, r(80, 80));
        assert_eq!(m.protocol, Protocol::Tcp);
        assert_eq!(m.pairs().collect::<Vec<_>>(), vec![(0, 80)]);
    }

    #[test]
    fn host_and_container_ports() {
        let m = p("8080:80/udp");
        assert_eq!(m.host_ports, Some(r(8080, 8080)));
        assert_eq!(m.protocol, Protocol::Udp);
        assert_eq!(p("8080:80/SCTP").protocol, Protocol::Sctp);
    }

    #[test]
    fn ipv4_host_address_with_and_without_host_port() {
        let m = p("127.0.0.1:8080:80");
        assert_eq!(m.host_ip, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(m.host_ports, Some(r(8080, 8080)));
        let m = p("127.0.0.1::80");
        assert_eq!(m.host_ports, None);
        assert_eq!(m.to_string(), "127.0.0.1::80/tcp");
    }

    #[test]
    fn bracketed_ipv6_host_address() {
        let m = p("[::1]:8080:80");
        assert_eq!(m.host_ip, Some("::1".parse().unwrap()));
        assert_eq!(m.to_string(), "[::1]:8080:80/tcp");
        assert_eq!(p("[fe80::1]::53/udp").host_ports, None);
    }

    #[test]
    fn equal_ranges_expand_lazily_in_pairs() {
        let m = p("8000-8002:9000-9002");
        assert_eq!(
            m.pairs().collect::<Vec<_>>(),
            vec![(8000, 9000), (8001, 9001), (8002, 9002)]
        );
        assert_eq!(p("1-65535:1-65535").pairs().count(), 65535);
        assert_eq!(p("9000-9002").pairs().next(), Some((0, 9000)));
    }

    #[test]
    fn unequal_ranges_name_both_lengths() {
        assert_eq!(
            err("8080-8090:80-85"),
            "-p 8080-8090:80-85: host range has 11 ports, container range 6"
        );
    }

    #[test]
    fn bad_ports_name_the_part() {
        assert_eq!(
            err("0:80"),
            "-p 0:80: host port \"0\" is not a number in 1..=65535"
        );
        assert_eq!(
            err("8080:65536"),
            "-p 8080:65536: container port \"65536\" is not a number in 1..=65535"
        );
        assert!(err("8080:+80").contains("container port \"+80\""));
        assert!(err("x:80").contains("host port \"x\""));
        assert!(err("80-").contains("container port \"\""));
        assert_eq!(
            err("90-80"),
            "-p 90-80: container range 90-80 ends before it starts"
        );
        assert_eq!(err("8080:"), "-p 8080:: the container port is missing");
        assert_eq!(err(""), "-p : the container port is missing");
    }

    #[test]
    fn bad_protocol_and_addresses() {
        assert_eq!(
            err("80/icmp"),
            "-p 80/icmp: protocol \"icmp\" is not tcp, udp or sctp"
        );
        assert_eq!(
            err("1.2.3:80:80"),
            "-p 1.2.3:80:80: host address \"1.2.3\" is not an IP address"
        );
        assert!(err("::1:8080:80").contains("must be in brackets"));
        assert!(err("[::1]8080:80").contains("followed by"));
        assert!(err("[::1]:80").contains("followed by"));
        assert!(err("[::1:80:80").contains("is not an IP address"));
        assert!(err("[zz]:80:80").contains("\"zz\""));
    }

    fn arb_range(len: u16) -> impl Strategy<Value = PortRange> {
        (1..=65535 - (len - 1)).prop_map(move |s| r(s, s + (len - 1)))
    }

    fn arb_mapping() -> impl Strategy<Value = PortMapping> {
        let ip = prop_oneof![
            Just(None),
            any::<[u8; 4]>().prop_map(|o| Some(IpAddr::from(o))),
            any::<[u8; 16]>().prop_map(|o| Some(IpAddr::from(o))),
        ];
        let proto = prop_oneof![
            Just(Protocol::Tcp),
            Just(Protocol::Udp),
            Just(Protocol::Sctp)
        ];
        (1u16..=300, ip, proto, any::<bool>())
            .prop_flat_map(|(len, ip, proto, has_host)| {
                (arb_range(len), arb_range(len), Just((ip, proto, has_host)))
            })
            .prop_map(
                |(host, container, (host_ip, protocol, has_host))| PortMapping {
                    host_ip,
                    host_ports: has_host.then_some(host),
                    container_ports: container,
                    protocol,
                },
            )
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(m in arb_mapping()) {
            let text = m.to_string();
            prop_assert_eq!(text.parse::<PortMapping>(), Ok(m), "{}", text);
        }
    }
}
