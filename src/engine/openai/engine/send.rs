//! One HTTP request's send, the same for a stream and an embeddings answer: the endpoint's slot
//! taken, the `POST` with its `X-Request-Id`, the response head waited for under the stall watch,
//! and a non-2xx answer turned into its [`RemoteError`]. What follows the head (an event stream,
//! a whole JSON answer) is the caller's.

use bytes::Bytes;
use http::Method;
use http::header::{ACCEPT, CONTENT_TYPE};
use http_body_util::Full;
use serde_json::Value;
use tokio::sync::SemaphorePermit;

use super::super::client::{Response, SendError};
use super::super::stream::excerpt;
use super::{ERROR_BODY_BYTES, Endpoint, Shared, watched};
use crate::engine::{EngineRequest, RemoteError, RemoteErrorKind};

/// What one request on the wire is sent to: its path on the endpoint, the `Accept` it asks for,
/// and the header naming its session, if it has one.
pub(super) struct Post<'a> {
    pub path: &'a str,
    pub accept: &'static str,
    pub session: Option<(&'a str, u64)>,
}

/// A request whose 2xx response head came.
pub(super) struct Sent<'e> {
    pub response: Response,
    /// The endpoint's connection slot, held until the answer is read.
    pub slot: SemaphorePermit<'e>,
    /// When it was handed to the client (wall clock, seconds).
    pub arrival_wall: f64,
    /// When the head came: the request's last sign of progress.
    pub progress: tokio::time::Instant,
}

/// Sends `body` for `requests` as `post` to `endpoint` and waits for a 2xx head, or the error
/// that fails the request: no slot, no connection, no head within the stall watch, a non-2xx.
pub(super) async fn send_watched<'e>(
    shared: &Shared,
    endpoint: &'e Endpoint,
    post: Post<'_>,
    requests: &[&EngineRequest],
    body: &Value,
) -> Result<Sent<'e>, RemoteError> {
    let url = &endpoint.url;
    let remote = |kind, message: String| shared.remote(kind, url, message);
    // Never closed, so this waits for a slot and nothing else.
    let slot = endpoint.slots.acquire().await.map_err(|e| remote(RemoteErrorKind::ConnectFailed, e.to_string()))?;
    let path = post.path;
    let mut http = shared
        .request(Method::POST, &format!("{url}{path}"))
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, post.accept)
        .header("x-request-id", request_id(&shared.request_id_prefix, requests));
    if let Some((name, session)) = post.session {
        http = http.header(name, session.to_string());
    }
    let http = http
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| remote(RemoteErrorKind::ConnectFailed, format!("{url}{path}: {e}")))?;
    let arrival_wall = wall_secs();
    // The progress watch starts here: the slot's wait above is ours, not the server's.
    let sent_at = tokio::time::Instant::now();
    let response = match watched(shared, endpoint, sent_at, shared.client.send(http)).await {
        Some(sent) => sent.map_err(|e| remote(send_error_kind(&e), e.message))?,
        None => {
            let limit = shared.stall_limit();
            return Err(remote(
                RemoteErrorKind::Stalled,
                format!("no response head within the stall timeout of {limit:?}"),
            ));
        }
    };
    let progress = tokio::time::Instant::now();
    endpoint.saw_progress(progress);
    let status = response.status();
    if !status.is_success() {
        let kind = match status.as_u16() {
            429 => RemoteErrorKind::Http429,
            500..=599 => RemoteErrorKind::Http5xx,
            _ => RemoteErrorKind::Http4xx,
        };
        let body = error_body(response).await;
        return Err(remote(kind, format!("HTTP {status}: {body}")));
    }
    Ok(Sent { response, slot, arrival_wall, progress })
}

/// The `X-Request-Id` of one request on the wire: the prefix, then the batchlab ids of its
/// prompts in choice order, comma-separated (`batchlab-1f2e3d-12,13,14`). A server that logs it
/// (vLLM, `batchlab serve --timing-log`) names each choice by it; `scripts/bench_http_compare.py`
/// matches the server's times to requests.jsonl through it.
fn request_id(prefix: &str, requests: &[&EngineRequest]) -> String {
    let ids: Vec<String> = requests.iter().map(|r| r.id.to_string()).collect();
    format!("{prefix}{}", ids.join(","))
}

fn wall_secs() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// What kind of failure a request that got no response is.
fn send_error_kind(e: &SendError) -> RemoteErrorKind {
    if e.connect {
        RemoteErrorKind::ConnectFailed
    } else {
        // Connected, then closed before the response head (a server that died holding it).
        RemoteErrorKind::StreamDropped
    }
}

/// An error response's message: OpenAI's `error.message`, else the start of the body.
pub(super) async fn error_body(response: Response) -> String {
    let text = response.text(ERROR_BODY_BYTES).await.unwrap_or_default();
    let message = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
        v.get("error")
            .and_then(|e| e.get("message").or(Some(e)))
            .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned))
    });
    excerpt(message.as_deref().unwrap_or(text.trim()))
}
