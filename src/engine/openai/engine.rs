//! [`OpenAiEngine`]: the HTTP client on a tokio runtime of its own, its two faces (the blocking
//! [`Engine`] and the [`ConcurrentEngine`]), endpoint checks at start, and the `/metrics` scrape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Method, Request};
use http_body_util::Full;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::client::{HttpClient, Response, SendError};
use super::config::{Api, OpenAiConfig, request_timeout, stall_limit};
use super::request;
use super::route::{Change, Health, Pick, Router};
use super::scrape;
use super::sse::SseParser;
use super::stream::{ChoiceError, ChoiceResult, ResponseStream, StreamError, excerpt};
use crate::engine::{
    Concurrent, ConcurrentEngine, Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats,
    GenerateDone, Prompt, RemoteError, RemoteErrorKind, ServerCounters, Started,
};
use crate::time::MonotonicClock;

/// How long a connection may take to open before the request fails with `connect_failed` (the
/// request's own `timeout` also applies, when shorter).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `start` waits for each endpoint's `/v1/models`, and a scrape for `/metrics`.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `shutdown` lets requests still running wind down before dropping them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long a whole answer's connection may keep its body open before it is dropped.
const DRAIN: Duration = Duration::from_millis(500);
/// Most bytes of an error response kept for its message.
const ERROR_BODY_BYTES: usize = 4096;
/// Most bytes read of a model listing or a `/metrics` page.
const LISTING_BYTES: usize = 16 << 20;

/// An OpenAI-compatible server (or several) as an engine; see the module docs of
/// [`crate::engine::openai`]. Cheap to make: nothing connects before [`Engine::start`].
pub struct OpenAiEngine {
    config: OpenAiConfig,
    started: Option<Running>,
}

struct Running {
    runtime: tokio::runtime::Runtime,
    shared: Arc<Shared>,
}

/// What every request of a started engine uses.
struct Shared {
    config: OpenAiConfig,
    client: HttpClient,
    auth: Option<ApiKey>,
    endpoints: Vec<Endpoint>,
    router: Mutex<Router>,
    runtime: tokio::runtime::Handle,
    /// The longest gap between two signs of progress of one request seen so far (ns): what a
    /// derived `stall_timeout` scales.
    longest_gap: AtomicU64,
    /// `batchlab-<this engine start>-`: the head of every request's `X-Request-Id`, so two runs
    /// against one server never send the same id (vLLM takes the header as its request id).
    request_id_prefix: String,
}

struct Endpoint {
    url: String,
    /// `max_connections` permits: a request holds one from before it is sent to its stream's end.
    slots: Semaphore,
    /// The endpoint's last sign of progress on any of our requests (a response head, an event
    /// with data): the progress watch is per endpoint, so a request queued behind others on a
    /// busy server that answers them is not taken for a hung one.
    progress: Mutex<tokio::time::Instant>,
}

impl Endpoint {
    fn progress(&self) -> tokio::time::Instant {
        *lock(&self.progress)
    }

    fn saw_progress(&self, at: tokio::time::Instant) {
        let mut last = lock(&self.progress);
        *last = (*last).max(at);
    }
}

/// Waits for `work`, failing with `None` only once neither this request (since `own`) nor its
/// endpoint has made progress for the stall limit.
async fn watched<F: std::future::Future>(
    shared: &Shared,
    endpoint: &Endpoint,
    own: tokio::time::Instant,
    work: F,
) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    loop {
        let limit = shared.stall_limit();
        let since = own.max(endpoint.progress());
        if let Ok(done) = tokio::time::timeout_at(since + limit, &mut work).await {
            return Some(done);
        }
        if endpoint.progress() + shared.stall_limit() <= tokio::time::Instant::now() {
            return None;
        }
    }
}

/// The API key, as the header that sends it; its `Debug` shows nothing of it.
struct ApiKey {
    header: HeaderValue,
    key: String,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl std::fmt::Debug for OpenAiEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEngine").field("config", &self.config).field("started", &self.started.is_some()).finish()
    }
}

impl OpenAiEngine {
    /// An engine for `config`.
    pub fn new(config: OpenAiConfig) -> Self {
        OpenAiEngine { config, started: None }
    }

