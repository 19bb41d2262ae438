//! nftables' netlink messages for set and map elements, written and read in-process.
//!
//! Theory of operation: publishing a port is a map element add, and spawning `nft` for it cost
//! about 3.4 ms (process, libnftables, cache fetch) where the kernel needs microseconds; so the
//! element paths (publish, withdraw, the listing a port pick makes) speak nfnetlink directly,
//! and `nft` is left to what happens once (the table, the chains) or rarely (networks).
//! A [`Batch`] is what `nft -f` sends: `NFNL_MSG_BATCH_BEGIN`, one `NFT_MSG_NEWSETELEM` or
//! `NFT_MSG_DELSETELEM` per set (split every [`CHUNK`] elements so an error echo stays small),
//! `NFNL_MSG_BATCH_END`; the kernel applies it as one transaction. Element layout is the
//! kernel's: each field of a concatenation takes whole 4-byte registers (a protocol byte is
//! padded to 4, a port is 2 bytes big-endian padded to 4, an interface name 16 bytes), a
//! comment is nftables' userdata TLV (type 0, length, text with its NUL). An interval set
//! (`flags interval`, rbtree) stores a range as a start element and an end element flagged
//! `INTERVAL_END` holding the first address past it; a concatenation with an interval (pipapo)
//! stores one element with `KEY_END`, the last key inside. The byte layouts are checked against
//! what nft 1.0.6 sends (`nft --debug=netlink`) in the tests below.
//! Why by hand: no maintained crate encodes nftables' set elements with concatenated keys and
//! data (rustables covers tables, chains and simple sets; nftnl needs libnftnl); the messages
//! are small and fixed, and netlink-sys is not needed for a socket nix already opens.
use std::net::IpAddr;

pub(crate) const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub(crate) const NFT_MSG_NEWSETELEM: u16 = 12;
pub(crate) const NFT_MSG_GETSETELEM: u16 = 13;
pub(crate) const NFT_MSG_DELSETELEM: u16 = 14;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;
pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CREATE: u16 = 0x400;
const NFPROTO_INET: u8 = 1;
const NLA_F_NESTED: u16 = 0x8000;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_SET_ELEM_USERDATA: u16 = 6;
const NFTA_SET_ELEM_KEY_END: u16 = 10;
const NFTA_DATA_VALUE: u16 = 1;
const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
const UDATA_SET_ELEM_COMMENT: u8 = 0;
const IFNAMSIZ: usize = 16;
/// Elements per message: an error echoes its message, which must fit the reply buffer.
const CHUNK: usize = 128;

/// One set or map element as the kernel stores it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Elem {
    pub key: Vec<u8>,
    pub key_end: Option<Vec<u8>>,
    pub data: Option<Vec<u8>>,
    pub interval_end: bool,
    pub comment: Option<String>,
}

impl Elem {
    pub fn key(key: Vec<u8>) -> Elem {
        Elem {
            key,
            ..Elem::default()
        }
    }
}

/// A concatenation being built field by field, each padded to 4 bytes.
#[derive(Debug, Default)]
pub(crate) struct Concat(Vec<u8>);

impl Concat {
    pub fn addr(mut self, addr: IpAddr) -> Concat {
        match addr {
            IpAddr::V4(a) => self.0.extend(a.octets()),
            IpAddr::V6(a) => self.0.extend(a.octets()),
        }
        self
    }

    /// An `inet_proto` (one byte).
    pub fn proto(self, number: u8) -> Concat {
        self.field(&[number])
    }

    /// An `inet_service` (big-endian).
    pub fn port(self, port: u16) -> Concat {
        self.field(&port.to_be_bytes())
    }

    /// An `ifname`: the name NUL-padded to 16 bytes.
    pub fn ifname(mut self, name: &str) -> Concat {
        let mut field = [0u8; IFNAMSIZ];
        let n = name.len().min(IFNAMSIZ - 1);
        field[..n].copy_from_slice(&name.as_bytes()[..n]);
        self.0.extend(field);
        self
    }

    fn field(mut self, bytes: &[u8]) -> Concat {
        self.0.extend(bytes);
        self.0.resize(self.0.len().next_multiple_of(4), 0);
        self
    }

    pub fn done(self) -> Vec<u8> {
        self.0
    }
}

