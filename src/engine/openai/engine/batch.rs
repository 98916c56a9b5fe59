//! One batch on the wire: its groups sent as HTTP requests at once, each routed, streamed,
//! timed and bounded by its deadline and the stall watch; each prompt's output put back in its
//! request's place, and each request's outcome reported to the router.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::super::config::{Api, DEFAULT_SESSION_HEADER, request_timeout};
use super::super::request;
use super::super::route::{Change, Health, Pick};
use super::super::sse::SseParser;
use super::super::stream::{ChoiceError, ChoiceResult, ResponseStream, StreamError, excerpt};
use super::embed::embed_request;
use super::send::{Post, Sent, error_body, send_watched};
use super::{Endpoint, Shared, lock, watched};
use crate::engine::{EngineError, EngineOutput, EngineRequest, EngineStats, Prompt, RemoteError, RemoteErrorKind};
use crate::time::MonotonicClock;

/// How long a whole answer's connection may keep its body open before it is dropped.
const DRAIN: Duration = Duration::from_millis(500);

/// One batch: its groups ([`request::groups`]) sent at once, each output in its request's place.
/// Each HTTP request's prompts get their own outcome: a request that failed fails only its
/// prompts (charged to its endpoint), a refused choice only its prompt ([`EngineOutput::failure`]).
/// When every prompt failed alike, the batch fails with that one error.
pub(super) async fn run_batch(
    shared: Arc<Shared>,
    batch: Vec<EngineRequest>,
) -> Result<Vec<EngineOutput>, EngineError> {
    // The timeout runs from here: waiting for a free connection counts.
    let start = tokio::time::Instant::now();
    let groups = request::groups(&batch, shared.config.api);
    let mut bodies = Vec::with_capacity(groups.len());
    for group in &groups {
        let requests: Vec<&EngineRequest> = group.iter().map(|&i| &batch[i]).collect();
        bodies.push(request::body(&shared.config.model, shared.config.api, &requests).map_err(EngineError::Generate)?);
    }
    let sends = groups.iter().zip(bodies).map(|(group, body)| {
        let requests: Vec<&EngineRequest> = group.iter().map(|&i| &batch[i]).collect();
        let asked = requests.first().map_or(0, |r| r.max_tokens);
        let timeout = request_timeout(shared.config.timeout, shared.config.api, asked);
        send_group(&shared, requests, body, start, timeout)
    });
    let results = futures_util::future::join_all(sends).await;
    let outputs = place(&groups, results, batch.len());
    match outputs.first().and_then(|o| o.failure.as_ref()) {
        Some(first) if outputs.iter().all(|o| o.failure.as_ref() == Some(first)) => {
            Err(EngineError::Remote(first.clone()))
        }
        _ => Ok(outputs),
    }
}

/// The groups' outputs in their requests' places in the batch.
fn place(groups: &[Vec<usize>], results: Vec<Vec<EngineOutput>>, len: usize) -> Vec<EngineOutput> {
    let mut outputs: Vec<Option<EngineOutput>> = vec![None; len];
    for (group, result) in groups.iter().zip(results) {
        for (&i, output) in group.iter().zip(result) {
            outputs[i] = Some(output);
        }
    }
    outputs.into_iter().flatten().collect()
}

/// One HTTP request for `requests`, routed, timed and bounded by `deadline`: one output per
/// request, in order, each failed alone or with the whole HTTP request.
async fn send_group(
    shared: &Shared,
    requests: Vec<&EngineRequest>,
    body: Value,
    start: tokio::time::Instant,
    timeout: Duration,
) -> Vec<EngineOutput> {
    let pick = lock(&shared.router).pick_for(MonotonicClock::read(), session_of(&requests));
    let endpoint = &shared.endpoints[pick.index];
    let answer = async {
        match shared.config.api {
            Api::Embeddings => embed_request(shared, endpoint, &requests, &body).await,
            _ => stream_request(shared, endpoint, &requests, &body).await,
        }
    };
    let result = match tokio::time::timeout_at(start + timeout, answer).await {
        Ok(result) => result,
        Err(_) => Err(shared.remote(
            RemoteErrorKind::Timeout,
            &endpoint.url,
            format!("no complete answer within the request timeout of {timeout:?}"),
        )),
    };
    finish_pick(shared, pick, &result);
    match result {
        Ok(prompts) => prompts,
        Err(e) => requests.iter().map(|r| EngineOutput::failed(Some(r.id), e.clone())).collect(),
    }
}