    /// Its settings.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

/// The API key from the environment variable `config.api_key_env` names, if it names one.
fn read_api_key(config: &OpenAiConfig) -> Result<Option<ApiKey>, EngineError> {
    let Some(name) = &config.api_key_env else { return Ok(None) };
    if let Err(why) = super::config::check_api_key_env(name) {
        return Err(EngineError::Start(format!("`engine.openai.api_key_env` {why}")));
    }
    let key = match std::env::var(name) {
        Ok(key) if !key.trim().is_empty() => key.trim().to_owned(),
        Ok(_) => return Err(EngineError::Start(format!("`engine.openai.api_key_env`: ${name} is empty"))),
        Err(_) => return Err(EngineError::Start(format!("`engine.openai.api_key_env`: ${name} is not set"))),
    };
    let mut header = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
        EngineError::Start(format!("`engine.openai.api_key_env`: ${name} holds characters a header cannot carry"))
    })?;
    header.set_sensitive(true);
    Ok(Some(ApiKey { header, key }))
}

impl Shared {
    /// How long a request may now go without progress.
    fn stall_limit(&self) -> Duration {
        stall_limit(self.config.stall_timeout, Duration::from_nanos(self.longest_gap.load(Ordering::Relaxed)))
    }

    /// A request made progress `gap` after its last.
    fn saw_gap(&self, gap: Duration) {
        self.longest_gap.fetch_max(u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// `message` with the API key, should a server have echoed it, blanked out.
    fn scrub(&self, message: String) -> String {
        match &self.auth {
            Some(auth) if message.contains(&auth.key) => message.replace(&auth.key, "[redacted]"),
            _ => message,
        }
    }

    fn remote(&self, kind: RemoteErrorKind, endpoint: &str, message: String) -> RemoteError {
        RemoteError::new(kind, endpoint, self.scrub(message))
    }

    /// A request to `url`, with the key when there is one.
    fn request(&self, method: Method, url: &str) -> http::request::Builder {
        let request = Request::builder().method(method).uri(url);
        match &self.auth {
            Some(auth) => request.header(AUTHORIZATION, auth.header.clone()),
            None => request,
        }
    }

    /// `GET url`, up to the response head.
    async fn get(&self, url: &str) -> Result<Response, String> {
        let request = self.request(Method::GET, url).body(Full::default()).map_err(|e| format!("{url}: {e}"))?;
        self.client.send(request).await.map_err(|e| e.message)
    }
}

impl Engine for OpenAiEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        if self.config.urls.is_empty() {
            return Err(EngineError::Start("`engine.openai.urls` is empty".into()));
        }
        let auth = read_api_key(&self.config)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("batchlab-http")
            .enable_all()
            .build()
            .map_err(|e| EngineError::Start(format!("cannot start the HTTP client's runtime: {e}")))?;
        let max = self.config.max_connections.max(1) as usize;
        let client = HttpClient::new(max, CONNECT_TIMEOUT.min(self.config.timeout.unwrap_or(CONNECT_TIMEOUT)));
        let endpoints = self
            .config
            .urls
            .iter()
            .map(|url| Endpoint {
                url: url.clone(),
                slots: Semaphore::new(max),
                progress: Mutex::new(tokio::time::Instant::now()),
            })
            .collect();
        let shared = Arc::new(Shared {
            config: self.config.clone(),
            client,
            auth,
            endpoints,
            router: Mutex::new(Router::new(self.config.urls.len(), self.config.routing)),
            longest_gap: AtomicU64::new(0),
            runtime: runtime.handle().clone(),
            request_id_prefix: format!("batchlab-{:x}{:x}-", std::process::id(), MonotonicClock::read().as_nanos()),
        });
        let checks = runtime
            .block_on(futures_util::future::join_all(shared.endpoints.iter().map(|e| check_endpoint(&shared, &e.url))));
        let mut version = None;
        let mut unreachable = Vec::new();
        for (index, check) in checks.into_iter().enumerate() {
            let url = &shared.endpoints[index].url;
            match check {
                Check::Serves { version: v } => {
                    tracing::info!(target: "batchlab::engine_step", "{url}: serves {}", self.config.model);
                    version = version.or(v);
                }
                Check::Refused(why) => return Err(EngineError::Start(shared.scrub(why))),
                Check::Unreachable(why) => {
                    tracing::warn!(endpoint = %url, "not reachable at start, out of rotation until probed: {why}");
                    lock(&shared.router).mark_down(index, MonotonicClock::read());
                    unreachable.push(format!("{url}: {why}"));
                }
            }
        }
        if unreachable.len() == shared.endpoints.len() {
            let why = shared.scrub(unreachable.join("; "));
            return Err(EngineError::Start(format!("no endpoint of `engine.openai.urls` is reachable: {why}")));
        }
        self.started = Some(Running { runtime, shared: shared.clone() });
        let info = EngineInfo::new("openai", version.unwrap_or_else(|| "unknown".into())).with_processes(Vec::new());
        // The concurrent face: each batch a task on the engine's runtime; the servers' counters
        // from their `/metrics`.
        let counters = shared.clone();
        let concurrent = Concurrent {
            counters: Some(Arc::new(move || server_counters(&counters))),
            ..Concurrent::new(Arc::new(Face(shared)))
        };
        Ok(Started { info, concurrent: Some(concurrent) })
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let Some(started) = &self.started else {
            return Err(EngineError::Generate("the HTTP engine is not started".into()));
        };
        started.runtime.block_on(run_batch(started.shared.clone(), batch.to_vec()))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        if let Some(started) = self.started.take() {
            // Requests still running are dropped after the grace; their `done` is still called.
            started.runtime.shutdown_timeout(SHUTDOWN_GRACE);
        }
        Ok(())
    }
}