/// The fields of a concatenation read back in order.
pub(crate) struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    pub fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields(bytes)
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let padded = len.next_multiple_of(4);
        if self.0.len() < padded {
            return None;
        }
        let (field, rest) = self.0.split_at(padded);
        self.0 = rest;
        Some(&field[..len])
    }

    pub fn addr(&mut self, v6: bool) -> Option<IpAddr> {
        Some(match v6 {
            false => IpAddr::from(<[u8; 4]>::try_from(self.take(4)?).ok()?),
            true => IpAddr::from(<[u8; 16]>::try_from(self.take(16)?).ok()?),
        })
    }

    pub fn proto(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub fn port(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a batch message does to its elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Delete,
}

/// A transaction under construction: begin, element messages, end.
#[derive(Debug)]
pub(crate) struct Batch {
    buf: Vec<u8>,
    seq: u32,
    /// Sequence numbers of the messages that ask for an acknowledgement.
    acked: Vec<u32>,
    deletes: bool,
}

impl Batch {
    pub fn new() -> Batch {
        let mut batch = Batch {
            buf: Vec::with_capacity(4096),
            seq: 0,
            acked: Vec::new(),
            deletes: false,
        };
        batch.control(NFNL_MSG_BATCH_BEGIN);
        batch
    }

    /// Adds (without `NLM_F_EXCL`: an identical element is no error) or deletes `elems` of
    /// `set` in table `inet TABLE`.
    pub fn elements(&mut self, op: Op, table: &str, set: &str, elems: &[Elem]) {
        let (kind, flags) = match op {
            Op::Add => (NFT_MSG_NEWSETELEM, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK),
            Op::Delete => (NFT_MSG_DELSETELEM, NLM_F_REQUEST | NLM_F_ACK),
        };
        self.deletes |= op == Op::Delete && !elems.is_empty();
        for chunk in elems.chunks(CHUNK) {
            let start = self.header(nft_type(kind), flags, NFPROTO_INET, 0);
            self.acked.push(self.seq);
            put_str(&mut self.buf, NFTA_SET_ELEM_LIST_TABLE, table);
            put_str(&mut self.buf, NFTA_SET_ELEM_LIST_SET, set);
            let list = begin_nested(&mut self.buf, NFTA_SET_ELEM_LIST_ELEMENTS);
            for elem in chunk {
                put_elem(&mut self.buf, elem);
            }
            end_nested(&mut self.buf, list);
            self.finish_message(start);
        }
    }

    /// Whether the batch deletes anything (its socket's release then waits; see socket.rs).
    pub fn deletes(&self) -> bool {
        self.deletes
    }

    /// The bytes to send and the sequence numbers the kernel must acknowledge.
    pub fn finish(mut self) -> (Vec<u8>, Vec<u32>) {
        self.control(NFNL_MSG_BATCH_END);
        (self.buf, self.acked)
    }

    fn control(&mut self, kind: u16) {
        let start = self.header(kind, NLM_F_REQUEST, 0, NFNL_SUBSYS_NFTABLES);
        self.finish_message(start);
    }

    /// Appends an nlmsghdr and an nfgenmsg; returns where the message starts.
    fn header(&mut self, kind: u16, flags: u16, family: u8, res_id: u16) -> usize {
        let start = self.buf.len();
        self.buf.extend(0u32.to_ne_bytes()); // length, patched by finish_message
        self.buf.extend(kind.to_ne_bytes());
        self.buf.extend(flags.to_ne_bytes());
        self.buf.extend(self.seq.to_ne_bytes());
        self.buf.extend(0u32.to_ne_bytes()); // port id: the kernel's
        self.buf.extend([family, 0]);
        self.buf.extend(res_id.to_be_bytes());
        start
    }

    fn finish_message(&mut self, start: usize) {
        let len = (self.buf.len() - start) as u32;
        self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
        self.seq += 1;
    }
}

/// A dump request for every element of `set` in table `inet TABLE`.
pub(crate) fn dump_request(table: &str, set: &str, seq: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64);
    buf.extend(0u32.to_ne_bytes());
    buf.extend(nft_type(NFT_MSG_GETSETELEM).to_ne_bytes());
    buf.extend((NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    buf.extend(seq.to_ne_bytes());
    buf.extend(0u32.to_ne_bytes());
    buf.extend([NFPROTO_INET, 0]);
    buf.extend(0u16.to_be_bytes());
    put_str(&mut buf, NFTA_SET_ELEM_LIST_TABLE, table);
    put_str(&mut buf, NFTA_SET_ELEM_LIST_SET, set);
    let len = buf.len() as u32;
    buf[..4].copy_from_slice(&len.to_ne_bytes());
    buf
}

fn nft_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
}

fn put_elem(buf: &mut Vec<u8>, elem: &Elem) {
    let item = begin_nested(buf, NFTA_LIST_ELEM);
    put_value(buf, NFTA_SET_ELEM_KEY, &elem.key);
    if let Some(end) = &elem.key_end {
        put_value(buf, NFTA_SET_ELEM_KEY_END, end);
    }
    if let Some(data) = &elem.data {
        put_value(buf, NFTA_SET_ELEM_DATA, data);
    }
    if elem.interval_end {
        put_attr(
            buf,
            NFTA_SET_ELEM_FLAGS,
            &NFT_SET_ELEM_INTERVAL_END.to_be_bytes(),
        );
    }
    if let Some(text) = &elem.comment {
        let mut udata = vec![UDATA_SET_ELEM_COMMENT, (text.len() + 1) as u8];
        udata.extend(text.as_bytes());
        udata.push(0);
        put_attr(buf, NFTA_SET_ELEM_USERDATA, &udata);
    }
    end_nested(buf, item);
}

/// `TYPE { NFTA_DATA_VALUE bytes }`
fn put_value(buf: &mut Vec<u8>, kind: u16, bytes: &[u8]) {
    let outer = begin_nested(buf, kind);
    put_attr(buf, NFTA_DATA_VALUE, bytes);
    end_nested(buf, outer);
}

fn put_str(buf: &mut Vec<u8>, kind: u16, text: &str) {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    put_attr(buf, kind, &bytes);
}

fn put_attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    buf.extend(((4 + payload.len()) as u16).to_ne_bytes());
    buf.extend(kind.to_ne_bytes());
    buf.extend(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

fn begin_nested(buf: &mut Vec<u8>, kind: u16) -> usize {
    let start = buf.len();
    buf.extend(0u16.to_ne_bytes());
    buf.extend((kind | NLA_F_NESTED).to_ne_bytes());
    start
}

fn end_nested(buf: &mut [u8], start: usize) {
    let len = (buf.len() - start) as u16;
    buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
}

/// The attributes in `bytes`, as (type without flags, payload).
pub(crate) fn attrs(mut bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if bytes.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        if len < 4 || len > bytes.len() {
            return None;
        }
        let payload = &bytes[4..len];
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
        Some((kind, payload))
    })
}

