//! Generates the DPDK bindings and compiles DPDK's `static inline` functions into callable
//! wrappers. The recipe and its pitfalls (N1-N13) are in docs/dpdk-notes.md.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// DPDK functions Spillway calls. Every allowlisted `static inline` costs C compile time
/// (docs/dpdk-notes.md N13), so this stays a tight list of what the safe layer uses.
const FUNCTIONS: &[&str] = &[
    // EAL, lcores, launch, errors
    "rte_eal_init",
    "rte_eal_cleanup",
    "rte_eal_remote_launch",
    "rte_eal_wait_lcore",
    "rte_eal_mp_wait_lcore",
    "rte_eal_process_type",
    "rte_eal_has_hugepages",
    "rte_memseg_walk",
    "rte_malloc_get_socket_stats",
    "rte_strerror",
    "rte_shim_errno",
    "rte_lcore_id",
    "rte_lcore_count",
    "rte_lcore_is_enabled",
    "rte_get_main_lcore",
    "rte_get_next_lcore",
    "rte_lcore_to_socket_id",
    "rte_socket_id",
    // cycles
    "rte_get_tsc_cycles",
    "rte_get_tsc_hz",
    "rte_rdtsc",
    "rte_pause",
    "rte_delay_us_block",
    // memory
    "rte_malloc",
    "rte_zmalloc",
    "rte_zmalloc_socket",
    "rte_free",
    // mempool and mbuf
    "rte_mempool_free",
    "rte_mempool_avail_count",
    "rte_mempool_in_use_count",
    "rte_mempool_get_bulk",
    "rte_pktmbuf_pool_create",
    "rte_pktmbuf_alloc",
    "rte_pktmbuf_alloc_bulk",
    "rte_pktmbuf_free",
    "rte_pktmbuf_free_bulk",
    "rte_pktmbuf_prepend",
    "rte_pktmbuf_adj",
    "rte_pktmbuf_append",
    "rte_pktmbuf_trim",
    "rte_pktmbuf_headroom",
    "rte_pktmbuf_tailroom",
    "rte_pktmbuf_reset",
    "rte_mbuf_refcnt_read",
    // ring (control <-> worker queues later)
    "rte_ring_create",
    "rte_ring_free",
    "rte_ring_enqueue_burst",
    "rte_ring_dequeue_burst",
    "rte_ring_count",
    // ethdev
    "rte_eth_dev_count_avail",
    "rte_eth_dev_get_port_by_name",
    "rte_eth_dev_get_name_by_port",
    "rte_eth_dev_is_valid_port",
    "rte_eth_dev_socket_id",
    "rte_eth_dev_info_get",
    "rte_eth_dev_configure",
    "rte_eth_dev_adjust_nb_rx_tx_desc",
    "rte_eth_rx_queue_setup",
    "rte_eth_tx_queue_setup",
    "rte_eth_dev_start",
    "rte_eth_dev_stop",
    "rte_eth_dev_close",
    "rte_eth_promiscuous_enable",
    "rte_eth_dev_set_mtu",
    "rte_eth_promiscuous_get",
    "rte_eth_macaddr_get",
    "rte_eth_link_get_nowait",
    "rte_eth_stats_get",
    "rte_eth_stats_reset",
    "rte_eth_rx_burst",
    "rte_eth_tx_burst",
    "rte_shim_rss_hf_l3_l4",
    // logging and interrupt callbacks (the memif poll gate, dataplane/dpdk/src/memif.rs)
    "rte_openlog_stream",
    "fopencookie",
    "rte_log_register",
    "rte_log_get_level",
    "rte_log_set_level",
    "rte_log_get_global_level",
    "rte_log_set_global_level",
    "rte_log_cur_msg_loglevel",
    "rte_log_cur_msg_logtype",
    "rte_intr_instance_alloc",
    "rte_intr_fd_set",
    "rte_intr_type_set",
    "rte_intr_callback_register",
    // packet capture by a secondary process (dpdk-dumpcap)
    "rte_pdump_init",
    "rte_pdump_uninit",
    // packet headers
    "rte_ipv4_cksum",
    "rte_ipv4_udptcp_cksum",
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets this"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets this"));
    let header = manifest_dir.join("wrapper.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    // Link flags (shared libdpdk by default). The pkg-config crate emits rustc-link-lib lines.
    pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .expect("libdpdk not found by pkg-config: install libdpdk-dev (scripts/install-deps.sh)");

    // The full cflags: the pkg-config crate drops `-include rte_config.h` and `-march=corei7`
    // (N4), and the C wrappers do not compile without the latter (N5). Never -march=native.
    let cflags: Vec<String> = pkg_config_cflags()
        .into_iter()
        .chain(["-DALLOW_EXPERIMENTAL_API".to_owned()]) // N1
        .collect();

    pin_libclang();

    let mut builder = bindgen::Builder::default()
        .header(header.to_str().expect("utf-8 path"))
        .clang_args(&cflags)
        // Types reachable from the functions come in by themselves; these add the header
        // structs the packet path reads and the enums/flags the port setup uses.
        .allowlist_type("rte_(ether|vlan|arp|ipv4|ipv6|tcp|udp|icmp)_.*")
        .allowlist_type("rte_eth_(conf|rxmode|txmode|rss_conf|rx_mq_mode|tx_mq_mode|link|stats)")
        .allowlist_var("RTE_.*")
        .allowlist_var("RING_F_.*")
        .allowlist_var("SOCKET_ID_ANY|LCORE_ID_ANY")
        .allowlist_item("E_RTE_.*")
        .derive_default(true)
        .generate_comments(false)
        .layout_tests(true)
        .prepend_enum_name(false)
        .wrap_static_fns(true)
        .wrap_static_fns_path(out.join("static_wrappers"))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for f in FUNCTIONS {
        builder = builder.allowlist_function(format!("^{f}$"));
    }
    builder
        .generate()
        .expect("bindgen failed on wrapper.h")
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    // The generated C file includes the header by the absolute path given above (N3).
    let mut cc = cc::Build::new();
    cc.file(out.join("static_wrappers.c")).include(&manifest_dir).opt_level(2).warnings(false);
    for f in &cflags {
        cc.flag(f);
    }
    cc.flag("-Wno-duplicate-decl-specifier"); // N2
    cc.compile("dpdk_static_wrappers");
}

/// `pkg-config --cflags libdpdk`, split on whitespace.
fn pkg_config_cflags() -> Vec<String> {
    let output =
        Command::new("pkg-config").args(["--cflags", "libdpdk"]).output().expect("run pkg-config");
    assert!(
        output.status.success(),
        "pkg-config --cflags libdpdk failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("utf-8 cflags")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// N10: clang-sys loads the newest libclang on the machine, but bindgen takes its builtin
/// include directory from the `clang` binary. When they differ (a second LLVM installed),
/// the intrinsics headers fail to parse. Unless the caller chose one, load the libclang that
/// belongs to the `clang` on PATH.
fn pin_libclang() {
    if env::var_os("LIBCLANG_PATH").is_some() {
        return;
    }
    let Ok(output) = Command::new("clang").arg("--version").output() else {
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let major = text
        .split("version ")
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.trim().parse::<u32>().ok());
    if let Some(major) = major {
        let dir = format!("/usr/lib/llvm-{major}/lib");
        if Path::new(&dir).exists() {
            env::set_var("LIBCLANG_PATH", dir);
        }
    }
}
