//! One embeddings request on the wire (`api = "embeddings"`): sent, its whole answer read within
//! the byte cap and the stall watch, and one output per input, timed by the answer's arrival.
//! The body and the answer's reading are sans IO, in [`super::super::embed`].

use serde_json::Value;

use super::super::embed::{Embedded, embedding_body_cap, read_answer};
use super::send::{Post, Sent, send_watched};
use super::{Endpoint, Shared, watched};
use crate::engine::{EngineOutput, EngineRequest, EngineStats, FinishReason, RemoteError, RemoteErrorKind};

/// One `POST /v1/embeddings` for `requests`: an output per request, or the error that fails them
/// all. Every input is done when the whole answer came (the batch's completion), and none has a
/// first token.
pub(super) async fn embed_request(
    shared: &Shared,
    endpoint: &Endpoint,
    requests: &[&EngineRequest],
    body: &Value,
) -> Result<Vec<EngineOutput>, RemoteError> {
    let url = &endpoint.url;
    let remote = |kind, message: String| shared.remote(kind, url, message);
    let post = Post { path: "/v1/embeddings", accept: "application/json", session: None };
    let Sent { mut response, slot: _slot, arrival_wall, mut progress } =
        send_watched(shared, endpoint, post, requests, body).await?;
    let stalled = |what: &str| {
        let limit = shared.stall_limit();
        remote(RemoteErrorKind::Stalled, format!("{what} within the stall timeout of {limit:?}"))
    };
    let sent_ts = response.sent_at().as_secs_f64();
    // The whole answer, each chunk progress, never more than the cap in memory.
    let cap = embedding_body_cap(requests.len());
    let mut answer: Vec<u8> = Vec::new();
    loop {
        let Some(chunk) = watched(shared, endpoint, progress, response.chunk()).await else {
            return Err(stalled(&format!("the answer stopped after {} bytes: nothing more", answer.len())));
        };
        match chunk {
            Ok(Some((bytes, _))) => {
                let now = tokio::time::Instant::now();
                shared.saw_gap(now - progress);
                progress = now;
                endpoint.saw_progress(now);
                if answer.len() as u64 + bytes.len() as u64 > cap {
                    return Err(remote(
                        RemoteErrorKind::BadResponse,
                        format!("the answer to {} inputs is longer than {cap} bytes", requests.len()),
                    ));
                }
                answer.extend_from_slice(&bytes);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(remote(
                    RemoteErrorKind::StreamDropped,
                    format!("the answer broke after {} bytes: {e}", answer.len()),
                ));
            }
        }
    }
    let embedded = read_answer(&answer, requests).map_err(|e| remote(RemoteErrorKind::BadResponse, e))?;
    Ok(requests
        .iter()
        .zip(embedded)
        .map(|(request, e)| output(request, e, sent_ts, arrival_wall, url, requests.len()))
        .collect())
}

/// One input's output: no tokens generated, so no token times (TTFT, TPOT and ITL absent); its
/// latency ends when the engine hands the batch back, once every answer of it is whole.
fn output(
    request: &EngineRequest,
    embedded: Embedded,
    sent_ts: f64,
    arrival_wall: f64,
    endpoint: &str,
    wire_batch: usize,
) -> EngineOutput {
    let stats = EngineStats {
        arrival_wall: Some(arrival_wall),
        queued_ts: Some(sent_ts),
        sent_ts: Some(sent_ts),
        endpoint: Some(endpoint.to_owned()),
        token_count_source: embedded.source,
        wire_batch: u32::try_from(wire_batch).ok(),
        ..EngineStats::default()
    };
    EngineOutput::new(Some(request.id), FinishReason::Stop)
        .with_prompt_tokens(embedded.prompt_tokens)
        .with_output_tokens(0)
        .with_stats(stats)
        .with_embedding_dims(embedded.dimensions)
}