impl Drop for OpenAiEngine {
    fn drop(&mut self) {
        if let Some(started) = self.started.take() {
            started.runtime.shutdown_background();
        }
    }
}

/// The concurrent face: each batch a task on the engine's runtime.
struct Face(Arc<Shared>);

impl ConcurrentEngine for Face {
    fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone) {
        let done = DoneOnce(Some(done));
        let shared = self.0.clone();
        // A runtime already shut down drops the task unrun, and `DoneOnce` still answers.
        drop(self.0.runtime.spawn(async move {
            let result = run_batch(shared, batch).await;
            done.call(result);
        }));
    }
}

/// A `done` that is called exactly once: with the result, or, if the task is dropped first (the
/// runtime shut down under it), with an error.
struct DoneOnce(Option<GenerateDone>);

impl DoneOnce {
    fn call(mut self, result: Result<Vec<EngineOutput>, EngineError>) {
        if let Some(done) = self.0.take() {
            done(result);
        }
    }
}

impl Drop for DoneOnce {
    fn drop(&mut self) {
        if let Some(done) = self.0.take() {
            done(Err(EngineError::Generate("the HTTP engine shut down before the batch's request finished".into())));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One batch: its groups ([`request::groups`]) sent at once, each output in its request's place.
/// Each HTTP request's prompts get their own outcome: a request that failed fails only its
/// prompts (charged to its endpoint), a refused choice only its prompt ([`EngineOutput::failure`]).
/// When every prompt failed alike, the batch fails with that one error.
async fn run_batch(shared: Arc<Shared>, batch: Vec<EngineRequest>) -> Result<Vec<EngineOutput>, EngineError> {
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
        let timeout = request_timeout(shared.config.timeout, requests.first().map_or(0, |r| r.max_tokens));
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
    let pick = lock(&shared.router).pick(MonotonicClock::read());
    let endpoint = &shared.endpoints[pick.index];
    let result =
        match tokio::time::timeout_at(start + timeout, stream_request(shared, endpoint, &requests, &body)).await {
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

/// The `X-Request-Id` of one request on the wire: the prefix, then the batchlab ids of its
/// prompts in choice order, comma-separated (`batchlab-1f2e3d-12,13,14`). A server that logs it
/// (vLLM, `batchlab serve --timing-log`) names each choice by it; `scripts/bench_http_compare.py`
/// matches the server's times to requests.jsonl through it.
fn request_id(prefix: &str, requests: &[&EngineRequest]) -> String {
    let ids: Vec<String> = requests.iter().map(|r| r.id.to_string()).collect();
    format!("{prefix}{}", ids.join(","))
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
    // Never closed, so this waits for a slot and nothing else.
    let _slot = endpoint.slots.acquire().await.map_err(|e| remote(RemoteErrorKind::ConnectFailed, e.to_string()))?;
    let chat = shared.config.api == Api::Chat;
    let path = if chat { "/v1/chat/completions" } else { "/v1/completions" };
    let http = shared
        .request(Method::POST, &format!("{url}{path}"))
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .header("x-request-id", request_id(&shared.request_id_prefix, requests))
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| remote(RemoteErrorKind::ConnectFailed, format!("{url}{path}: {e}")))?;
    let arrival_wall = wall_secs();
    // The progress watch: the head, then each event with data, must come within the stall limit
    // of the last sign of progress (the slot's wait above is ours, not the server's).
    let mut progress = tokio::time::Instant::now();
    let stalled = |limit: Duration, what: &str| {
        remote(RemoteErrorKind::Stalled, format!("{what} within the stall timeout of {limit:?}"))
    };
    let mut response = match watched(shared, endpoint, progress, shared.client.send(http)).await {
        Some(sent) => sent.map_err(|e| remote(send_error_kind(&e), e.message))?,
        None => return Err(stalled(shared.stall_limit(), "no response head")),
    };
    progress = tokio::time::Instant::now();
    endpoint.saw_progress(progress);
    // When the request's bytes went: the write on its connection, not when it was queued here.
    let sent_ts = response.sent_at().as_secs_f64();
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
async fn error_body(response: Response) -> String {
    let text = response.text(ERROR_BODY_BYTES).await.unwrap_or_default();
    let message = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
        v.get("error")
            .and_then(|e| e.get("message").or(Some(e)))
            .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned))
    });
    excerpt(message.as_deref().unwrap_or(text.trim()))
}

/// What `start` learned of an endpoint.
enum Check {
    /// It serves the model (its `/version`, where it has one).
    Serves { version: Option<String> },
    /// It answered, and the answer makes the configuration wrong (another model, a refused key).
    Refused(String),
    /// It could not be reached (or answered 5xx): out of rotation until probed.
    Unreachable(String),
}

/// `GET /v1/models`: reachable, and serving the model?
async fn check_endpoint(shared: &Shared, url: &str) -> Check {
    let model = &shared.config.model;
    let limit = CHECK_TIMEOUT.min(shared.config.timeout.unwrap_or(CHECK_TIMEOUT));
    let models = async {
        let response = shared.get(&format!("{url}/v1/models")).await?;
        let status = response.status();
        let text = response.text(LISTING_BYTES).await?;
        Ok::<_, String>((status, text))
    };
    let (status, text) = match tokio::time::timeout(limit, models).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return Check::Unreachable(e),
        Err(_) => return Check::Unreachable(format!("no answer to GET /v1/models within {limit:?}")),
    };
    match status.as_u16() {
        200..=299 => {}
        401 | 403 => {
            let key = match &shared.config.api_key_env {
                Some(name) => format!("check the key in ${name}"),
                None => "set `engine.openai.api_key_env` to the variable that holds the key".into(),
            };
            return Check::Refused(format!("{url} refused GET /v1/models with HTTP {status}: {key}"));
        }
        // A server without the listing: the model is checked by the first request instead.
        404 => {
            tracing::warn!(endpoint = %url, "no GET /v1/models: cannot check that it serves {model}");
            return Check::Serves { version: server_version(shared, url).await };
        }
        _ => return Check::Unreachable(format!("GET /v1/models answered HTTP {status}")),
    }
    let served: Vec<String> = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v.get("data").and_then(Value::as_array).cloned())
        .map(|data| data.iter().filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_owned)).collect())
        .unwrap_or_default();
    if served.iter().any(|m| m == model) {
        Check::Serves { version: server_version(shared, url).await }
    } else {
        let list = if served.is_empty() { "none listed".to_owned() } else { served.join(", ") };
        Check::Refused(format!("{url} does not serve `engine.openai.model` \"{model}\" (it serves: {list})"))
    }
}

