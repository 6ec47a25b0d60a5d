//! The fleet's checks: the exception interface's name is free and its driver available, the
//! routing daemon's control socket is there (`dataplane.kernel_interface`, `announce`); the
//! sync key file is usable and each sync peer reachable from the node's prefix (`fleet.sync`);
//! the table file's directory exists (`fleet.table_file`).
//!
//! A peer's reachability is judged from the configuration, not from the kernel's routes: the
//! sync traffic goes over the kernel interface, which Spillway creates at start, so before the
//! start the kernel has no route through it to look up. A peer inside the node's prefix is
//! reached directly; one outside needs a route the operator adds (a WARN that says so).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use spillway_control::config::{Config, KernelDriver, SyncPeer};
use spillway_control::sync::{KeyProblem, KeyRing, KEY_BYTES};
use spillway_core::addr::Addr;

use super::{Finding, Host};
use crate::kernel;

/// What the fleet settings need from the host.
pub fn check(config: &Config, host: &Host) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(k) = &config.dataplane.kernel_interface {
        let vhost = host.root.join("dev/vhost-net").exists();
        match kernel::plan_on(k, &host.sys.join("class/net"), vhost) {
            Ok(plan) => out.push(Finding::pass(
                "kernel",
                format!(
                    "dataplane.kernel_interface: `{}` is free; it will be DPDK's net_{} ({})",
                    plan.name, plan.driver, plan.vdev
                ),
            )),
            Err(m) => out.push(
                Finding::fail("kernel", format!("dataplane.kernel_interface.name: {m}"))
                    .fix("pick another `name`, or remove the interface (`ip link del NAME`)"),
            ),
        }
        if k.driver == KernelDriver::VirtioUser && !vhost {
            out.push(
                Finding::fail(
                    "kernel",
                    "dataplane.kernel_interface.driver: virtio_user needs /dev/vhost-net, which \
                     this host does not have",
                )
                .fix("`modprobe vhost_net`, or `driver: tap` (or `auto`)"),
            );
        }
    }
    if let Some(a) = &config.announce {
        if config.dataplane.kernel_interface.is_none() {
            out.push(Finding::warn(
                "announce",
                "announce without dataplane.kernel_interface: the VIP routes are blackhole \
                 routes that outlive a killed process (a clean stop withdraws them), and the \
                 routing daemon needs another path to the routers",
            ));
        }
        if let Some(sock) = &a.bird_socket {
            let path = host.root.join(sock.trim_start_matches('/'));
            if is_socket(&path) {
                out.push(Finding::pass("announce", format!("announce.bird_socket: {sock} exists")));
            } else {
                out.push(
                    Finding::warn(
                        "announce",
                        format!(
                            "announce.bird_socket: {sock} is not a socket yet: BIRD is not \
                             running, so no router will hear of the VIPs (Spillway forwards \
                             anyway and reports BIRD down until it answers)"
                        ),
                    )
                    .fix("start BIRD (docs/scale-out.md has its configuration)"),
                );
            }
        }
    }
    if let Some(s) = config.fleet_sync() {
        out.push(key_file(&s.key_file, host));
        let name = config.dataplane.kernel_interface.as_ref().map_or("", |k| k.name.as_str());
        for (i, p) in s.peers.iter().enumerate() {
            out.push(peer(config, i, p, name));
        }
    }
    if let Some(t) = config.table_file() {
        out.push(table_file(t, host));
    }
    out.extend(quic_key_files(config, host));
    out
}

/// Each `quic_lb` key file, read as a start or a reload reads it (a missing or unfit one
/// refuses the configuration there). The keys are never printed.
fn quic_key_files(config: &Config, host: &Host) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, s) in config.services.iter().enumerate() {
        let Some(q) = &s.backend_service.quic_lb else { continue };
        for (j, c) in q.configs.iter().enumerate() {
            let Some(file) = &c.key_file else { continue };
            let field =
                format!("services[{i}].backend_service.quic_lb.configs[{j}].key_file {file}");
            let rooted = host.path(Path::new(file));
            match spillway_control::config::quic::read_key(&rooted.to_string_lossy()) {
                Ok(_) => out.push(Finding::pass(
                    "quic",
                    format!("{field}: a 16-octet AES key, private to its owner"),
                )),
                Err(e) => out.push(
                    Finding::fail(
                        "quic",
                        format!("{field}: {}", e.replace(&*rooted.to_string_lossy(), file)),
                    )
                    .fix(format!(
                        "umask 077; openssl rand -hex 16 > {file} (the servers get the same key)"
                    )),
                ),
            }
        }
    }
    out
}

/// How to make a key file, for the fixes.
const KEY_HOWTO: &str = "head -c 32 /dev/urandom | xxd -p -c 64 > FILE; chmod 600 FILE (the same \
                         file on every instance of the fleet)";