fn attr(bytes: &[u8], kind: u16) -> Option<&[u8]> {
    attrs(bytes).find(|(k, _)| *k == kind).map(|(_, p)| p)
}

/// The elements of one `NFT_MSG_NEWSETELEM` message of a dump (`payload` after the nfgenmsg).
pub(crate) fn parse_elements(payload: &[u8]) -> Vec<Elem> {
    let Some(list) = attr(payload, NFTA_SET_ELEM_LIST_ELEMENTS) else {
        return Vec::new();
    };
    attrs(list)
        .filter(|(kind, _)| *kind == NFTA_LIST_ELEM)
        .map(|(_, elem)| parse_elem(elem))
        .collect()
}

fn parse_elem(elem: &[u8]) -> Elem {
    let value = |kind| attr(elem, kind).and_then(|v| attr(v, NFTA_DATA_VALUE));
    let flags = attr(elem, NFTA_SET_ELEM_FLAGS)
        .and_then(|f| <[u8; 4]>::try_from(f).ok())
        .map_or(0, u32::from_be_bytes);
    Elem {
        key: value(NFTA_SET_ELEM_KEY).unwrap_or_default().to_vec(),
        key_end: value(NFTA_SET_ELEM_KEY_END).map(<[u8]>::to_vec),
        data: value(NFTA_SET_ELEM_DATA).map(<[u8]>::to_vec),
        interval_end: flags & NFT_SET_ELEM_INTERVAL_END != 0,
        comment: attr(elem, NFTA_SET_ELEM_USERDATA).and_then(comment),
    }
}

