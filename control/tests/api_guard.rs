//! Who may use the admin API, and the bounds on every connection (`api::server`), over real
//! sockets: the token on TCP, the metrics-only listener, the Unix socket's mode and group, a
//! slow client, oversized and malformed bodies, path tricks, too many connections; and
//! `spillwayctl --token-file`.

mod common;

use common::{eventually, one_service, OneWorker};
use hyper::Method;
use spillway_api::client::Client;
use spillway_control::api::{self, ApiOptions, ApiServer, Limits};
use spillway_control::config;
use spillway_control::controller::Controller;
use spillway_control::view::DataplaneView;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

struct Rig {
    _dir: TempDir,
    server: ApiServer,
}

fn rig(options: impl FnOnce(&TempDir) -> ApiOptions) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, one_service(&["10.0.1.1"])).unwrap();
    let cfg = config::load(&path).expect("valid");
    let controller =
        Arc::new(Mutex::new(Controller::start(&path, cfg, Instant::now()).expect("controller")));
    let view: Arc<dyn DataplaneView> = Arc::new(OneWorker::new());
    let server = api::spawn(&options(&dir), controller, view).expect("bind");
    Rig { _dir: dir, server }
}

fn tcp_with_token() -> ApiOptions {
    ApiOptions { token: Some(TOKEN.into()), ..ApiOptions::new("127.0.0.1:0") }
}

fn client(r: &Rig, token: Option<&str>) -> Client {
    Client::new(&r.server.local_addr().to_string(), Duration::from_secs(5))
        .unwrap()
        .with_token(token.map(str::to_owned))
}

/// One raw HTTP exchange on a TCP connection: the status line and the body.
fn raw(addr: &str, request: &[u8]) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.lines().next().unwrap_or("").to_owned();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn tcp_needs_the_token_for_everything_but_metrics() {
    let r = rig(|_| tcp_with_token());
    for (method, path) in [
        (Method::GET, "/v1/status"),
        (Method::POST, "/v1/backends/10.0.1.1/drain"),
        (Method::POST, "/v1/reload"),
    ] {
        let (status, body) = client(&r, None).request(method.clone(), path, None).await.unwrap();
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert!(body.contains("Authorization: Bearer"), "{body}");
        let (status, body) = client(&r, Some("0123456789abcdef-wrong-token"))
            .request(method, path, None)
            .await
            .unwrap();
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("the token is wrong"), "{body}");
    }
    // Nothing was drained by the refused requests; with the token it is.
    let ok = client(&r, Some(TOKEN));
    let backends = ok.call(Method::GET, "/v1/backends", None).await.unwrap();
    assert!(backends.contains("\"drained\":false"), "{backends}");
    ok.call(Method::POST, "/v1/backends/10.0.1.1/drain", None).await.unwrap();
    let backends = ok.call(Method::GET, "/v1/backends", None).await.unwrap();
    assert!(backends.contains("\"drained\":true"), "{backends}");
    // A scraper needs no token.
    let (status, body) = client(&r, None).get("/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("spillway_workers 1"), "{body}");
}

#[tokio::test]
async fn the_metrics_listener_serves_metrics_and_nothing_else() {
    let r = rig(|_| ApiOptions { metrics_listen: Some("127.0.0.1:0".into()), ..tcp_with_token() });
    let m = Client::new(&r.server.metrics_addr().unwrap().to_string(), Duration::from_secs(5))
        .unwrap()
        .with_token(Some(TOKEN.into()));
    let (status, body) = m.get("/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("spillway_workers 1"), "{body}");
    // Not even with the token: this listener has no API.
    for (method, path) in
        [(Method::GET, "/v1/status"), (Method::POST, "/v1/backends/10.0.1.1/drain")]
    {
        let (status, body) = m.request(method, path, None).await.unwrap();
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("GET /metrics only"), "{body}");
    }
}

#[tokio::test]
async fn the_unix_socket_is_its_owners_or_its_groups() {
    let r = rig(|d| ApiOptions::new(&format!("unix:{}", d.path().join("a.sock").display())));
    let api::Listen::Unix(path) = r.server.local_addr().clone() else { panic!() };
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    // A group by number (the test may not know any group name but root's).
    let r2 = rig(|d| ApiOptions {
        socket_group: Some("0".into()),
        ..ApiOptions::new(&format!("unix:{}", d.path().join("g.sock").display()))
    });
    let api::Listen::Unix(path) = r2.server.local_addr().clone() else { panic!() };
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.gid(), 0);
    // An unknown group is a start-up error naming it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, one_service(&["10.0.1.1"])).unwrap();
    let controller = Arc::new(Mutex::new(
        Controller::start(&path, config::load(&path).unwrap(), Instant::now()).unwrap(),
    ));
    let e = api::spawn(
        &ApiOptions {
            socket_group: Some("no-such-group-spw".into()),
            ..ApiOptions::new(&format!("unix:{}", dir.path().join("x.sock").display()))
        },
        controller,
        Arc::new(OneWorker::new()),
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "no group `no-such-group-spw` in /etc/group");
}

