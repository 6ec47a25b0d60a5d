//! Spillway's control plane.

#![forbid(unsafe_code)]

pub mod announcer;
pub mod api;
pub mod capture;
pub mod config;
pub mod controller;
pub mod ctl;
pub mod fleet;
pub mod health;
pub mod metrics;
pub mod netlink;
pub mod simulate;
pub mod sync;
pub mod view;
