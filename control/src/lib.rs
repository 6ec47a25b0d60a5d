//! Spillway's control plane.

#![forbid(unsafe_code)]

pub mod config;
pub mod health;
pub mod publish;
