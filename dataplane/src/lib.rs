//! Spillway data plane.
