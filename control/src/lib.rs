//! Spillway's control plane.

#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod controller;
pub mod health;
pub mod metrics;
pub mod simulate;
pub mod view;
