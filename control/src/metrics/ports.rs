//! Below the workers: the ports' driver counters (what happened before a worker saw a frame)
//! and the exception path's thread between the data port and the kernel interface.

use super::scrape::Scrape;
use crate::view::DataplaneView;
use prometheus_client::metrics::MetricType::Counter;

/// Frames received, transmitted and dropped by each port's driver.
pub(super) fn ports(s: &mut Scrape, view: &dyn DataplaneView) {
    let ports = view.port_counters();
    if ports.is_empty() {
        return;
    }
    let f = s.family(
        "spillway_port_packets",
        "Frames the port's driver received (rx) and transmitted (tx).",
        Counter,
    );
    for (name, c) in &ports {
        f.add(vec![("port", (*name).to_owned()), ("direction", "rx".into())], c.ipackets.get())
            .add(vec![("port", (*name).to_owned()), ("direction", "tx".into())], c.opackets.get());
    }
    let f = s.family(
        "spillway_port_dropped",
        "Frames the port's driver dropped before a worker saw them or after: missed (no free \
         RX descriptor: the worker was behind), rx_errors, rx_nombuf (the mbuf pool was \
         empty), tx_errors. Drivers without statistics (net_memif in DPDK 22.11) report 0.",
        Counter,
    );
    for (name, c) in &ports {
        let l = |why: &str| vec![("port", (*name).to_owned()), ("reason", why.to_owned())];
        f.add(l("missed"), c.imissed.get())
            .add(l("rx_errors"), c.ierrors.get())
            .add(l("rx_nombuf"), c.rx_nombuf.get())
            .add(l("tx_errors"), c.oerrors.get());
    }
}

/// Frames through the exception path and those it dropped, both ways.
pub(super) fn kernel_path(s: &mut Scrape, view: &dyn DataplaneView) {
    let Some(k) = view.kernel_counters() else { return };
    s.family(
        "spillway_kernel_path_frames",
        "Frames through the exception path: to_kernel (written to the kernel interface), \
         from_kernel (sent by the kernel, queued for the data port).",
        Counter,
    )
    .add(vec![("direction", "to_kernel".into())], k.to_kernel.get())
    .add(vec![("direction", "from_kernel".into())], k.from_kernel.get());
    s.family(
        "spillway_kernel_path_dropped",
        "Frames the exception path dropped: to_kernel (the kernel interface refused them: \
         the kernel is not reading), from_kernel (the queue to the data port was full). \
         The workers' own drops when its queue is full are reason kernel_busy.",
        Counter,
    )
    .add(vec![("direction", "to_kernel".into())], k.to_kernel_dropped.get())
    .add(vec![("direction", "from_kernel".into())], k.from_kernel_dropped.get());
}
