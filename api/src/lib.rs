//! The admin API's contract: the request and reply bodies ([`types`]) that the server
//! (`spillway_control::api`) serialises and its clients (`spillwayctl`, the tests) deserialise.
//! They live in a crate of their own, with no dependency on the control plane, so that both
//! ends use the same definitions: the control plane's modules that fill a reply (the instance,
//! fleet sync, packet capture, the API itself) import them from here without importing each
//! other, and `spillwayctl` reads them without a second copy. `docs/operations.md` describes
//! every endpoint.

#![forbid(unsafe_code)]

pub mod types;