#[test]
fn token_files_must_be_private_and_long_enough() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("token");
    std::fs::write(&f, format!("{TOKEN}\nignored second line\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(api::read_token(&f).unwrap(), TOKEN);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = api::read_token(&f).unwrap_err().to_string();
    assert!(e.contains("every user may read it (mode 644)"), "{e}");
    std::fs::write(&f, "short\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = api::read_token(&f).unwrap_err().to_string();
    assert!(e.contains("the token is 5 bytes, fewer than 16"), "{e}");
    let e = api::read_token(&dir.path().join("missing")).unwrap_err().to_string();
    assert!(e.contains("No such file"), "{e}");
}

#[tokio::test]
async fn bad_requests_are_bounded_and_answered_clearly() {
    let limits = Limits {
        header_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_secs(2),
        max_body: 1024,
        max_connections: 4,
    };
    let r = rig(|_| ApiOptions { limits, ..tcp_with_token() });
    let addr = r.server.local_addr().to_string();
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");

    // Slow-loris: headers that never end are cut off after the header timeout.
    let started = Instant::now();
    let a = addr.clone();
    let (status, _) = tokio::task::spawn_blocking(move || {
        raw(&a, b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    })
    .await
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(status.is_empty() || status.contains("408"), "{status}");

    // A declared body above the limit: 413 before it is read.
    let a = addr.clone();
    let req =
        format!("POST /v1/reload HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 100000\r\n\r\n");
    let (status, body) =
        tokio::task::spawn_blocking(move || raw(&a, req.as_bytes())).await.unwrap();
    assert!(status.contains("413"), "{status}");
    assert!(body.contains("larger than 1024 bytes"), "{body}");

    // A body that never comes: the request times out (408), the server goes on.
    let a = addr.clone();
    let req = format!(
        "POST /v1/backends/10.0.1.1/health HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 50\r\n\r\n{{"
    );
    let (status, body) =
        tokio::task::spawn_blocking(move || raw(&a, req.as_bytes())).await.unwrap();
    assert!(status.contains("408"), "{status} {body}");

    // Malformed JSON, a bad address in the path, path tricks, an unknown endpoint: JSON errors.
    let ok = client(&r, Some(TOKEN));
    let bad = serde_json::json!("{not json");
    let (status, body) =
        ok.request(Method::POST, "/v1/backends/10.0.1.1/health", Some(&bad)).await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("\"error\""), "{body}");
    for (path, want) in [
        ("/v1/backends/..%2F..%2Fetc%2Fpasswd/drain", 400),
        ("/v1/backends/10.0.1.1%00/drain", 400),
        ("/v1/../metrics", 404),
        ("/v1/status/../reload", 404),
        ("/v1/nothing", 404),
    ] {
        let (status, body) = ok.request(Method::POST, path, None).await.unwrap();
        assert_eq!(status, want, "{path}: {body}");
        assert!(body.starts_with('{') && body.contains("\"error\""), "{path}: {body}");
    }
    // After all that, the API still answers.
    assert_eq!(ok.get("/v1/status").await.unwrap().0, 200);
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_and_the_api_recovers() {
    let limits =
        Limits { max_connections: 3, header_timeout: Duration::from_secs(2), ..Limits::default() };
    let r = rig(|_| ApiOptions { limits, ..tcp_with_token() });
    let addr = r.server.local_addr().to_string();
    // Three idle connections hold every slot; the fourth is closed without an answer.
    let idle: Vec<std::net::TcpStream> =
        (0..3).map(|_| std::net::TcpStream::connect(&addr).unwrap()).collect();
    // Once the server has accepted all three, it holds their slots: it takes a slot in the
    // same step as it accepts (and this runtime has one thread).
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    eventually(Duration::from_secs(5), "the server to accept the three idle connections", || {
        let side = server_side(port);
        async move {
            match side {
                (0, established) if established >= 3 => Ok(()),
                (queued, established) => Err(format!("{queued} queued, {established} established")),
            }
        }
    })
    .await;
    let a = addr.clone();
    let (status, _) = tokio::task::spawn_blocking(move || {
        raw(
            &a,
            format!("GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n")
                .as_bytes(),
        )
    })
    .await
    .unwrap();
    assert_eq!(status, "", "answered beyond the connection limit");
    // Closed, the idle ones give their slots back (else the header timeout would, after 2 s);
    // then the API answers again (a request while they are still held is closed unanswered).
    drop(idle);
    let ok = client(&r, Some(TOKEN));
    eventually(Duration::from_secs(5), "the API to answer again once the slots are free", || {
        let ok = &ok;
        async move {
            match ok.get("/v1/status").await {
                Ok((200, _)) => Ok(()),
                other => Err(other),
            }
        }
    })
    .await;
}

/// The server's side of a TCP listener on 127.0.0.1:`port`, from `/proc/net/tcp`: how many
/// connections wait in its accept queue (the listening socket's `rx_queue`) and how many
/// established connections it has (the accepted ones and those still queued).
fn server_side(port: u16) -> (u64, usize) {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let (mut queued, mut established) = (0, 0);
    for line in table.lines().skip(1) {
        // sl local_address rem_address st tx_queue:rx_queue ...
        let f: Vec<&str> = line.split_whitespace().collect();
        let local = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
        if local != Some(port) {
            continue;
        }
        match f[3] {
            "0A" => {
                let rx = f[4].split(':').nth(1).unwrap_or("0");
                queued = u64::from_str_radix(rx, 16).expect("rx_queue");
            }
            "01" => established += 1,
            _ => {}
        }
    }
    (queued, established)
}
