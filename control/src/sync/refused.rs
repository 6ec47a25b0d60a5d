//! Why a datagram was refused: the reasons the decoder ([`super::wire::decode`]) and the
//! session check ([`super::session`]) give, each a metric label. Their own module, so that
//! the decoder can run the session check without the two importing each other.

/// Why a datagram was refused. Each is a metric label ([`Refused::as_str`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refused {
    /// Shorter than a header and a tag.
    Truncated,
    /// Longer than [`MAX_DATAGRAM`](super::MAX_DATAGRAM) (seen as such: the receive buffer is one byte longer).
    Oversized,
    /// Does not start with [`MAGIC`](super::MAGIC).
    BadMagic,
    /// Another version of the format.
    WrongVersion,
    /// A kind byte this version does not know.
    UnknownKind,
    /// The sender id is not one of the configured peers.
    UnknownSender,
    /// From another address than the configured peer's.
    WrongAddress,
    /// Addressed to another instance.
    WrongRecipient,
    /// Sealed under a key this instance does not hold (by its id): a rotation not rolled out
    /// everywhere yet, or someone else writing to the port.
    UnknownKey,
    /// The tag does not verify: forged or altered.
    AuthFailed,
    /// Authentic, but its sequence number was already accepted or is below the window.
    Replayed,
    /// Authentic, but from another life (epoch) of the sender than the session's.
    StaleEpoch,
    /// Authentic, but the sender has not proven it is live since this instance started (no
    /// hello of it echoed this life's challenge yet): recorded traffic replayed after a
    /// restart, or a peer's datagram that came before its first hello.
    Unproven,
    /// Authentic, but the payload does not match its kind: length, count or a field.
    Malformed,
}

impl Refused {
    /// Every reason (metric labels).
    pub const ALL: [Refused; 14] = [
        Refused::Truncated,
        Refused::Oversized,
        Refused::BadMagic,
        Refused::WrongVersion,
        Refused::UnknownKind,
        Refused::UnknownSender,
        Refused::WrongAddress,
        Refused::WrongRecipient,
        Refused::UnknownKey,
        Refused::AuthFailed,
        Refused::Replayed,
        Refused::StaleEpoch,
        Refused::Unproven,
        Refused::Malformed,
    ];

    /// Its place in [`Refused::ALL`].
    pub fn index(self) -> usize {
        Refused::ALL.iter().position(|&r| r == self).unwrap_or(0)
    }

    /// The stable snake_case name (metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Truncated => "truncated",
            Refused::Oversized => "oversized",
            Refused::BadMagic => "bad_magic",
            Refused::WrongVersion => "wrong_version",
            Refused::UnknownKind => "unknown_kind",
            Refused::UnknownSender => "unknown_sender",
            Refused::WrongAddress => "wrong_address",
            Refused::WrongRecipient => "wrong_recipient",
            Refused::UnknownKey => "unknown_key",
            Refused::AuthFailed => "auth_failed",
            Refused::Replayed => "replayed",
            Refused::StaleEpoch => "stale_epoch",
            Refused::Unproven => "unproven",
            Refused::Malformed => "malformed",
        }
    }
}
