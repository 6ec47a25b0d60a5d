//! A client of the API over TCP or a Unix socket (hyper's HTTP/1.1 client connection, one
//! connection per request), used by `spillwayctl` and the tests.

use crate::types::ErrorReply;
use crate::Listen;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The `--admin` address is malformed.
    #[error("`{0}` is neither `host:port` nor `unix:/absolute/path`")]
    BadAddress(String),
    /// A local input the command needs could not be read (a candidate configuration).
    #[error("{0}")]
    Input(String),
    /// Nothing answers at the address.
    #[error("cannot reach the spillway daemon at {admin}: {source}")]
    Unreachable {
        /// The address.
        admin: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("HTTP error talking to {admin}: {source}")]
    Http {
        /// The address.
        admin: String,
        /// hyper's error.
        source: hyper::Error,
    },
    /// No complete reply in time.
    #[error("no reply from {0} in time")]
    Timeout(String),
    /// The daemon answered with an error status.
    #[error("{message} (HTTP {status})")]
    Status {
        /// HTTP status.
        status: u16,
        /// The `error` field of the reply (or its body).
        message: String,
        /// The reply body.
        body: String,
    },
    /// The reply could not be written where it was asked to go.
    #[error("cannot write the reply: {0}")]
    Output(std::io::Error),
    /// The reply is not the JSON expected.
    #[error("unexpected reply: {0}")]
    Json(#[from] serde_json::Error),
}

/// A client of one daemon.
#[derive(Clone, Debug)]
pub struct Client {
    target: Listen,
    timeout: Duration,
    token: Option<String>,
}

impl Client {
    /// A client of the API at `admin` (`host:port` or `unix:/path`).
    pub fn new(admin: &str, timeout: Duration) -> Result<Client, ClientError> {
        let target = Listen::parse(admin).ok_or_else(|| ClientError::BadAddress(admin.into()))?;
        Ok(Client { target, timeout, token: None })
    }

    /// Sends `Authorization: Bearer token` with every request (`admin.token_file`).
    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.token = token;
        self
    }

    /// `GET path`: status and body.
    pub async fn get(&self, path: &str) -> Result<(u16, String), ClientError> {
        self.request(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body: status and body.
    pub async fn post(
        &self,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, String), ClientError> {
        self.request(Method::POST, path, body).await
    }

    /// A request; a reply with an error status is `Ok` too (see [`Client::call`]).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, String), ClientError> {
        let admin = self.target.to_string();
        let fut = self.exchange(method, path, body);
        tokio::time::timeout(self.timeout, fut).await.map_err(|_| ClientError::Timeout(admin))?
    }

    /// A request whose error replies become [`ClientError::Status`]; the body on success.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<String, ClientError> {
        let (status, text) = self.request(method, path, body).await?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        let message = serde_json::from_str::<ErrorReply>(&text)
            .map(|e| e.error)
            .unwrap_or_else(|_| text.trim().to_owned());
        Err(ClientError::Status { status, message, body: text })
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, String), ClientError> {
        let admin = self.target.to_string();
        let http = |source| ClientError::Http { admin: admin.clone(), source };
        let (reply, driver) = self.open(method, path, body).await?;
        let status = reply.status().as_u16();
        let body = reply.into_body().collect().await.map_err(http)?.to_bytes();
        driver.abort();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// `POST path` whose reply body is copied to `out` as it arrives (a capture's pcapng):
    /// only the connection and the reply's headers are bounded by the client's timeout. An
    /// error status is [`ClientError::Status`]; on success, the value of the reply's header
    /// `header` (if any) and the bytes copied.
    pub async fn post_streaming<W: AsyncWrite + Unpin>(
        &self,
        path: &str,
        header: &str,
        out: &mut W,
    ) -> Result<(Option<String>, u64), ClientError> {
        let admin = self.target.to_string();
        let http = |source| ClientError::Http { admin: admin.clone(), source };
        let (reply, driver) =
            tokio::time::timeout(self.timeout, self.open(Method::POST, path, None))
                .await
                .map_err(|_| ClientError::Timeout(admin.clone()))??;
        let status = reply.status().as_u16();
        let value = reply.headers().get(header).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut body = reply.into_body();
        if !(200..300).contains(&status) {
            let text = body.collect().await.map_err(http)?.to_bytes();
            let text = String::from_utf8_lossy(&text).into_owned();
            let message = serde_json::from_str::<ErrorReply>(&text)
                .map(|e| e.error)
                .unwrap_or_else(|_| text.trim().to_owned());
            return Err(ClientError::Status { status, message, body: text });
        }
        let mut copied = 0u64;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(http)?.into_data() {
                out.write_all(&data).await.map_err(ClientError::Output)?;
                copied += data.len() as u64;
            }
        }
        out.flush().await.map_err(ClientError::Output)?;
        driver.abort();
        Ok((value, copied))
    }

    /// Connects, sends the request, and returns the reply (its body still to read) with the
    /// task that drives the connection.
    async fn open(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, tokio::task::JoinHandle<()>), ClientError>
    {
        let admin = self.target.to_string();
        let unreachable = |source| ClientError::Unreachable { admin: admin.clone(), source };
        let (host, payload) = match &self.target {
            Listen::Tcp(a) => (a.as_str(), body),
            Listen::Unix(_) => ("localhost", body),
        };
        let mut req = Request::builder().method(method).uri(path).header("host", host);
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let data = match payload {
            Some(v) => {
                req = req.header("content-type", "application/json");
                Bytes::from(serde_json::to_vec(v)?)
            }
            None => Bytes::new(),
        };
        let req = req.body(Full::new(data)).map_err(|e| ClientError::Unreachable {
            admin: admin.clone(),
            source: std::io::Error::other(e),
        })?;
        match &self.target {
            Listen::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a.as_str()).await.map_err(unreachable)?;
                send(s, req, &admin).await
            }
            Listen::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p).await.map_err(unreachable)?;
                send(s, req, &admin).await
            }
        }
    }
}

async fn send<S>(
    stream: S,
    req: Request<Full<Bytes>>,
    admin: &str,
) -> Result<(hyper::Response<hyper::body::Incoming>, tokio::task::JoinHandle<()>), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let http = |source| ClientError::Http { admin: admin.to_owned(), source };
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(http)?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let reply = sender.send_request(req).await.map_err(http)?;
    Ok((reply, driver))
}
