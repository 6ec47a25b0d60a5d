//! The per-service policy settings of SPEC sections 1-4, as the decision core uses them.
//!
//! The names match the GCP API values (`PER_SESSION`, `CLIENT_IP_PROTO`, ...); the control
//! plane's YAML uses exactly these strings (see `as_str` / `parse`).

/// Session affinity (SA-1..SA-5): which fields of a packet choose its backend.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Affinity {
    /// `NONE`: behaves exactly like `CLIENT_IP_PORT_PROTO` (SA-5).
    #[default]
    None,
    /// `CLIENT_IP_PORT_PROTO`: 5-tuple for unfragmented TCP/UDP, else 3-tuple (SA-1).
    ClientIpPortProto,
    /// `CLIENT_IP_PROTO`: 3-tuple (SA-2).
    ClientIpProto,
    /// `CLIENT_IP`: 2-tuple (SA-3).
    ClientIp,
    /// `CLIENT_IP_NO_DESTINATION`: source address only (SA-4).
    ClientIpNoDestination,
}

/// Connection tracking mode (CT-1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum TrackingMode {
    /// `PER_CONNECTION`: 5-tuple entries for TCP/UDP (CT-1a).
    #[default]
    PerConnection,
    /// `PER_SESSION`: entries keyed like the affinity (CT-1b..e).
    PerSession,
}

/// Connection persistence on unhealthy backends (CP-1..CP-4).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Persistence {
    /// `DEFAULT_FOR_PROTOCOL` (CP-1).
    #[default]
    DefaultForProtocol,
    /// `NEVER_PERSIST` (CP-2).
    NeverPersist,
    /// `ALWAYS_PERSIST` (CP-3, CP-4); invalid with `PER_SESSION`.
    AlwaysPersist,
}

/// Zonal affinity (section 4).
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub enum ZonalAffinity {
    /// `ZONAL_AFFINITY_DISABLED`.
    #[default]
    Disabled,
    /// `ZONAL_AFFINITY_STAY_WITHIN_ZONE` (ZA-3).
    StayWithinZone,
    /// `ZONAL_AFFINITY_SPILL_CROSS_ZONE` with its `spillover_ratio` in [0, 1] (ZA-4, ZA-5).
    SpillCrossZone {
        /// The spillover ratio r.
        ratio: f64,
    },
}

/// Failover policy (section 3).
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct FailoverPolicy {
    /// `failover_ratio` in [0, 1] (FO-2).
    pub failover_ratio: f64,
    /// `drop_traffic_if_unhealthy` (FO-3).
    pub drop_traffic_if_unhealthy: bool,
    /// `disable_connection_drain_on_failover` (FO-9).
    pub disable_connection_drain_on_failover: bool,
}

/// Idle-timeout bounds of CT-9, in seconds: `(default, min, max)`.
pub fn idle_timeout_bounds(mode: TrackingMode, affinity: Affinity) -> (u32, u32, u32) {
    match (mode, affinity) {
        (TrackingMode::PerConnection, _) => (600, 60, 600),
        (
            TrackingMode::PerSession,
            Affinity::ClientIpNoDestination | Affinity::ClientIp | Affinity::ClientIpProto,
        ) => (600, 60, 57_600),
        (TrackingMode::PerSession, Affinity::None | Affinity::ClientIpPortProto) => (600, 60, 600),
    }
}

macro_rules! api_names {
    ($ty:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$(<$ty>::$variant),+];
            /// The API names of [`Self::ALL`], in the same order.
            pub const NAMES: &'static [&'static str] = &[$($name),+];
            /// The API name of this value.
            pub fn as_str(self) -> &'static str {
                match self { $(<$ty>::$variant => $name),+ }
            }
            /// Parse the API name; `None` for anything else.
            pub fn parse(s: &str) -> Option<$ty> {
                match s { $($name => Some(<$ty>::$variant),)+ _ => None }
            }
        }
    };
}
pub(crate) use api_names;

api_names!(Affinity {
    None => "NONE",
    ClientIpPortProto => "CLIENT_IP_PORT_PROTO",
    ClientIpProto => "CLIENT_IP_PROTO",
    ClientIp => "CLIENT_IP",
    ClientIpNoDestination => "CLIENT_IP_NO_DESTINATION",
});

api_names!(TrackingMode {
    PerConnection => "PER_CONNECTION",
    PerSession => "PER_SESSION",
});

api_names!(Persistence {
    DefaultForProtocol => "DEFAULT_FOR_PROTOCOL",
    NeverPersist => "NEVER_PERSIST",
    AlwaysPersist => "ALWAYS_PERSIST",
});