/// What a request's outcome says about its endpoint: a server that hangs, drops its streams,
/// times out or sends what it must not (too many tokens, not an event stream) leaves the rotation
/// as one that cannot be reached does, and is probed back the same way.
fn health(result: &Result<Vec<EngineOutput>, RemoteError>) -> Health {
    let kind = match result {
        Ok(outputs) => match outputs.iter().find_map(|o| o.failure.as_ref()) {
            Some(refused) => refused.kind,
            None => return Health::Up,
        },
        Err(e) => e.kind,
    };
    match kind {
        RemoteErrorKind::Http429 | RemoteErrorKind::Http4xx => Health::Up,
        RemoteErrorKind::ConnectFailed
        | RemoteErrorKind::Http5xx
        | RemoteErrorKind::StreamDropped
        | RemoteErrorKind::Timeout
        | RemoteErrorKind::Stalled
        | RemoteErrorKind::BadResponse => Health::Down,
    }
}

fn finish_pick(shared: &Shared, pick: Pick, result: &Result<Vec<EngineOutput>, RemoteError>) {
    let change = lock(&shared.router).finish(pick, health(result), MonotonicClock::read());
    let error = match result {
        Ok(outputs) => outputs.iter().find_map(|o| o.failure.as_ref()),
        Err(e) => Some(e),
    };
    // Once per change, not per failed request: a dead endpoint's every probe would flood the log.
    let url = &shared.endpoints[pick.index].url;
    match (change, error) {
        (Change::Left, Some(e)) => tracing::warn!(endpoint = %url, "out of rotation until probed: {e}"),
        (Change::Back, _) => tracing::warn!(endpoint = %url, "back in rotation"),
        (_, Some(e)) => tracing::debug!(endpoint = %url, "request failed: {e}"),
        _ => {}
    }
}

/// The session of one request on the wire: its prompts' session when they are all turns of one
/// (a chat request always is: one conversation); `None` otherwise.
fn session_of(requests: &[&EngineRequest]) -> Option<u64> {
    let first = requests.first()?.session?;
    requests.iter().all(|r| r.session == Some(first)).then_some(first)
}

