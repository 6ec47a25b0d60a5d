/*
 * The DPDK headers dpdk-sys binds, plus a few `static inline` shims for things that are
 * macros or thread-local variables in DPDK and so cannot be bound directly
 * (docs/dpdk-notes.md N7). bindgen's `wrap_static_fns` turns every allowlisted `static inline`
 * here and in DPDK's headers into a real exported `NAME__extern` function, compiled by
 * build.rs with `cc`.
 */
/* fopencookie(3), which routes DPDK's log into the memif poll gate, is a GNU extension; the
 * define must come before any system header. */
#define _GNU_SOURCE
#include <stdio.h>
#include <rte_config.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_log.h>
#include <rte_interrupts.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_pause.h>
#include <rte_malloc.h>
#include <rte_ring.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>
#include <rte_pdump.h>

/* rte_errno is a per-lcore TLS variable. */
static inline int rte_shim_errno(void) { return rte_errno; }

/* The RSS hash functions Spillway asks for (function-like macros bindgen cannot expand). */
static inline uint64_t rte_shim_rss_hf_l3_l4(void)
{
	return RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP;
}
