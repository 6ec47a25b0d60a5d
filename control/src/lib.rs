//! Spillway's control plane.

#![forbid(unsafe_code)]

pub mod config;
pub mod controller;
pub mod health;
pub mod publish;
pub mod view;
