//! Per-worker connection-tracking shard (CT). Being written.
