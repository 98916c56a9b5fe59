//! The connections: accept (backing off when it fails), the connection cap, hyper's HTTP/1.1
//! with its header-read timeout, and graceful shutdown.
//!
//! This is `axum::serve`'s loop with the bounds it lacks: axum gives no access to hyper's
//! builder, so a peer that sent half a request head, or nothing, or went quiet between two
//! requests held its connection (and a file descriptor) for ever, and nothing capped how many
//! there were. Here:
//! - hyper's `header_read_timeout` ([`Limits::header_read_timeout`]) runs whenever a connection
//!   waits for a request head: a new connection, a partial head, and a kept-alive connection
//!   between requests (hyper starts the timer as it starts reading a head), so it is the idle
//!   timeout too. The body's timeout is the handler's ([`super::http`]).
//! - at most [`Limits::max_connections`] connections are served; past it a connection is still
//!   accepted and answered `503` (OpenAI's error JSON, `Connection: close`), by at most
//!   [`OVER_CAP_ANSWERS`] tasks at a time, and beyond those closed at once: a client is told,
//!   never left waiting in the accept queue.
//! - a failed `accept` (no file descriptor to spare: `EMFILE`, `ENFILE`; or a connection reset
//!   before it was taken) backs off, 5 ms doubling to 1 s, and goes on accepting.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::Limits;
use super::api::ApiError;
use crate::sys::{StampedTcp, Stamps};

/// Connections past the cap answered `503` at once; more are closed unanswered.
pub const OVER_CAP_ANSWERS: usize = 64;

/// The first and the longest wait after a failed `accept`.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1));

/// A connection's stamps, in the extensions of every request on it.
#[derive(Clone, Debug)]
pub(super) struct ConnectionStamps(pub(super) Arc<Stamps>);

/// Serves `router` on `listener` within `limits` until `stop` turns true: then stops accepting,
/// lets each connection finish its request in progress (hyper's graceful shutdown), and returns
/// when every connection has closed. Every accepted connection is stamped ([`StampedTcp`]: with
/// `kernel_stamps`, the kernel's receive time of each read) and has TCP_NODELAY, since each token
/// is a small write that Nagle's algorithm would hold back until the client's delayed ACK.
pub(super) async fn serve_connections(
    listener: TcpListener,
    kernel_stamps: bool,
    limits: Limits,
    router: Router,
    mut stop: watch::Receiver<bool>,
) {
    let served = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let over_cap = Arc::new(Semaphore::new(OVER_CAP_ANSWERS));
    // Every connection task holds a receiver: when the last is gone, `closed` resolves.
    let (open_tx, open_rx) = watch::channel(());
    let mut backoff = ACCEPT_BACKOFF.0;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => {
                backoff = ACCEPT_BACKOFF.0;
                tcp
            }
            Err(e) => {
                if backoff == ACCEPT_BACKOFF.0 {
                    tracing::warn!("accept failed: {e}; retrying in {backoff:?} and backing off up to 1 s");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let tcp = if kernel_stamps { StampedTcp::new(tcp) } else { StampedTcp::without_kernel_stamps(tcp) };
        let (open, stop) = (open_rx.clone(), stop.clone());
        if let Ok(permit) = served.clone().try_acquire_owned() {
            let stamps = ConnectionStamps(tcp.stamps());
            let router = router.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(stamps.clone());
                let mut router = router.clone();
                async move { tower_service::Service::call(&mut router, request).await }
            });
            tokio::spawn(async move {
                serve_one(tcp, service, &limits, true, stop).await;
                drop((permit, open));
            });
        } else if let Ok(permit) = over_cap.clone().try_acquire_owned() {
            let max = limits.max_connections;
            let service = hyper::service::service_fn(move |_: Request<Incoming>| async move {
                let message = format!(
                    "the server has {max} connections open, its most (--max-connections): retry later, or reuse a connection"
                );
                Ok::<_, std::convert::Infallible>(super::http::error_response(&ApiError {
                    status: 503,
                    message,
                    param: None,
                    retry_after: Some(1),
                }))
            });
            tokio::spawn(async move {
                serve_one(tcp, service, &limits, false, stop).await;
                drop((permit, open));
            });
        }
        // Else: too many refusals in progress already; dropping the socket closes it.
    }
    drop(listener);
    drop(open_rx);
    open_tx.closed().await;
}

/// One connection under hyper's HTTP/1.1, with the header-read timeout; `keep_alive` false
/// closes it after its first response.
async fn serve_one<S>(tcp: StampedTcp, service: S, limits: &Limits, keep_alive: bool, mut stop: watch::Receiver<bool>)
where
    S: hyper::service::Service<Request<Incoming>, Response = Response, Error = std::convert::Infallible>,
    S::Future: Send + 'static,
{
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(keep_alive);
    let conn = builder.serve_connection(TokioIo::new(tcp), service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("connection: {e}");
                }
                return;
            }
            _ = stop.wait_for(|stop| *stop), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}
