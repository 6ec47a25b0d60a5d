//! The part of a QUIC packet a load balancer reads: its header form and destination
//! connection ID, by the version-independent invariants (RFC 8999), so that any QUIC version
//! is read the same way.
//!
//! - **Long header** (the first bit set: Initial, 0-RTT, Handshake, Retry, version
//!   negotiation): first octet, 32-bit version, then the destination connection ID with its
//!   length octet (at most 255 octets by the invariants; QUIC v1 allows 20).
//! - **Short header** (the first bit clear: the 1-RTT packets of an established connection):
//!   first octet, then the destination connection ID, whose length the packet does not say;
//!   only the servers' configuration knows it, so the view returns everything after the
//!   first octet and the QUIC-LB decoder reads what its configuration says.
//!
//! [`long_source_cid`] reads a long header's source connection ID: in a packet a server sent,
//! quoted by an ICMP error, it is the server's own ID (QL-5).
//!
//! Coalesced packets (RFC 9000 section 12.2) start with the first packet's header, which is
//! the one read. The view never panics and never allocates.

/// A UDP payload read as QUIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicHeader<'a> {
    /// A long header: the version and the destination connection ID.
    Long {
        /// The version field (0 for version negotiation).
        version: u32,
        /// The destination connection ID, exactly as long as its length octet says.
        dcid: &'a [u8],
    },
    /// A short header: everything after the first octet, which starts with the destination
    /// connection ID.
    Short {
        /// The octets from the destination connection ID on.
        dcid_and_rest: &'a [u8],
    },
}

/// Why a UDP payload is not read as QUIC (counted; the packet still goes by its 4-tuple).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotQuic {
    /// No octet at all.
    Empty,
    /// A long header that ends before its destination connection ID does.
    TruncatedLong,
}

impl NotQuic {
    /// The name used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            NotQuic::Empty => "empty",
            NotQuic::TruncatedLong => "truncated_long_header",
        }
    }
}

/// The long-header form bit (RFC 8999 section 5.1).
pub const LONG_HEADER: u8 = 0x80;

/// Read `payload` (a UDP datagram's payload) as a QUIC packet's first header.
pub fn parse(payload: &[u8]) -> Result<QuicHeader<'_>, NotQuic> {
    let first = *payload.first().ok_or(NotQuic::Empty)?;
    if first & LONG_HEADER == 0 {
        return Ok(QuicHeader::Short { dcid_and_rest: &payload[1..] });
    }
    let version = payload.get(1..5).ok_or(NotQuic::TruncatedLong)?;
    let version = u32::from_be_bytes([version[0], version[1], version[2], version[3]]);
    let len = usize::from(*payload.get(5).ok_or(NotQuic::TruncatedLong)?);
    let dcid = payload.get(6..6 + len).ok_or(NotQuic::TruncatedLong)?;
    Ok(QuicHeader::Long { version, dcid })
}

/// The source connection ID of a long-header packet (after the destination connection ID and
/// its length octet, RFC 8999 section 5.1); `None` for a short header or a header that ends
/// before the source connection ID does.
pub fn long_source_cid(payload: &[u8]) -> Option<&[u8]> {
    if payload.first()? & LONG_HEADER == 0 {
        return None;
    }
    let dcid_len = usize::from(*payload.get(5)?);
    let at = 6 + dcid_len;
    let len = usize::from(*payload.get(at)?);
    payload.get(at + 1..at + 1 + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_and_short_headers() {
        // An Initial of QUIC v1 with an 8-octet DCID and a 4-octet SCID.
        let initial = [0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 4, 9, 9, 9, 9, 0];
        assert_eq!(
            parse(&initial),
            Ok(QuicHeader::Long { version: 1, dcid: &[1, 2, 3, 4, 5, 6, 7, 8] })
        );
        let short = [0x41, 0x07, 0xc4, 0x60, 0x5e, 0x45];
        assert_eq!(parse(&short), Ok(QuicHeader::Short { dcid_and_rest: &short[1..] }));
        assert_eq!(parse(&[0x41]), Ok(QuicHeader::Short { dcid_and_rest: &[] }));
    }

    #[test]
    fn truncated_and_empty() {
        assert_eq!(parse(&[]), Err(NotQuic::Empty));
        assert_eq!(parse(&[0xc0, 0, 0, 0]), Err(NotQuic::TruncatedLong));
        assert_eq!(parse(&[0xc0, 0, 0, 0, 1]), Err(NotQuic::TruncatedLong));
        assert_eq!(parse(&[0xc0, 0, 0, 0, 1, 3, 1, 2]), Err(NotQuic::TruncatedLong));
        assert_eq!(parse(&[0xc0, 0, 0, 0, 1, 0]), Ok(QuicHeader::Long { version: 1, dcid: &[] }));
    }

    #[test]
    fn a_long_headers_source_connection_id() {
        // A server's Handshake (version 1): DCID of 2 octets, SCID of 3, then the rest.
        let handshake = [0xe1, 0, 0, 0, 1, 2, 0xaa, 0xbb, 3, 0x07, 0x0a, 0x01, 0x40, 0x20];
        assert_eq!(long_source_cid(&handshake), Some(&[0x07, 0x0a, 0x01][..]));
        assert_eq!(long_source_cid(&handshake[..11]), None, "ends inside the SCID");
        assert_eq!(long_source_cid(&handshake[..8]), None, "ends before its length");
        assert_eq!(long_source_cid(&[0xe1, 0, 0, 0, 1, 0, 0]), Some(&[][..]));
        assert_eq!(long_source_cid(&[0x41, 0x07, 0x0a]), None, "a short header has none");
        assert_eq!(long_source_cid(&[]), None);
    }
}