/// One HTTP request's stream: an output per request (a refused choice as a failed output), or
/// the error that fails all of them.
async fn stream_request(
    shared: &Shared,
    endpoint: &Endpoint,
    requests: &[&EngineRequest],
    body: &Value,
) -> Result<Vec<EngineOutput>, RemoteError> {
    let url = &endpoint.url;
    let remote = |kind, message: String| shared.remote(kind, url, message);
    let chat = shared.config.api == Api::Chat;
    let post = Post {
        path: if chat { "/v1/chat/completions" } else { "/v1/completions" },
        accept: "text/event-stream",
        session: session_of(requests)
            .map(|s| (shared.config.session_header.as_deref().unwrap_or(DEFAULT_SESSION_HEADER), s)),
    };
    // The progress watch: the head, then each event with data, must come within the stall limit
    // of the last sign of progress.
    let Sent { mut response, slot: _slot, arrival_wall, mut progress } =
        send_watched(shared, endpoint, post, requests, body).await?;
    let stalled = |limit: Duration, what: &str| {
        remote(RemoteErrorKind::Stalled, format!("{what} within the stall timeout of {limit:?}"))
    };
    // When the request's bytes went: the write on its connection, not when it was queued here.
    let sent_ts = response.sent_at().as_secs_f64();
    if response.is_json() {
        // A proxy (or server) that ignores `stream: true`: an answer, but not one batchlab can time.
        let body = error_body(response).await;
        return Err(remote(RemoteErrorKind::BadResponse, format!("{NOT_A_STREAM}: {body}")));
    }
    let max_tokens = requests.first().map_or(u32::MAX, |r| r.max_tokens);
    let mut parser = SseParser::new();
    let mut stream = ResponseStream::new(requests.len(), chat).with_max_tokens(max_tokens);
    let mut events = Vec::new();
    let mut seen_event = false;
    // The body's first bytes, to show what it was when it was not an event stream.
    let mut head_bytes: Vec<u8> = Vec::new();
    loop {
        let chunk = match watched(shared, endpoint, progress, response.chunk()).await {
            Some(chunk) => chunk,
            None => {
                let (finished, of) = stream.finished_count();
                let limit = shared.stall_limit();
                return Err(stalled(limit, &format!("nothing new after {finished} of {of} prompts finished")));
            }
        };
        match chunk {
            Ok(Some((bytes, at))) => {
                if head_bytes.len() < 200 {
                    head_bytes.extend_from_slice(&bytes[..bytes.len().min(200 - head_bytes.len())]);
                }
                let at = at.as_secs_f64();
                parser.feed(&bytes, &mut events).map_err(|e| remote(RemoteErrorKind::BadResponse, e.to_string()))?;
                if !events.is_empty() {
                    let now = tokio::time::Instant::now();
                    shared.saw_gap(now - progress);
                    progress = now;
                    endpoint.saw_progress(now);
                    seen_event = true;
                }
                for event in events.drain(..) {
                    stream.handle(&event.data, at).map_err(|e| match e {
                        StreamError::Malformed(m) => remote(RemoteErrorKind::BadResponse, m),
                        StreamError::Server { status, .. } => {
                            let kind = match status {
                                Some(429) => RemoteErrorKind::Http429,
                                Some(400..=499) => RemoteErrorKind::Http4xx,
                                _ => RemoteErrorKind::Http5xx,
                            };
                            remote(kind, e.to_string())
                        }
                    })?;
                }
                if stream.all_failed() {
                    break; // every choice refused: nothing more is worth reading
                }
                if stream.done() && stream.all_finished() {
                    // The answer is whole. The body's end follows at once from a well-behaved
                    // server (read, it frees the connection for the next request); one that
                    // keeps the body open costs at most `DRAIN`.
                    let drain = async { while let Ok(Some(_)) = response.chunk().await {} };
                    let _ = tokio::time::timeout(DRAIN, drain).await;
                    break;
                }
            }
            // The body ended: after `[DONE]` as it should, or cut short.
            Ok(None) => break,
            Err(e) => {
                let (finished, of) = stream.finished_count();
                if stream.done() && finished == of {
                    break; // everything came; only the body's end did not
                }
                return Err(remote(
                    RemoteErrorKind::StreamDropped,
                    format!("the stream broke after {finished} of {of} prompts finished: {e}"),
                ));
            }
        }
    }
    if !seen_event && parser.pending() {
        // A whole body with no event in it (JSON, HTML) is an answer of the wrong shape.
        let text = String::from_utf8_lossy(&head_bytes).into_owned();
        return Err(remote(RemoteErrorKind::BadResponse, format!("{NOT_A_STREAM}: {}", excerpt(text.trim()))));
    }
    let (finished, of) = stream.finished_count();
    let done = stream.done();
    let Some(choices) = stream.finish() else {
        let how = if done { "`[DONE]` came" } else { "the stream ended" };
        return Err(remote(RemoteErrorKind::StreamDropped, format!("{how} after {finished} of {of} prompts finished")));
    };
    Ok(requests
        .iter()
        .zip(choices)
        .map(|(request, choice)| match choice {
            Ok(choice) => output(request, choice, sent_ts, arrival_wall, url, requests.len()),
            Err(refused) => EngineOutput::failed(Some(request.id), refused_choice(shared, url, refused)),
        })
        .collect())
}

/// The start of the message of a 200 whose body is not an event stream.
const NOT_A_STREAM: &str = "the server answered 200 with a body that is not an event stream (a proxy that ignores \
                            `stream: true`?)";

fn refused_choice(shared: &Shared, url: &str, refused: ChoiceError) -> RemoteError {
    shared.remote(RemoteErrorKind::BadResponse, url, refused.to_string())
}

/// One prompt's output and the client's timing of it. `queued_ts` is when the request was sent
/// (the server has it from then on, as far as a client can know); `scheduled_ts` is unknown.
fn output(
    request: &EngineRequest,
    choice: ChoiceResult,
    sent_ts: f64,
    arrival_wall: f64,
    endpoint: &str,
    wire_batch: usize,
) -> EngineOutput {
    let prompt_tokens = choice.prompt_tokens.or(match &request.prompt {
        Prompt::Tokens(ids) => u32::try_from(ids.len()).ok(),
        _ => None,
    });
    let stats = EngineStats {
        arrival_wall: Some(arrival_wall),
        queued_ts: Some(sent_ts),
        scheduled_ts: None,
        first_token_ts: choice.token_ts.first().copied(),
        last_token_ts: choice.token_ts.last().copied(),
        token_ts: Some(choice.token_ts),
        token_steps: None,
        cached_tokens: choice.cached_tokens,
        image_cache_hits: None,
        sent_ts: Some(sent_ts),
        endpoint: Some(endpoint.to_owned()),
        token_count_source: Some(choice.source),
        wire_batch: u32::try_from(wire_batch).ok(),
    };
    EngineOutput::new(Some(request.id), choice.finish_reason)
        .with_prompt_tokens(prompt_tokens)
        .with_output_tokens(choice.output_tokens)
        .with_output_token_ids(choice.token_ids)
        .with_text(choice.text)
        .with_stats(stats)
}
