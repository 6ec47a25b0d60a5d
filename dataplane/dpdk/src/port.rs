//! Ethernet ports and their queues.
//!
//! This module owns ethdev: looking a port up by device name, configuring RX/TX queues (RSS
//! when the driver offers it), starting it in promiscuous mode, reading its MAC, link and
//! hardware counters, and stopping and closing it on drop. Each queue is handed out once, as
//! an owned [`RxQueue`] or [`TxQueue`], because DPDK queues are not thread-safe: one owner
//! polls or transmits. Queues borrow their [`Port`], so the port cannot be closed under them.
//! It must never decide what to do with packets.

use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

use super::eal::Eal;
use super::error::DpdkError;
use super::mbuf::{Mbuf, MbufBurst, MAX_BURST};
use super::mempool::Mempool;

/// An ethdev port id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortId(pub u16);

/// How to set a port up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSetup {
    /// RX queues (one per worker).
    pub rx_queues: u16,
    /// TX queues for the workers (one per worker).
    pub tx_queues: u16,
    /// Additional TX queues after the workers' ones, for non-worker threads (for example a
    /// control thread sending ARP requests). Their ids are `tx_queues..tx_queues + extra`.
    pub extra_tx_queues: u16,
    /// RX descriptors per queue (DPDK may adjust it to the device's limits).
    pub rx_desc: u16,
    /// TX descriptors per queue (DPDK may adjust it to the device's limits).
    pub tx_desc: u16,
}

/// Link state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Whether the link is up.
    pub up: bool,
    /// Speed in Mbit/s (0 when unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// The port's hardware counters (`rte_eth_stats`), totals since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EthStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets transmitted.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes transmitted.
    pub obytes: u64,
    /// Packets dropped by the hardware because no RX descriptor was free.
    pub imissed: u64,
    /// Erroneous received packets.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// A started Ethernet port. Dropping it stops and closes the device.
#[derive(Debug)]
pub struct Port<'e> {
    id: PortId,
    name: String,
    driver: String,
    setup: PortSetup,
    rss: bool,
    promiscuous: bool,
    queues_taken: AtomicBool,
    _eal: PhantomData<&'e Eal>,
}

