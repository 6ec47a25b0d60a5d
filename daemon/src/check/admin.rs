//! The admin endpoint (`admin.listen`, `admin.socket_group`, `admin.token_file`,
//! `admin.metrics_listen`): the API changes state (health overrides, drains, reloads), so it
//! belongs on a Unix socket only the operator (or a group) can reach, or behind a token; and
//! the daemon must be able to bind it.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use spillway_control::api::{read_token, ApiError, Listen};
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
    let mut out = match Listen::parse(listen) {
        Some(Listen::Unix(path)) => unix(listen, &path, host),
        Some(Listen::Tcp(addr)) => match addr.parse::<SocketAddr>() {
            Ok(sa) => tcp(listen, sa, host),
            Err(_) => vec![Finding::fail(
                "admin",
                format!("admin.listen: `{listen}`: the daemon listens on a literal ip:port only"),
            )
            .fix("write an address, e.g. 127.0.0.1:9090 (with admin.token_file)")],
        },
        None => vec![Finding::fail(
            "admin",
            format!("admin.listen: `{listen}` is neither ip:port nor unix:/absolute/path"),
        )
        .fix("e.g. unix:/run/spillway/admin.sock")],
    };
    let a = &config.admin;
    if let Some(file) = &a.token_file {
        out.push(match read_token(&host.path(Path::new(file))) {
            Ok(t) => Finding::pass(
                "admin",
                format!(
                    "admin.token_file {file}: a {}-byte token, private to its owner: every API \
                     request but GET /metrics must carry it",
                    t.len()
                ),
            ),
            Err(e) => Finding::fail(
                "admin",
                match e {
                    // The message names the configured path, not the host-rooted one read.
                    ApiError::Token { message, .. } => {
                        format!("admin.token_file {file}: {message}")
                    }
                    e => format!("admin.token_file {file}: {e}"),
                },
            )
            .fix(format!(
                "umask 077; openssl rand -hex 32 > {file} (spillwayctl reads it with \
                 --token-file)"
            )),
        });
    }
    if let Some(g) = &a.socket_group {
        let known = g.parse::<u32>().is_ok()
            || std::fs::read_to_string(host.path(Path::new("/etc/group")))
                .is_ok_and(|t| t.lines().any(|l| l.split(':').next() == Some(g.as_str())));
        out.push(if known {
            Finding::pass(
                "admin",
                format!(
                    "admin.socket_group {g}: the socket is 0660, usable by the group's members"
                ),
            )
        } else {
            Finding::fail("admin", format!("admin.socket_group {g}: no such group in /etc/group"))
                .fix(format!("groupadd --system {g} (the Debian package creates `spillway`)"))
        });
    }
    if let Some(m) = &a.metrics_listen {
        out.push(Finding::pass(
            "admin",
            format!("admin.metrics_listen {m}: GET /metrics only, without a token"),
        ));
    }
    out
}

fn unix(listen: &str, path: &Path, host: &Host) -> Vec<Finding> {
    let dir = path.parent().unwrap_or("/".as_ref());
    if !host.path(dir).is_dir() {
        return vec![Finding::pass(
            "admin",
            format!(
                "admin.listen {listen}: the daemon creates the directory {} (0755; the socket \
                 itself is 0600, or 0660 with admin.socket_group)",
                dir.display()
            ),
        )];
    }
    let Ok(meta) = std::fs::symlink_metadata(host.path(path)) else {
        return vec![Finding::pass(
            "admin",
            format!("admin.listen {listen}: a Unix socket in an existing directory (the daemon makes it 0600, or 0660 with admin.socket_group)"),
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
                    "admin.listen {listen}: not loopback: the API is plain HTTP, so its token \
                     crosses the network in clear text"
                ),
            )
            .fix(format!(
                "listen on unix:/run/spillway/admin.sock (or 127.0.0.1:{}) and reach it over \
                 SSH, or put a TLS proxy in front; scrapers can use admin.metrics_listen",
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
        out.push(Finding::pass(
            "admin",
            format!("admin.listen {listen}: loopback TCP, port free (with the token)"),
        ));
    }
    out
}