/// The comment in nftables' element userdata (TLVs of type, length, value).
fn comment(mut udata: &[u8]) -> Option<String> {
    while udata.len() >= 2 {
        let (kind, len) = (udata[0], usize::from(udata[1]));
        let value = udata.get(2..2 + len)?;
        if kind == UDATA_SET_ELEM_COMMENT {
            let text = value.strip_suffix(&[0]).unwrap_or(value);
            return String::from_utf8(text.to_vec()).ok();
        }
        udata = &udata[2 + len..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The element message nft 1.0.6 sent for `add element inet t m { tcp . 801 : 1.2.3.4 .
    /// 80 }` (from strace), without its NFTA_SET_ELEM_LIST_SET_ID attribute.
    #[test]
    fn an_any_map_element_is_laid_out_as_nft_sends_it() {
        let elem = Elem {
            key: Concat::default().proto(6).port(801).done(),
            data: Some(
                Concat::default()
                    .addr("1.2.3.4".parse().unwrap())
                    .port(80)
                    .done(),
            ),
            ..Elem::default()
        };
        let mut buf = Vec::new();
        put_elem(&mut buf, &elem);
        let nft: &[u8] = b"\x24\x00\x01\x80\x10\x00\x01\x80\x0c\x00\x01\x00\x06\x00\x00\x00\
            \x03\x21\x00\x00\x10\x00\x02\x80\x0c\x00\x01\x00\x01\x02\x03\x04\x00\x50\x00\x00";
        assert_eq!(buf, nft);
        assert_eq!(parse_elem(&buf[4..]), elem);
    }

    /// `198.18.0.1 . tcp . 8080 comment "c1" : 198.19.0.2 . 80`: nft --debug=netlink prints
    /// `element 010012c6 00000006 0000901f : 020013c6 00005000 0 [end] userdata = { \x00\x03c1\x00 }`.
    #[test]
    fn a_specific_element_with_a_comment_reads_back() {
        let key = Concat::default()
            .addr("198.18.0.1".parse().unwrap())
            .proto(6)
            .port(8080)
            .done();
        assert_eq!(key, [198, 18, 0, 1, 6, 0, 0, 0, 0x1f, 0x90, 0, 0]);
        let elem = Elem {
            key,
            data: Some(vec![198, 19, 0, 2, 0, 80, 0, 0]),
            comment: Some("c1".into()),
            ..Elem::default()
        };
        let mut buf = Vec::new();
        put_elem(&mut buf, &elem);
        let udata = attr(&buf[4..], NFTA_SET_ELEM_USERDATA).unwrap();
        assert_eq!(udata, b"\x00\x03c1\x00");
        assert_eq!(parse_elem(&buf[4..]), elem);
        let mut fields = Fields::new(&elem.key);
        assert_eq!(fields.addr(false), Some("198.18.0.1".parse().unwrap()));
        assert_eq!((fields.proto(), fields.port()), (Some(6), Some(8080)));
        assert!(fields.is_empty());
    }

    /// `"pier0" . 198.18.0.0/24` in an interval concatenation: nft prints
    /// `72656970 00000030 00000000 00000000 000012c6 - ... ff0012c6`.
    #[test]
    fn an_ifname_is_sixteen_nul_padded_bytes() {
        let key = Concat::default()
            .ifname("pier0")
            .addr("198.18.0.0".parse().unwrap())
            .done();
        assert_eq!(&key[..6], b"pier0\0");
        assert_eq!(key.len(), 20);
        assert_eq!(&key[16..], [198, 18, 0, 0]);
    }

    #[test]
    fn a_batch_is_framed_by_begin_and_end_and_split_in_chunks() {
        let mut batch = Batch::new();
        let elems = vec![Elem::key(Concat::default().proto(17).port(53).done()); 300];
        batch.elements(Op::Delete, "pier", "pier_held", &elems);
        assert!(batch.deletes());
        let (buf, acked) = batch.finish();
        assert_eq!(acked, [1, 2, 3]);
        let mut kinds = Vec::new();
        let mut rest = &buf[..];
        while !rest.is_empty() {
            let len = u32::from_ne_bytes(rest[..4].try_into().unwrap()) as usize;
            kinds.push(u16::from_ne_bytes([rest[4], rest[5]]));
            rest = &rest[len..];
        }
        let del = nft_type(NFT_MSG_DELSETELEM);
        assert_eq!(kinds, [16, del, del, del, 17]);
    }
}