impl<'e> Port<'e> {
    /// Finds the port called `name` (a vdev name such as `net_tap0`, or a PCI address),
    /// configures it as `setup` says with RX buffers from `pool`, and starts it in promiscuous
    /// mode where the driver supports that.
    pub fn open(
        eal: &'e Eal,
        name: &str,
        setup: PortSetup,
        pool: &Mempool<'e>,
    ) -> Result<Self, DpdkError> {
        let id = Self::find(eal, name)?;
        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: id is a valid port; info is a writable rte_eth_dev_info.
        DpdkError::check("rte_eth_dev_info_get", unsafe {
            dpdk_sys::rte_eth_dev_info_get(id.0, &mut info)
        })?;
        let driver = if info.driver_name.is_null() {
            String::from("?")
        } else {
            // SAFETY: DPDK fills driver_name with a static NUL-terminated string.
            unsafe { CStr::from_ptr(info.driver_name) }.to_string_lossy().into_owned()
        };
        let tx_total = setup.tx_queues.checked_add(setup.extra_tx_queues).ok_or_else(|| {
            DpdkError::Invalid { what: format!("port {name}: too many TX queues") }
        })?;
        if setup.rx_queues == 0 || setup.rx_queues > info.max_rx_queues {
            return Err(DpdkError::Invalid {
                what: format!(
                    "port {name} (driver {driver}) supports 1..={} RX queues, {} requested",
                    info.max_rx_queues, setup.rx_queues
                ),
            });
        }
        if tx_total == 0 || tx_total > info.max_tx_queues {
            return Err(DpdkError::Invalid {
                what: format!(
                    "port {name} (driver {driver}) supports 1..={} TX queues, {tx_total} requested",
                    info.max_tx_queues
                ),
            });
        }

        let mut conf = dpdk_sys::rte_eth_conf::default();
        // SAFETY: rte_shim_rss_hf_l3_l4 only returns a constant.
        let wanted_rss = unsafe { dpdk_sys::rte_shim_rss_hf_l3_l4() };
        let rss_hf = wanted_rss & info.flow_type_rss_offloads;
        let rss = setup.rx_queues > 1 && rss_hf != 0;
        if rss {
            conf.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        }
        // SAFETY: id is valid; conf is a fully initialised rte_eth_conf that DPDK only reads.
        DpdkError::check("rte_eth_dev_configure", unsafe {
            dpdk_sys::rte_eth_dev_configure(id.0, setup.rx_queues, tx_total, &conf)
        })?;
        let (mut rx_desc, mut tx_desc) = (setup.rx_desc, setup.tx_desc);
        // SAFETY: id is valid and configured; both pointers are to writable u16s.
        DpdkError::check("rte_eth_dev_adjust_nb_rx_tx_desc", unsafe {
            dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(id.0, &mut rx_desc, &mut tx_desc)
        })?;
        // SAFETY: id is valid; the call only reads the device's NUMA node.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id.0) };
        // Unknown (-1, SOCKET_ID_ANY) is passed on as the unsigned value the setup calls take.
        let socket = u32::try_from(socket).unwrap_or(u32::MAX);
        for q in 0..setup.rx_queues {
            // SAFETY: id is configured with rx_queues queues and q is below that; a null
            // rx_conf selects the driver defaults; the pool outlives the port ('e).
            DpdkError::check("rte_eth_rx_queue_setup", unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    id.0,
                    q,
                    rx_desc,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            })?;
        }
        for q in 0..tx_total {
            // SAFETY: id is configured with tx_total queues and q is below that; a null
            // tx_conf selects the driver defaults.
            DpdkError::check("rte_eth_tx_queue_setup", unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(id.0, q, tx_desc, socket, std::ptr::null())
            })?;
        }
        // SAFETY: id is valid, configured and all its queues are set up.
        DpdkError::check("rte_eth_dev_start", unsafe { dpdk_sys::rte_eth_dev_start(id.0) })?;
        // From here on Drop stops and closes the port, also on the error paths below.
        let mut port = Port {
            id,
            name: name.to_owned(),
            driver,
            setup: PortSetup { rx_desc, tx_desc, ..setup },
            rss,
            promiscuous: false,
            queues_taken: AtomicBool::new(false),
            _eal: PhantomData,
        };
        // Some drivers have no promiscuous mode (ENOTSUP): not an error, see promiscuous().
        // SAFETY: id is a valid, started port.
        port.promiscuous = unsafe { dpdk_sys::rte_eth_promiscuous_enable(id.0) } == 0;
        Ok(port)
    }

    fn find(_eal: &'e Eal, name: &str) -> Result<PortId, DpdkError> {
        let not_found = || DpdkError::PortNotFound {
            name: name.to_owned(),
            available: {
                let names = Self::all_names(_eal);
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            },
        };
        let cname = CString::new(name).map_err(|_| not_found())?;
        let mut id = 0u16;
        // SAFETY: EAL is initialised; cname is a valid C string and id a writable u16.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if ret < 0 {
            return Err(not_found());
        }
        Ok(PortId(id))
    }

    /// The device names of every port EAL probed, in port-id order.
    pub fn all_names(_eal: &Eal) -> Vec<String> {
        let mut names = Vec::new();
        for id in 0..u16::try_from(dpdk_sys::RTE_MAX_ETHPORTS).expect("fits u16") {
            // SAFETY: EAL is initialised; any port id may be asked about.
            if unsafe { dpdk_sys::rte_eth_dev_is_valid_port(id) } == 0 {
                continue;
            }
            let mut buf = [0 as std::ffi::c_char; dpdk_sys::RTE_ETH_NAME_MAX_LEN as usize];
            // SAFETY: id is valid and buf has the RTE_ETH_NAME_MAX_LEN bytes DPDK requires.
            if unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) } == 0 {
                // SAFETY: on success DPDK wrote a NUL-terminated name into buf.
                let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
                names.push(name.to_string_lossy().into_owned());
            }
        }
        names
    }

    /// DPDK's id of the port (the index of `rte_eth_devices`).
    pub fn id(&self) -> PortId {
        self.id
    }

    /// The device name it was opened by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver's name (`net_tap`, `net_null`, ...).
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The setup in force (descriptor counts as adjusted by DPDK).
    pub fn setup(&self) -> PortSetup {
        self.setup
    }

    /// Whether RX is spread over the queues by RSS (only with more than one RX queue and a
    /// driver that hashes L3/L4 flows).
    pub fn rss(&self) -> bool {
        self.rss
    }

    /// Whether promiscuous mode is on (some virtual drivers do not have one).
    pub fn promiscuous(&self) -> bool {
        self.promiscuous
    }

    /// The port's MAC address (its bytes are `.0`).
    pub fn mac(&self) -> Result<[u8; 6], DpdkError> {
        let mut addr = dpdk_sys::rte_ether_addr::default();
        // SAFETY: the port is valid; addr is a writable rte_ether_addr.
        DpdkError::check("rte_eth_macaddr_get", unsafe {
            dpdk_sys::rte_eth_macaddr_get(self.id.0, &mut addr)
        })?;
        Ok(addr.addr_bytes)
    }

    /// Sets the port's MTU (IP bytes; the frame may be 18 bytes longer).
    pub fn set_mtu(&self, mtu: u16) -> Result<(), DpdkError> {
        // SAFETY: the port is valid; the call only changes the device's MTU setting.
        DpdkError::check("rte_eth_dev_set_mtu", unsafe {
            dpdk_sys::rte_eth_dev_set_mtu(self.id.0, mtu)
        })
        .map(drop)
    }

    /// The current link state, without waiting.
    pub fn link(&self) -> Result<LinkStatus, DpdkError> {
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: the port is valid; link is a writable rte_eth_link.
        DpdkError::check("rte_eth_link_get_nowait", unsafe {
            dpdk_sys::rte_eth_link_get_nowait(self.id.0, &mut link)
        })?;
        Ok(LinkStatus {
            up: u32::from(link.link_status()) == dpdk_sys::RTE_ETH_LINK_UP,
            speed_mbps: link.link_speed,
            full_duplex: u32::from(link.link_duplex()) == dpdk_sys::RTE_ETH_LINK_FULL_DUPLEX,
        })
    }

    /// The hardware counters. Safe to call while workers use the queues.
    pub fn stats(&self) -> Result<EthStats, DpdkError> {
        let mut s = dpdk_sys::rte_eth_stats::default();
        // SAFETY: the port is valid; s is a writable rte_eth_stats.
        DpdkError::check("rte_eth_stats_get", unsafe {
            dpdk_sys::rte_eth_stats_get(self.id.0, &mut s)
        })?;
        Ok(EthStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Hands out every queue, once: `rx_queues` RX queues and `tx_queues + extra_tx_queues`
    /// TX queues, indexed by queue id. `None` on a second call.
    pub fn take_queues(&self) -> Option<(Vec<RxQueue<'_>>, Vec<TxQueue<'_>>)> {
        if self.queues_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let rx = (0..self.setup.rx_queues)
            .map(|queue| RxQueue { port: self.id.0, queue, _port: PhantomData })
            .collect();
        let tx = (0..self.setup.tx_queues + self.setup.extra_tx_queues)
            .map(|queue| TxQueue {
                port: self.id.0,
                queue,
                buf: MbufBurst::new(),
                _port: PhantomData,
            })
            .collect();
        Some((rx, tx))
    }
}

impl Drop for Port<'_> {
    fn drop(&mut self) {
        // SAFETY: no queue handle is alive (they borrow self), so nothing polls the port;
        // stopping and closing a started port is always allowed. Errors cannot be acted on
        // during teardown and are ignored.
        unsafe {
            dpdk_sys::rte_eth_dev_stop(self.id.0);
            dpdk_sys::rte_eth_dev_close(self.id.0);
        }
    }
}

