//! Raw DPDK bindings. Being written.