/// `GET /version` (vLLM's `{"version": "0.x"}`), where the server has it.
async fn server_version(shared: &Shared, url: &str) -> Option<String> {
    let get = async {
        let response = shared.get(&format!("{url}/version")).await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let v: Value = serde_json::from_str(&response.text(ERROR_BODY_BYTES).await.ok()?).ok()?;
        v.get("version").and_then(Value::as_str).map(str::to_owned)
    };
    tokio::time::timeout(CHECK_TIMEOUT, get).await.ok().flatten()
}

/// Every endpoint's `/metrics` now, at once; those without one (or unreachable) are left out.
/// Waits on the engine's runtime from any thread, never longer than [`CHECK_TIMEOUT`].
fn server_counters(shared: &Arc<Shared>) -> Vec<ServerCounters> {
    let (tx, rx) = std::sync::mpsc::channel();
    let task = shared.clone();
    drop(shared.runtime.spawn(async move {
        let scrapes = task.endpoints.iter().map(|e| scrape_endpoint(&task, &e.url));
        let all = tokio::time::timeout(CHECK_TIMEOUT, futures_util::future::join_all(scrapes)).await;
        let _ = tx.send(all.map(|all| all.into_iter().flatten().collect()).unwrap_or_default());
    }));
    rx.recv_timeout(CHECK_TIMEOUT + Duration::from_secs(1)).unwrap_or_default()
}

async fn scrape_endpoint(shared: &Shared, url: &str) -> Option<ServerCounters> {
    let response = shared.get(&format!("{url}/metrics")).await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let text = response.text(LISTING_BYTES).await.ok()?;
    Some(ServerCounters { endpoint: url.to_owned(), counters: scrape::parse_counters(&text) })
}
