//! The HTTP client under the engine: hyper's pooled keep-alive HTTP/1.1 client, TLS by rustls,
//! over [`StampedTcp`] connections, so every response knows when its request's bytes left and
//! when each of its body's chunks came ([`Response::sent_at`], [`Response::chunk`]), by the
//! kernel's receive stamps rather than by when this process got round to reading them. That is
//! what keeps a client's TTFT and ITL exact while it holds a thousand streams on a busy machine
//! (docs/performance.md §9a).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::sys::{StampedTcp, Stamps};
use crate::time::{MonotonicClock, Timestamp};

/// The engine's HTTP client: cheap to clone (one pool).
#[derive(Clone, Debug)]
pub(super) struct HttpClient {
    inner: Client<HttpsConnector<Connector>, Full<Bytes>>,
}

/// Why a request got no response head.
#[derive(Debug)]
pub(super) struct SendError {
    /// The connection could not be opened (refused, unresolvable, or not within the connect
    /// timeout); otherwise it was opened and then lost before the head came.
    pub connect: bool,
    pub message: String,
}

impl HttpClient {
    /// A client keeping up to `max_idle` idle connections per endpoint; a connection that does
    /// not open within `connect_timeout` fails its request.
    pub(super) fn new(max_idle: usize, connect_timeout: Duration) -> Self {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(Connector { connect_timeout, warned: Arc::default() });
        let inner = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(max_idle).build(https);
        HttpClient { inner }
    }

    /// Sends `request` and waits for the response head. Call on the engine's runtime.
    pub(super) async fn send(&self, request: Request<Full<Bytes>>) -> Result<Response, SendError> {
        match self.inner.request(request).await {
            Ok(response) => {
                let stamps = response.extensions().get::<ConnStamps>().map(|s| s.0.clone());
                let (head, body) = response.into_parts();
                let json = head.headers.get(http::header::CONTENT_TYPE).is_some_and(|v| {
                    v.to_str().is_ok_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"))
                });
                Ok(Response { status: head.status, json, body, stamps })
            }
            Err(e) => Err(SendError { connect: e.is_connect(), message: error_chain(&e) }),
        }
    }
}

/// A response whose body is still to read.
pub(super) struct Response {
    status: StatusCode,
    /// The head says `content-type: application/json`.
    json: bool,
    body: Incoming,
    stamps: Option<Arc<Stamps>>,
}

impl Response {
    pub(super) fn status(&self) -> StatusCode {
        self.status
    }

    /// Whether the body is declared JSON (`content-type: application/json`), not an event stream.
    pub(super) fn is_json(&self) -> bool {
        self.json
    }

    /// When the request went: the start of the last write on its connection before the head came
    /// (one HTTP/1.1 request at a time per connection, so the request's own). Falls back to now.
    pub(super) fn sent_at(&self) -> Timestamp {
        self.stamps.as_ref().and_then(|s| s.last_sent()).unwrap_or_else(MonotonicClock::read)
    }

    /// The body's next chunk of data and when it came (the kernel's receive stamp of the read
    /// that brought it; the connection reads only when asked, so the read is this chunk's own).
    /// `None` at the body's end.
    pub(super) async fn chunk(&mut self) -> Result<Option<(Bytes, Timestamp)>, String> {
        loop {
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(error_chain(&e)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let at = self.stamps.as_ref().and_then(|s| s.last_received());
                        return Ok(Some((data, at.unwrap_or_else(MonotonicClock::read))));
                    }
                }
            }
        }
    }

    /// The whole body as text (lossy UTF-8), at most `limit` bytes of it.
    pub(super) async fn text(mut self, limit: usize) -> Result<String, String> {
        let mut bytes = Vec::new();
        while bytes.len() < limit {
            match self.chunk().await? {
                Some((chunk, _)) => bytes.extend_from_slice(&chunk),
                None => break,
            }
        }
        bytes.truncate(limit);
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// An error and its causes, `: `-joined (a client's own text is often only the outermost).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The connection's stamps, as hyper hands them to every response on it.
#[derive(Clone)]
struct ConnStamps(Arc<Stamps>);

/// Opens stamped TCP connections (TLS, where the URL says https, goes on top).
#[derive(Clone, Debug)]
struct Connector {
    connect_timeout: Duration,
    /// Whether the run was told that the kernel does not stamp receives (once is enough).
    warned: Arc<AtomicBool>,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<StampedTcp>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<StampedTcp>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let timeout = self.connect_timeout;
        let warned = self.warned.clone();
        Box::pin(async move {
            let host = uri.host().ok_or_else(|| io::Error::other(format!("{uri} has no host")))?;
            let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
            let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
            let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host.as_str(), port)))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("not connected within {timeout:?}")))??;
            // Each request is a small write, and so is each token the server sends back: without
            // TCP_NODELAY, Nagle's algorithm would hold them for the peer's delayed ACK.
            tcp.set_nodelay(true)?;
            let tcp = StampedTcp::new(tcp);
            if !tcp.kernel_stamps() && !warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the kernel does not stamp this connection's receives (SO_TIMESTAMPING): tokens are timed \
                     when the client reads them, so a busy client adds its own delay to TTFT and ITL"
                );
            }
            Ok(TokioIo::new(tcp))
        })
    }
}

impl Connection for StampedTcp {
    fn connected(&self) -> Connected {
        Connected::new().extra(ConnStamps(self.stamps()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A chunk the client reads late keeps the time it came; the request keeps the time it went.
    #[tokio::test]
    async fn a_response_chunk_is_timed_when_it_came_not_when_it_was_read() {
        let _stamping = crate::sys::stamped::stamping_on().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/v1/completions", listener.local_addr().expect("addr"));
        let (wrote_tx, wrote_rx) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.expect("accept");
            let mut request = vec![0u8; 4096];
            let n = tcp.read(&mut request).await.expect("read the request");
            let received = MonotonicClock::read();
            assert!(String::from_utf8_lossy(&request[..n]).starts_with("POST /v1/completions"));
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            tcp.write_all(head.as_bytes()).await.expect("head");
            tokio::time::sleep(Duration::from_millis(20)).await;
            let event = "data: {}\n\n";
            let before = MonotonicClock::read();
            tcp.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes()).await.expect("chunk");
            let _ = wrote_tx.send((received, before, MonotonicClock::read()));
            tcp.write_all(b"0\r\n\r\n").await.expect("end");
            tokio::time::sleep(Duration::from_millis(200)).await;
        });
        let client = HttpClient::new(1, Duration::from_secs(5));
        let request = Request::post(&url).body(Full::new(Bytes::from_static(b"{}"))).expect("request");
        let asked = MonotonicClock::read();
        let mut response = client.send(request).await.expect("a response");
        let (received, before, after) = wrote_rx.await.expect("the server wrote the chunk");
        let sent = response.sent_at();
        assert!(asked <= sent && sent <= received, "sent at {sent:?}: asked {asked:?}, received {received:?}");
        // The client is busy elsewhere for 50 ms before it reads the chunk.
        std::thread::sleep(Duration::from_millis(50));
        let read_at = MonotonicClock::read();
        let (data, at) = response.chunk().await.expect("no error").expect("a chunk");
        assert_eq!(&data[..], b"data: {}\n\n");
        assert!(
            before <= at && at <= after.saturating_add(Duration::from_millis(2)),
            "{at:?} not in {before:?}..{after:?}"
        );
        assert!(read_at.saturating_since(at) >= Duration::from_millis(45), "timed at the read, not the arrival");
        assert!(response.chunk().await.expect("no error").is_none(), "the body ends");
        server.await.expect("server");
    }
}
