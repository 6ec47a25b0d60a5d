//! Starting the data plane's pieces before the workers run: the lcores they run on, the ports
//! and their queues, and the leftovers of an earlier run that would stop DPDK from starting.
//!
//! Errors say what is wrong in the terms of the `dataplane:` configuration section; the caller
//! names the field.

use std::path::PathBuf;

use spillway_core::wire::MacDisplay;

use crate::dpdk::{DpdkError, Eal, LcoreId, Mempool, Port, PortSetup};
use crate::worker::PortQueues;

/// The lcores the workers run on: `wanted` (the configured list) when given, else the first
/// `count` EAL worker lcores. The error is a sentence for the configuration field at fault
/// (`dataplane.lcores[i]` with the index, or `dataplane.workers`).
pub fn worker_lcores(
    eal: &Eal,
    wanted: Option<&[u32]>,
    count: usize,
) -> Result<Vec<LcoreId>, (Option<usize>, String)> {
    let available = eal.worker_lcores();
    let main = eal.main_lcore();
    if let Some(wanted) = wanted {
        let mut out = Vec::with_capacity(wanted.len());
        for (i, &l) in wanted.iter().enumerate() {
            let l = LcoreId(l);
            if !available.contains(&l) {
                return Err((
                    Some(i),
                    format!(
                        "lcore {l} is not an EAL worker lcore (worker lcores: {}; main lcore \
                         {main} runs no worker)",
                        or_none(&available)
                    ),
                ));
            }
            out.push(l);
        }
        return Ok(out);
    }
    if count > available.len() {
        return Err((
            None,
            format!(
                "{count} worker(s) need {count} EAL worker lcore(s) but EAL has {} ({}; main \
                 lcore {main} runs no worker): widen -l/--lcores in dataplane.eal_args",
                available.len(),
                or_none(&available)
            ),
        ));
    }
    Ok(available[..count].to_vec())
}

/// Opens every port in `names` with `setup`, logging each; the error names the port's index.
pub fn open_ports<'e>(
    eal: &'e Eal,
    names: &[String],
    setup: PortSetup,
    pool: &Mempool<'e>,
) -> Result<Vec<Port<'e>>, (usize, DpdkError)> {
    let mut ports = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let port = Port::open(eal, name, setup, pool).map_err(|e| (i, e))?;
        log_port(&port);
        ports.push(port);
    }
    Ok(ports)
}

