//! Spillway's control plane.

#![forbid(unsafe_code)]

pub mod announcer;
pub mod api;
pub mod config;
pub mod controller;
pub mod health;
pub mod instance;
pub mod metrics;
pub mod netlink;
pub mod pcapng;
pub mod simulate;
pub mod sync;
pub mod table_file;
pub mod view;
