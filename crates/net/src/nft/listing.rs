//! Reading a DNAT map element back from `nft -j list map` into a [`Mapping`] and its owner.
//!
//! An element is `[key, value]`; the key is `{"concat": [addr?, proto, port]}` or, when it
//! carries a comment, `{"elem": {"val": {"concat": [...]}, "comment": "owner"}}`; the value is
//! `{"concat": [addr, port]}`. Anything else is skipped (not pier's shape).
use serde_json::Value;

use super::{Mapping, Proto};

/// The mapping and owner ("" when uncommented) of one listed element.
pub(crate) fn element(elem: &Value) -> Option<(Mapping, String)> {
    let (key, value) = (elem.get(0)?, elem.get(1)?);
    let (key, owner) = match key.get("elem") {
        Some(inner) => (&inner["val"], inner["comment"].as_str().unwrap_or("")),
        None => (key, ""),
    };
    let key = key["concat"].as_array()?;
    let value = value["concat"].as_array()?;
    let (host, rest) = match key.len() {
        3 => (Some(key[0].as_str()?.parse().ok()?), &key[1..]),
        2 => (None, &key[..]),
        _ => return None,
    };
    let proto = match rest[0].as_str()? {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        "sctp" => Proto::Sctp,
        _ => return None,
    };
    let mapping = Mapping {
        host,
        proto,
        host_port: port(&rest[1])?,
        container: value.first()?.as_str()?.parse().ok()?,
        container_port: port(value.get(1)?)?,
    };
    Some((mapping, owner.to_string()))
}

fn port(v: &Value) -> Option<u16> {
    u16::try_from(v.as_u64()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn commented_and_plain_elements_read_back() {
        let plain = json!([{"concat": ["198.18.1.1", "udp", 53]}, {"concat": ["198.18.2.2", 53]}]);
        let (m, owner) = element(&plain).unwrap();
        assert_eq!(m.host, Some("198.18.1.1".parse().unwrap()));
        assert_eq!(
            (m.proto, m.host_port, m.container_port),
            (Proto::Udp, 53, 53)
        );
        assert_eq!(owner, "");
        let commented = json!([{"elem": {"val": {"concat": ["tcp", 8080]}, "comment": "c1"}},
            {"concat": ["2001:2::2", 80]}]);
        let (m, owner) = element(&commented).unwrap();
        assert_eq!((m.host, m.host_port), (None, 8080));
        assert_eq!(
            m.container,
            "2001:2::2".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(owner, "c1");
        assert!(element(&json!([{"concat": ["x"]}, {}])).is_none());
    }
}