/// `fleet.sync.key_file`, read by the sync thread's own reader (so the preflight and the start
/// agree): a regular file only its owner may read or write, holding one or two lines of 64 hex
/// digits (the second during a key rotation), not all zero. The keys themselves are never
/// printed, not even in part.
fn key_file(file: &Path, host: &Host) -> Finding {
    let shown = file.display();
    let field = format!("fleet.sync.key_file {shown}");
    let fix = KEY_HOWTO.replace("FILE", &shown.to_string());
    let path = host.path(file);
    let problem = match KeyRing::read_file(&path) {
        Ok(ring) => {
            let mode = std::fs::metadata(&path).map_or(0, |m| m.permissions().mode() & 0o777);
            return Finding::pass(
                "sync",
                format!(
                    "{field}: {}, private to its owner (mode {mode:04o}); every instance of \
                     the fleet needs the same",
                    if ring.other.is_some() {
                        "two 32-byte keys (a rotation: sealing with the first, accepting both)"
                    } else {
                        "a 32-byte key"
                    }
                ),
            );
        }
        Err(e) => e.problem,
    };
    // The messages name the configured path, not the host-rooted one read.
    let message = match problem {
        KeyProblem::NotAbsolute => "is not an absolute path".to_owned(),
        KeyProblem::Io(e) => e,
        KeyProblem::NotRegularFile => "not a regular file".to_owned(),
        KeyProblem::TooOpen(mode) => {
            return Finding::fail(
                "sync",
                format!(
                    "{field}: its group or other users may read or write it (mode {mode:04o}): \
                     whoever reads the key can forge connection entries"
                ),
            )
            .fix(format!("chmod 600 {shown}"));
        }
        KeyProblem::Length(n) if n > 2 * KEY_BYTES => {
            "has a line longer than the 64 hexadecimal digits of a 32-byte key".to_owned()
        }
        KeyProblem::Length(n) => {
            format!("has a line of {n} characters, not the 64 hexadecimal digits of a 32-byte key")
        }
        KeyProblem::TooManyKeys => "holds more than two lines (keys)".to_owned(),
        KeyProblem::SameKeyTwice => "holds the same key on both lines".to_owned(),
        KeyProblem::NotHex => "holds a character that is not a hexadecimal digit".to_owned(),
        KeyProblem::AllZero => "is all zeros: a placeholder, not a key".to_owned(),
    };
    Finding::fail("sync", format!("{field}: {message}")).fix(fix)
}

/// One `fleet.sync.peers[i]`: validation made sure it is not the node and of a family the
/// node has; this says whether it is on the node's link or needs a route.
fn peer(config: &Config, i: usize, p: &SyncPeer, interface: &str) -> Finding {
    let addr = Addr::from(p.address);
    let node = config.node_addrs();
    let family = if addr.is_v4() { "ipv4" } else { "ipv6" };
    let field = format!("fleet.sync.peers[{i}] {} (id {})", p.address, p.id);
    let Some((own, len)) = node.own(addr) else {
        // Only for a configuration that did not pass validation.
        return Finding::fail(
            "sync",
            format!("{field}: the node has no {family} address (dataplane.node.{family})"),
        )
        .fix(format!("set dataplane.node.{family}, or remove the peer"));
    };
    if node.on_link(addr) {
        Finding::pass(
            "sync",
            format!(
                "{field}: on-link, inside dataplane.node.{family} {own}/{len}: reached directly \
                 over the kernel interface `{interface}`, UDP port {}",
                p.socket.port()
            ),
        )
    } else {
        let host_len = addr.family_bits();
        let via = node.gateway(addr).map_or_else(|| "ROUTER".to_owned(), |g| g.to_string());
        Finding::warn(
            "sync",
            format!(
                "{field}: outside dataplane.node.{family} {own}/{len}: the host needs a route \
                 to it through the kernel interface `{interface}`, which Spillway does not add; \
                 without one, sync with this peer fails"
            ),
        )
        .fix(format!(
            "add the route when `{interface}` comes up, e.g. `ip route add {}/{host_len} via \
             {via} dev {interface}` (or from BIRD; docs/scale-out.md)",
            p.address
        ))
    }
}

/// `fleet.table_file`: the daemon writes it at a clean stop, so its directory should exist
/// (a WARN: the start does not need it, only the stop), and it must not be a directory.
fn table_file(file: &Path, host: &Host) -> Finding {
    let shown = file.display();
    let dir = file.parent().unwrap_or(Path::new("/"));
    let path = host.path(file);
    if path.is_dir() {
        return Finding::fail("table", format!("fleet.table_file {shown}: is a directory"))
            .fix("name a file in it, e.g. /var/lib/spillway/conntrack.table");
    }
    if !host.path(dir).is_dir() {
        return Finding::warn(
            "table",
            format!(
                "fleet.table_file {shown}: the directory {} does not exist: a clean stop could \
                 not write the connection table, and the next start would begin empty",
                dir.display()
            ),
        )
        .fix(format!(
            "mkdir -p {} (writable by the daemon's user; under the shipped unit's \
             ProtectSystem=strict also in ReadWritePaths=, or StateDirectory=spillway for \
             /var/lib/spillway)",
            dir.display()
        ));
    }
    let state = if path.is_file() {
        "exists: the next start reads it back"
    } else {
        "does not exist yet: a clean stop writes it"
    };
    Finding::pass(
        "table",
        format!("fleet.table_file {shown}: {state} (directory {})", dir.display()),
    )
}

fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}
