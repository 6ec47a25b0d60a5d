//! Weighted Maglev consistent-hash tables (CH-1..CH-3). Being written.
