//! Fleet sync as `GET /v1/instance` shows it (`fleet_sync`), and `spillwayctl instance`
//! prints it. Re-exported by the API's reply types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One peer as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PeerStatus {
    /// Its configured id.
    pub id: u32,
    /// Its address.
    pub address: String,
    /// Its hellos, proven live, arrive.
    pub up: bool,
    /// It has proven it is live since this instance started (a hello echoed this life's
    /// challenge): its datagrams are accepted.
    #[serde(default)]
    pub proven: bool,
    /// Its last hello said it accepts this instance's datagrams (it has proven this life live):
    /// entries are sent to it.
    #[serde(default)]
    pub accepts: bool,
    /// The epoch (life) of its session.
    #[serde(default)]
    pub epoch: Option<u64>,
    /// Milliseconds since its last proven hello, if any came.
    pub last_hello_ms: Option<u64>,
    /// Entries received from it.
    pub entries_received: u64,
    /// Its answer to this instance's bulk request has ended, every count agreeing.
    pub bulk_answered: bool,
    /// Entries its answer held (all attempts).
    #[serde(default)]
    pub bulk_entries: u64,
    /// Entries its answer's counts found missing (asked for again).
    #[serde(default)]
    pub bulk_missing: u64,
    /// Its tables have differed from this instance's for longer than the alarm waits.
    #[serde(default)]
    pub tables_differ: bool,
    /// Since how long (seconds) its tables differ, if they do.
    #[serde(default)]
    pub tables_differ_sec: Option<f64>,
    /// Its datagrams never received (gaps in its sequence numbers).
    #[serde(default)]
    pub sequence_gaps: u64,
}

/// The thread's state for the API: the bulk sync and the peers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct SyncStatus {
    /// `pending`, `done` or `timed_out`.
    pub bulk: String,
    /// The peers, by id.
    pub peers: Vec<PeerStatus>,
    /// The oldest snapshot generation every worker has finished an own pass under (0 before
    /// the first): once it is the current generation and the peers have received what was
    /// sent, the peers hold every entry at risk after that change.
    pub scanned_generation: u64,
}

/// What fleet sync lost, and where (`GET /v1/instance`'s `fleet_sync.lost`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct SyncLosses {
    /// Datagrams the kernel dropped on receive (the socket's buffer full).
    pub kernel_drops: u64,
    /// Peers' datagrams never received (gaps in their sequence numbers).
    pub sequence_gaps: u64,
    /// Entries the counts of bulk answers found missing (asked for again).
    pub bulk_missing: u64,
    /// Datagrams the kernel refused to send.
    pub send_errors: u64,
    /// Peers' entries or removals a worker's full queue refused.
    pub worker_queue_full: u64,
}

/// Fleet sync in `GET /v1/instance` (and `spillwayctl instance`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct SyncReply {
    /// The bulk sync at start and the peers.
    #[serde(flatten)]
    pub status: SyncStatus,
    /// The bulk sync's duration, in milliseconds (once over).
    pub bulk_ms: Option<u64>,
    /// Entries received in the answers to this instance's bulk request.
    #[serde(default)]
    pub bulk_entries: u64,
    /// Parts of those answers asked for again.
    #[serde(default)]
    pub bulk_retries: u64,
    /// Entries sent to the peers (each once, whatever the number of peers).
    pub entries_sent: u64,
    /// Entries sent in bulk answers.
    #[serde(default)]
    pub answer_entries_sent: u64,
    /// Entries received from them.
    pub entries_received: u64,
    /// Removals sent to the peers (FS-8).
    #[serde(default)]
    pub removes_sent: u64,
    /// Removals received from them.
    #[serde(default)]
    pub removes_received: u64,
    /// Authentic hellos that proved nothing: from a peer that had not heard this life yet, or
    /// replayed from an earlier one.
    #[serde(default)]
    pub hellos_unproven: u64,
    /// Datagrams refused, by reason (only reasons seen).
    pub refused: BTreeMap<String, u64>,
    /// Limits peers ran into, by limit (only limits seen).
    #[serde(default)]
    pub limited: BTreeMap<String, u64>,
    /// What was lost, and where.
    #[serde(default)]
    pub lost: SyncLosses,
    /// This life's epoch.
    #[serde(default)]
    pub epoch: u64,
    /// The id of the key it seals with (hex).
    #[serde(default)]
    pub key_id: String,
    /// Bytes of the sync socket's receive buffer.
    #[serde(default)]
    pub socket_buffer: u64,
}