/// Every port's queues, dealt out by worker: worker `w` gets queue `w` of every port.
pub fn queues_by_worker<'p>(ports: &'p [Port<'_>], workers: usize) -> Vec<Vec<PortQueues<'p>>> {
    let mut out: Vec<Vec<PortQueues<'p>>> = (0..workers).map(|_| Vec::new()).collect();
    for port in ports {
        let (rx, tx) = port.take_queues().expect("each port's queues are taken once, here");
        for (w, (rx, tx)) in rx.into_iter().zip(tx).enumerate() {
            out[w].push(PortQueues { rx, tx });
        }
    }
    out
}

/// Sets the port's MTU. A driver without an MTU setting (net_memif among others) is logged and
/// accepted: the node's MTU still bounds what the path sends.
pub fn set_mtu(port: &Port<'_>, mtu: u16) -> Result<(), DpdkError> {
    match port.set_mtu(mtu) {
        Err(DpdkError::Call { errno, .. }) if errno == libc::ENOTSUP => {
            tracing::info!(
                port = port.name(),
                driver = port.driver(),
                mtu,
                "the driver cannot set the port MTU (ENOTSUP); dataplane.node.mtu still applies"
            );
            Ok(())
        }
        r => r,
    }
}

fn log_port(port: &Port<'_>) {
    let mac = port.mac().map(|m| MacDisplay(m).to_string()).unwrap_or_else(|e| e.to_string());
    let link = port.link().map(|l| if l.up { "up" } else { "down" }).unwrap_or("unknown");
    let setup = port.setup();
    tracing::info!(
        port = port.name(),
        id = port.id().0,
        driver = port.driver(),
        %mac,
        link,
        rx_queues = setup.rx_queues,
        tx_queues = setup.tx_queues + setup.extra_tx_queues,
        rx_desc = setup.rx_desc,
        tx_desc = setup.tx_desc,
        rss = port.rss(),
        promiscuous = port.promiscuous(),
        "port started"
    );
}

/// The lcores as a list for messages: `1, 2, 3`.
pub fn join(lcores: &[LcoreId]) -> String {
    lcores.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn or_none(lcores: &[LcoreId]) -> String {
    if lcores.is_empty() {
        "none".to_owned()
    } else {
        format!("lcores {}", join(lcores))
    }
}

/// The socket files of the `net_memif` server ports in `eal_args` (`--vdev net_memif...`
/// with `role=server`, the default, and a `socket=` path; DPDK's default path otherwise).
fn memif_server_sockets(eal_args: &[String]) -> Vec<PathBuf> {
    let vdevs = eal_args.windows(2).filter(|w| w[0] == "--vdev").map(|w| w[1].as_str());
    let inline = eal_args.iter().filter_map(|a| a.strip_prefix("--vdev="));
    vdevs
        .chain(inline)
        .filter(|v| v.starts_with("net_memif"))
        .filter_map(|v| {
            let mut socket = "/run/memif.sock";
            for kv in v.split(',').skip(1) {
                match kv.split_once('=') {
                    Some(("role", role)) if role != "server" => return None,
                    Some(("socket", path)) => socket = path,
                    _ => {}
                }
            }
            Some(PathBuf::from(socket))
        })
        .collect()
}

/// A Spillway that was killed leaves its memif socket file behind, and DPDK then fails to
/// create the port (`Address already in use`). Before EAL starts, remove such a file when it is
/// a socket nobody listens on (a connection is refused); leave it when a process answers (two
/// servers on one socket is an operator error that DPDK reports).
pub fn remove_stale_memif_sockets(eal_args: &[String]) {
    use std::os::unix::fs::FileTypeExt;
    for path in memif_server_sockets(eal_args) {
        let is_socket = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket());
        if !is_socket {
            continue;
        }
        match std::os::unix::net::UnixStream::connect(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                match std::fs::remove_file(&path) {
                    Ok(()) => tracing::info!(
                        socket = %path.display(),
                        "removed a stale memif socket (no process listens on it)"
                    ),
                    Err(e) => tracing::warn!(
                        socket = %path.display(),
                        "cannot remove a stale memif socket: {e}"
                    ),
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn memif_server_sockets_come_from_the_vdev_arguments() {
        let a = args(&[
            "--no-huge",
            "--vdev",
            "net_memif0,role=server,socket=/tmp/a.sock,socket-abstract=no",
            "--vdev=net_memif1,socket=/tmp/b.sock",
            "--vdev",
            "net_memif2,role=client,socket=/tmp/c.sock",
            "--vdev",
            "net_tap0,iface=x",
            "--vdev",
            "net_memif3",
        ]);
        assert_eq!(
            memif_server_sockets(&a),
            ["/tmp/a.sock", "/run/memif.sock", "/tmp/b.sock"].map(PathBuf::from).to_vec()
        );
    }

    #[test]
    fn a_stale_memif_socket_is_removed_and_a_live_one_kept() {
        let dir = std::env::temp_dir().join(format!("spw-setup-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let stale = dir.join("stale.sock");
        let live = dir.join("live.sock");
        // A listener that went away without removing its file, as a killed process leaves it.
        drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
        let _listening = std::os::unix::net::UnixListener::bind(&live).expect("bind");
        let a = args(&[
            "--vdev",
            &format!("net_memif0,socket={},socket-abstract=no", stale.display()),
            "--vdev",
            &format!("net_memif1,socket={},socket-abstract=no", live.display()),
        ]);
        remove_stale_memif_sockets(&a);
        assert!(!stale.exists(), "the stale socket is removed");
        assert!(live.exists(), "a socket somebody listens on is kept");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