/// One RX queue of a started port, owned by the single thread that polls it.
#[derive(Debug)]
pub struct RxQueue<'p> {
    port: u16,
    queue: u16,
    _port: PhantomData<&'p ()>,
}

impl<'p> RxQueue<'p> {
    /// The queue's index on its port (worker `i` owns queue `i` of every port).
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// The port the queue belongs to.
    pub fn port(&self) -> PortId {
        PortId(self.port)
    }

    /// Receives up to `max` packets (at most [`MAX_BURST`]).
    #[inline]
    pub fn rx_burst(&mut self, max: u16) -> MbufBurst<'p> {
        let mut burst = MbufBurst::new();
        self.rx_burst_into(&mut burst, max);
        burst
    }

    /// Receives up to `max` packets into `burst`, after those it holds (up to [`MAX_BURST`]
    /// in all); returns how many arrived. The worker's loop receives into one burst that it
    /// empties with [`MbufBurst::drain`], so that no burst is moved per poll.
    #[inline]
    pub fn rx_burst_into(&mut self, burst: &mut MbufBurst<'p>, max: u16) -> usize {
        let (port, queue) = (self.port, self.queue);
        // SAFETY: rx_burst writes at most `room` (<= MAX_BURST) received mbufs to `free` and
        // returns how many; each is a valid mbuf now owned by nobody else, from the port's
        // pool, which lives for 'p. The port is started (it outlives 'p) and this queue is
        // polled only through &mut self.
        unsafe {
            burst.fill(usize::from(max), |free, room| {
                let room = u16::try_from(room).unwrap_or(u16::MAX);
                usize::from(dpdk_sys::rte_eth_rx_burst(port, queue, free, room))
            })
        }
    }
}

