//! Spillway's control plane.

#![forbid(unsafe_code)]
