//! `spillwayctl` run as a process against a real API server (the control plane's, over a real
//! controller and a fake data plane: control/tests/api_rig, included by its path): the tables
//! it prints, its exit codes, `--json`; and what it says when nothing answers, on a Unix socket
//! or a TCP port.

#[path = "../../control/tests/api_rig/mod.rs"]
mod api_rig;

use api_rig::*;
use spillway_api::client::{Client, ClientError};
use spillway_api::types::*;
use spillway_ctl::render;
use std::process::Output;
use std::time::Duration;

impl Fixture {
    /// Run spillwayctl against this server (off the runtime thread, which serves it).
    async fn ctl(&self, args: &[&str]) -> Output {
        ctl(&self.server.local_addr().to_string(), args).await
    }
}

async fn ctl(admin: &str, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_spillwayctl"));
    cmd.env_remove("SPILLWAY_ADMIN").arg("--admin").arg(admin).args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

#[tokio::test]
async fn spillwayctl_talks_to_the_server() {
    let f = fixture(true).await;
    let out = f.ctl(&["status"]).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("backends") && text.contains("6/6 healthy"), "{text}");
    let generation = f.controller.lock().unwrap().snapshot().generation;
    assert!(
        text.lines().any(|l| l.split_whitespace().eq(["generation", &generation.to_string()])),
        "{text}"
    );

    let out = f.ctl(&["backends", "--json"]).await;
    assert!(out.status.success(), "{out:?}");
    let r: BackendsReply = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.backends.len(), 6);

    let out = f.ctl(&["set-health", "10.0.1.2", "unhealthy", "--service", "web"]).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text.lines().find(|l| l.contains("10.0.1.2")).expect("row for the backend");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..8],
        ["web", "10.0.1.2", "web-a", "zone-a", "primary", "healthy", "unhealthy", "unhealthy"]
    );
    let b = f.backend("10.0.1.2").await;
    assert_eq!((b.health_override.as_str(), b.healthy), ("unhealthy", false));

    // The table: one header, aligned columns.
    let out = f.ctl(&["backends"]).await;
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("SERVICE  BACKEND"), "{text}");
    assert_eq!(lines.len(), 7);
    let col = lines[0].find("GROUP").unwrap();
    assert!(lines[1..].iter().all(|l| l[col - 2..col].trim().is_empty()), "{text}");

    // An error reply: non-zero, the daemon's message.
    let out = f.ctl(&["drain", "10.9.9.9"]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no backend 10.9.9.9") && err.contains("404"), "{err}");

    let out = f
        .ctl(&[
            "explain",
            "--src",
            "192.0.2.7",
            "--dst",
            "198.51.100.10",
            "--sport",
            "1",
            "--dport",
            "80",
        ])
        .await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("zone-a") && text.contains("new_connection"), "{text}");

    let out = f.ctl(&["metrics"]).await;
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("spillway_service_packets_total{service=\"web\"} 0"));
    drop(f.dir);
}

#[tokio::test]
async fn spillwayctl_reports_an_unreachable_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let sock = format!("unix:{}", dir.path().join("none.sock").display());
    let out = ctl(&sock, &["status"]).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cannot reach the spillway daemon at unix:") && err.contains("SPILLWAY_ADMIN"),
        "{err}"
    );

    let out = ctl(&format!("127.0.0.1:{}", closed_port()), &["backends"]).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(String::from_utf8(out.stderr).unwrap().contains("Connection refused"));

    let out = ctl("not an address", &["status"]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // A client error from the library too.
    let c = Client::new(&sock, Duration::from_secs(1)).unwrap();
    assert!(matches!(c.get("/v1/status").await, Err(ClientError::Unreachable { .. })));
}

/// `spillwayctl reload --dry-run`'s text for the preview of a candidate without zone-a's
/// backends (this crate's half of control/tests/api.rs's
/// `a_reload_preview_lists_the_zonal_choices_a_candidate_changes`): zone-a's clients lose
/// their zonal match.
#[tokio::test]
async fn a_reload_preview_prints_the_zonal_choices_a_candidate_changes() {
    let f = fixture(true).await;
    let candidate = yaml(f.closed_port).replace(
        "        - group: web-a\n          zone: zone-a\n          endpoints: [10.0.1.1, 10.0.1.2]\n",
        "",
    );
    assert!(!candidate.contains("web-a"), "the candidate drops web-a");
    let r: PreviewReply =
        f.post("/v1/reload/preview", serde_json::json!({ "config": candidate })).await;
    let text = render::preview(&r, false);
    assert!(
        text.contains("client zone        web zone-a: its own zone (2) -> no zonal match (2)"),
        "{text}"
    );
}

