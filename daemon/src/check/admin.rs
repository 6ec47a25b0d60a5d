//! The admin endpoint (`admin.listen`): the API changes state (health overrides, drains,
//! reloads) and has no authentication, so it belongs on loopback or a Unix socket only the
//! operator can reach; and the daemon must be able to bind it.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use spillway_control::api::Listen;
use spillway_control::config::Config;

use super::host::Host;
use super::Finding;

/// The findings for `admin.listen`.
pub fn check(config: &Config, host: &Host) -> Vec<Finding> {
    let listen = &config.admin.listen;
    if config.services.is_empty() {
        return vec![Finding::pass(
            "admin",
            format!("admin.listen {listen}: not opened: io-forward mode (no services) runs no admin API"),
        )];
    }
    match Listen::parse(listen) {
        Some(Listen::Unix(path)) => unix(listen, &path, host),
        Some(Listen::Tcp(addr)) => match addr.parse::<SocketAddr>() {
            Ok(sa) => tcp(listen, sa, host),
            Err(_) => vec![Finding::fail(
                "admin",
                format!("admin.listen: `{listen}`: the daemon listens on a literal ip:port only"),
            )
            .fix("write an address, e.g. 127.0.0.1:9090")],
        },
        None => vec![Finding::fail(
            "admin",
            format!("admin.listen: `{listen}` is neither ip:port nor unix:/absolute/path"),
        )
        .fix("e.g. 127.0.0.1:9090 or unix:/run/spillway/admin.sock")],
    }
}

fn unix(listen: &str, path: &Path, host: &Host) -> Vec<Finding> {
    let dir = path.parent().unwrap_or("/".as_ref());
    if !host.path(dir).is_dir() {
        return vec![Finding::fail(
            "admin",
            format!("admin.listen {listen}: the directory {} does not exist", dir.display()),
        )
        .fix(format!(
            "mkdir -p -m 0750 {} (or RuntimeDirectory=spillway in the systemd unit)",
            dir.display()
        ))];
    }
    let Ok(meta) = std::fs::symlink_metadata(host.path(path)) else {
        return vec![Finding::pass(
            "admin",
            format!("admin.listen {listen}: a Unix socket in an existing directory (the daemon makes it 0600)"),
        )];
    };
    if !meta.file_type().is_socket() {
        return vec![Finding::fail(
            "admin",
            format!("admin.listen {listen}: the path exists and is not a socket: the daemon will not replace it"),
        )
        .fix(format!("remove {} or choose another path", path.display()))];
    }
    let mut out = Vec::new();
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o002 != 0 {
        out.push(
            Finding::warn(
                "admin",
                format!(
                    "admin.listen {listen}: the existing socket is world-writable (mode {mode:04o}): \
                     any local user can drive the API"
                ),
            )
            .fix(format!("chmod 0600 {} (the daemon creates it 0600)", path.display())),
        );
    }
    if host.unix_listening(path) {
        out.push(
            Finding::warn(
                "admin",
                format!(
                    "admin.listen {listen}: a process listens on it (a running spillway?): a \
                     second daemon cannot bind it"
                ),
            )
            .fix("stop the other process, or give this configuration another socket"),
        );
    } else if out.is_empty() {
        out.push(Finding::pass(
            "admin",
            format!(
                "admin.listen {listen}: a stale socket nobody listens on (the daemon replaces it)"
            ),
        ));
    }
    out
}

fn tcp(listen: &str, sa: SocketAddr, host: &Host) -> Vec<Finding> {
    let mut out = Vec::new();
    if !sa.ip().is_loopback() {
        out.push(
            Finding::warn(
                "admin",
                format!(
                    "admin.listen {listen}: not loopback: anyone who reaches it can change \
                     health, drain backends and reload (the API has no authentication)"
                ),
            )
            .fix(format!(
                "listen on 127.0.0.1:{} or unix:/run/spillway/admin.sock, and reach it over SSH",
                sa.port()
            )),
        );
    }
    let conflicts = |ip: &IpAddr| ip.is_unspecified() || sa.ip().is_unspecified() || *ip == sa.ip();
    if sa.port() != 0 {
        if let Some(ip) = host.tcp_listeners(sa.port()).iter().find(|ip| conflicts(ip)) {
            out.push(
                Finding::warn(
                    "admin",
                    format!(
                        "admin.listen {listen}: {ip} port {} is already listening (a running \
                         spillway?): the daemon cannot bind it",
                        sa.port()
                    ),
                )
                .fix("stop the other process, or choose another port"),
            );
        }
    }
    if out.is_empty() {
        out.push(Finding::pass("admin", format!("admin.listen {listen}: loopback TCP, port free")));
    }
    out
}