/// What a transmit did: packets the driver took, and packets it refused (freed, dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxResult {
    /// Packets handed to the driver.
    pub sent: u16,
    /// Packets the driver did not take; they were freed.
    pub dropped: u16,
}

/// One TX queue of a started port, owned by a single thread (any thread: a worker lcore or a
/// non-EAL control thread). It buffers up to [`MAX_BURST`] packets (l3fwd style): `push`
/// flushes when the buffer is full, and the owner calls [`TxQueue::flush`] when its drain
/// deadline passes.
#[derive(Debug)]
pub struct TxQueue<'p> {
    port: u16,
    queue: u16,
    buf: MbufBurst<'p>,
    _port: PhantomData<&'p ()>,
}

impl<'p> TxQueue<'p> {
    /// The queue's index on its port (worker `i` owns queue `i` of every port).
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// The port the queue belongs to.
    pub fn port(&self) -> PortId {
        PortId(self.port)
    }

    /// Packets waiting in the buffer.
    #[inline]
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Buffers a packet; transmits the buffer when it becomes full. The result counts that
    /// transmit (zero when nothing was sent).
    #[inline]
    pub fn push(&mut self, m: Mbuf<'p>) -> TxResult {
        // The buffer is flushed whenever it fills, so there is always room.
        let pushed = self.buf.push(m);
        debug_assert!(pushed.is_ok());
        if self.buf.is_full() {
            self.flush()
        } else {
            TxResult::default()
        }
    }

    /// Transmits whatever is buffered; frees (drops) what the driver does not take.
    #[inline]
    pub fn flush(&mut self) -> TxResult {
        if self.buf.is_empty() {
            return TxResult::default();
        }
        let (port, queue) = (self.port, self.queue);
        // SAFETY: send_raw takes ownership of all of them (the driver the sent ones, the
        // rest freed).
        unsafe { self.buf.hand_over(|pkts, len| send_raw(port, queue, pkts, len)) }
    }

    /// Transmits a whole burst now, bypassing the buffer; frees what the driver does not take.
    pub fn send(&mut self, mut burst: MbufBurst<'p>) -> TxResult {
        self.send_now(&mut burst)
    }

    /// [`TxQueue::send`] for a burst the caller keeps: every packet of `burst` is transmitted
    /// now, bypassing the buffer (what the driver does not take is freed), and `burst` is left
    /// empty, to be filled again.
    #[inline]
    pub fn send_now(&mut self, burst: &mut MbufBurst<'p>) -> TxResult {
        let (port, queue) = (self.port, self.queue);
        // SAFETY: as in flush().
        unsafe { burst.hand_over(|pkts, len| send_raw(port, queue, pkts, len)) }
    }
}

/// Transmits `pkts[..len]` on `port`/`queue` and bulk-frees the ones the driver did not take.
///
/// # Safety
/// `pkts[..len]` (`len` <= [`MAX_BURST`]) are valid mbufs owned by the caller, which owns
/// none of them afterwards; the caller holds the queue exclusively (a `&mut TxQueue`).
#[inline]
unsafe fn send_raw(
    port: u16,
    queue: u16,
    pkts: *mut *mut dpdk_sys::rte_mbuf,
    len: usize,
) -> TxResult {
    let n = u16::try_from(len.min(MAX_BURST)).unwrap_or(0);
    // SAFETY: the port is started (the caller's TxQueue borrows it); the caller holds the
    // queue exclusively; pkts[..len] are valid mbufs owned by the caller. The driver takes
    // ownership of the first `sent`.
    let sent = unsafe { dpdk_sys::rte_eth_tx_burst(port, queue, pkts, n) };
    if sent < n {
        // SAFETY: pkts[sent..len] were not taken by the driver and are still owned here;
        // they are freed once and the caller forgets them.
        unsafe {
            dpdk_sys::rte_pktmbuf_free_bulk(pkts.add(usize::from(sent)), u32::from(n - sent));
        }
    }
    TxResult { sent, dropped: n - sent }
}