/// Section 7 through spillwayctl (this crate's half of control/tests/api.rs's
/// `advanced_services_show_groups_capacity_and_client_splits`, on the same state: one of
/// mesh-a's endpoints unhealthy): the group table, the split per client zone, explain's split
/// and backend group, and `--json`.
#[tokio::test]
async fn advanced_services_show_groups_capacity_and_client_splits() {
    let f = fixture_with(true, advanced_yaml).await;
    f.set_health("10.0.5.3", "unhealthy").await;
    let x: ExplainReply =
        f.get("/v1/explain?src=192.0.2.7&dst=198.51.100.20&sport=1000&dport=443&syn=1").await;
    let group = x.backend_group.clone().expect("backend group");

    // spillwayctl: the group table and the split per client zone.
    let out = f.ctl(&["services"]).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("mesh: advanced WATERFALL_BY_ZONE"), "{text}");
    let header = text.lines().find(|l| l.starts_with("GROUP")).expect("group table");
    assert!(
        header.split_whitespace().eq([
            "GROUP",
            "ZONE",
            "HEALTHY",
            "CAPACITY",
            "MEASURED",
            "EXPECTED",
            "UTILISATION",
            "DRAINED",
            "RETAINED"
        ]),
        "{text}"
    );
    let row = |name: &str| -> Vec<String> {
        let l = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{text}"));
        l.split_whitespace().map(str::to_owned).collect()
    };
    assert_eq!(row("mesh-a"), ["mesh-a", "zone-a", "2/3", "20", "0", "0", "0.0%", "no", "95.2%"]);
    assert_eq!(row("mesh-b")[..4], ["mesh-b", "zone-b", "2/2", "20"]);
    assert!(text.lines().any(|l| l.starts_with("CLIENT ZONE  DEMAND")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("(no zone)")), "{text}");
    let out = f
        .ctl(&[
            "explain",
            "--src",
            "192.0.2.7",
            "--dst",
            "198.51.100.20",
            "--sport",
            "1000",
            "--dport",
            "443",
            "--syn",
        ])
        .await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("advanced split") && text.contains(&format!("backend group   {group}")),
        "{text}"
    );
    // --json is the API's reply.
    let out = f.ctl(&["services", "--json"]).await;
    let r: ServicesReply = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.services[0].advanced.as_ref().unwrap().groups.len(), 2);
}

/// QL-3 through spillwayctl: `explain --quic-cid` prints the decode and where the packet goes
/// (control/tests/api.rs has the API's half), and says why an ID falls back.
#[tokio::test]
async fn ql_3_explain_prints_what_a_quic_connection_id_decodes_to() {
    let f = fixture_with(true, quic_yaml).await;
    let flow = ["explain", "--src", "192.0.2.7", "--dst", "198.51.100.30", "--proto", "udp"];
    let ports = ["--sport", "40000", "--dport", "443", "--quic-cid"];
    let run = |cid: &'static str| {
        let args: Vec<&str> = flow.iter().chain(&ports).copied().chain([cid]).collect();
        let f = &f;
        async move {
            let out = f.ctl(&args).await;
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let text = run("070a000201020304").await;
    let line = |t: &str, field: &str| -> String {
        let l = t.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{t}"));
        l[field.len()..].trim().to_owned()
    };
    assert_eq!(line(&text, "quic-lb"), "config 0, server id 0a0002 -> 10.0.1.2", "{text}");
    assert_eq!(line(&text, "backend now"), "10.0.1.2", "{text}");
    assert_eq!(line(&text, "reason"), "quic_cid", "{text}");
    let text = run("070a000901020304").await;
    assert_eq!(line(&text, "quic-lb"), "config 0, server id 0a0009: 4-tuple (unknown_server_id)");
    assert_eq!(line(&text, "reason"), "new_connection", "{text}");
    let args: Vec<&str> = flow.iter().chain(&ports).copied().chain(["zz"]).collect();
    let out = f.ctl(&args).await;
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("quic_cid: `zz` is not hex octets"), "{err}");
}
