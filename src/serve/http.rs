//! The HTTP face: axum routes over the engine thread, streamed responses, and shutdown.
//!
//! hyper speaks HTTP/1.1; a streamed response's SSE events (`data: …\n\n`, as axum's `Sse`
//! frames them) are rendered by [`super::chunk`], the tokens waiting at a poll into one frame.
//! Each token is handed to hyper as soon as the stream is polled after the engine thread sends
//! it, and hyper writes a streamed body's frame as soon as it has it, so the inter-token gaps a
//! client sees are the simulated steps'.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use super::api::{self, ApiError, Endpoint, GenerationRequest};
use super::chunk::{self, ChunkRenderer};
use super::conn::{self, ConnectionStamps};
use super::core::{NewSequence, RequestId, ServeCore, SubmitError};
use super::faults::RequestFaults;
use super::metrics::{ServeMetrics, render};
use super::timing::{MAX_REQUEST_ID_LEN, TimingRecord, TimingSender};
use super::worker::{EngineHandle, TokenMsg};
use super::{ServeConfig, ServeError};
use crate::engine::sim::encoder::EncoderInput;
use crate::engine::sim::prompt::counted_ids;
use crate::engine::tokenizer::TokenCounter;
use crate::engine::{EngineRequest, FinishReason};
use crate::time::{MonotonicClock, Timestamp};

/// How [`serve`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServeOutcome {
    /// Shut down on request: every stream ended within the grace period or was failed.
    Stopped {
        /// Streams failed after the grace period.
        failed_streams: bool,
    },
    /// The `exit_server` fault fired on this request: exit abruptly.
    FaultExit {
        /// The request's number (1-based).
        request: u64,
    },
}

struct AppState {
    config: ServeConfig,
    engine: EngineHandle,
    registry: Registry,
    requests: AtomicU64,
    closing: AtomicBool,
    created: u64,
    exit: std::sync::Mutex<Option<oneshot::Sender<u64>>>,
}

/// Serves `config` on `listener` until `shutdown` resolves (then: stop accepting, let streams
/// run for `config.grace`, fail the rest) or the `exit_server` fault fires.
pub async fn serve(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ServeOutcome, ServeError> {
    let (metrics, registry) = ServeMetrics::new(&config.model);
    let core = ServeCore::new(config.sim.cost.clone(), config.sim.scheduler, config.max_waiting, metrics);
    let engine = EngineHandle::spawn(core).map_err(ServeError::EngineThread)?;
    let (exit_tx, exit_rx) = oneshot::channel();
    let grace = config.grace;
    let state = Arc::new(AppState {
        config,
        engine: engine.clone(),
        registry,
        requests: AtomicU64::new(0),
        closing: AtomicBool::new(false),
        created: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        exit: std::sync::Mutex::new(Some(exit_tx)),
    });
    let mut app = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .with_state(state.clone());
    if state.config.timing.is_some() {
        // Only with a timing log: the first code to see a request notes when.
        app = app.layer(middleware::from_fn(stamp_received));
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let kernel_stamps = state.config.timing.is_some();
    let limits = state.config.limits;
    let server = conn::serve_connections(listener, kernel_stamps, limits, app, stop_rx);
    let mut server = tokio::spawn(server);
    tokio::select! {
        r = &mut server => {
            r.map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
            return Ok(ServeOutcome::Stopped { failed_streams: false });
        }
        Ok(request) = exit_rx => return Ok(ServeOutcome::FaultExit { request }),
        () = shutdown => {}
    }
    state.closing.store(true, Ordering::SeqCst);
    let _ = stop_tx.send(true);
    if let Ok(r) = tokio::time::timeout(grace, &mut server).await {
        r.map_err(|e| ServeError::Io(std::io::Error::other(e)))?;
        return Ok(ServeOutcome::Stopped { failed_streams: false });
    }
    engine.fail_all("the server is shutting down");
    // Failed streams end at once; a connection that still lingers is dropped with the runtime.
    let _ = tokio::time::timeout(Duration::from_secs(2), &mut server).await;
    Ok(ServeOutcome::Stopped { failed_streams: true })
}

/// `e` as an HTTP response: its status, OpenAI's error JSON, and `Retry-After` if it has one.
pub(super) fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(e.body())).into_response();
    if let Some(secs) = e.retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// When a request came: put in its extensions by [`stamp_received`], the outermost layer, for
/// the timing log. The kernel's receive stamp of the read that brought the request in (one
/// request at a time per HTTP/1.1 connection, so the latest read on it), not when this process
/// got to it; the time the head was parsed where there is no stamp.
#[derive(Copy, Clone, Debug)]
struct Received(Timestamp);

async fn stamp_received(mut request: Request, next: Next) -> Response {
    let stamped = request.extensions().get::<ConnectionStamps>().and_then(|c| c.0.last_received());
    request.extensions_mut().insert(Received(stamped.unwrap_or_else(MonotonicClock::read)));
    next.run(request).await
}

/// What the timing log needs of a request: when it came, and the client's `X-Request-Id`.
struct RequestTag {
    received: Option<Received>,
    request_id: Option<Arc<str>>,
}

impl RequestTag {
    fn new(received: Option<Extension<Received>>, headers: &HeaderMap) -> RequestTag {
        let request_id = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|id| !id.is_empty() && id.len() <= MAX_REQUEST_ID_LEN)
            .map(Arc::from);
        RequestTag { received: received.map(|Extension(r)| r), request_id }
    }
}

/// A request's body, read within [`super::Limits`]: at most `max_body_bytes` (else 413; a
/// `Content-Length` past it is refused before a byte is read), all of it within
/// `body_read_timeout` of the head (else 408). Either way the rest is left unread, so hyper closes
/// the connection after the answer.
struct RequestBody(Bytes);

impl FromRequest<Arc<AppState>> for RequestBody {
    type Rejection = Response;

    async fn from_request(request: Request, s: &Arc<AppState>) -> Result<Self, Response> {
        let limits = &s.config.limits;
        let read = axum::body::to_bytes(request.into_body(), limits.max_body_bytes);
        let e = match tokio::time::timeout(limits.body_read_timeout, read).await {
            Ok(Ok(body)) => return Ok(RequestBody(body)),
            Ok(Err(e)) if is_too_large(&e) => ApiError::status(
                413,
                format!("the request body is larger than {} bytes (--max-body-bytes)", limits.max_body_bytes),
            ),
            Ok(Err(e)) => ApiError::status(400, format!("could not read the request body: {e}")),
            Err(_) => ApiError::status(
                408,
                format!(
                    "the request body did not arrive within {:?} of its head (--body-read-timeout)",
                    limits.body_read_timeout
                ),
            ),
        };
        Err(error_response(&e))
    }
}

fn is_too_large(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

async fn completions(
    State(s): State<Arc<AppState>>,
    received: Option<Extension<Received>>,
    headers: HeaderMap,
    RequestBody(body): RequestBody,
) -> Response {
    let tag = RequestTag::new(received, &headers);
    generate(s, Endpoint::Completions, body, tag).await.unwrap_or_else(|e| error_response(&e))
}

async fn chat_completions(
    State(s): State<Arc<AppState>>,
    received: Option<Extension<Received>>,
    headers: HeaderMap,
    RequestBody(body): RequestBody,
) -> Response {
    let tag = RequestTag::new(received, &headers);
    generate(s, Endpoint::Chat, body, tag).await.unwrap_or_else(|e| error_response(&e))
}

/// `POST /v1/embeddings`: the inputs prefilled by the simulated engine (no decode), answered
/// whole once the last is done, each with its deterministic vector (`serve::embeddings`). The
/// HTTP faults apply as to a generation (a refusal, the process's exit); a stream's faults do not.
async fn embeddings(State(s): State<Arc<AppState>>, RequestBody(body): RequestBody) -> Response {
    embed(s, body).await.unwrap_or_else(|e| error_response(&e))
}

/// A request's admission, the same for every endpoint: refused while the server shuts down, then
/// numbered, with its HTTP faults drawn (`[faults]`). A refusal is an error; the process's exit
/// leaves the request unanswered for good (this never returns). Returns the request's number and
/// its faults (a stream's act later).
async fn admit(s: &AppState) -> Result<(u64, RequestFaults), ApiError> {
    if s.closing.load(Ordering::SeqCst) {
        return Err(overloaded("the server is shutting down".into()));
    }
    let n = s.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let faults = s.config.faults.draw(n);
    if faults.exit {
        if let Some(exit) = s.exit.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = exit.send(n);
        }
        // The process exits; this request is never answered.
        match std::future::pending::<std::convert::Infallible>().await {}
    }
    if let Some(status) = faults.reject {
        return Err(ApiError {
            status,
            message: format!("injected fault: {status} for request {n} (`[faults]`)"),
            param: None,
            retry_after: Some(1),
        });
    }
    Ok((n, faults))
}

async fn embed(s: Arc<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let arrived = MonotonicClock::read();
    let c = &s.config;
    let inputs = super::embeddings::parse_embeddings(&body, &c.model)?;
    let (n, _) = admit(&s).await?;
    let ids: Vec<Vec<u32>> = inputs
        .iter()
        .map(|p| counted_ids(p, &c.counter).map_err(|e| ApiError::bad_field("input", e.to_string())))
        .collect::<Result<_, _>>()?;
    let prompt_tokens: u64 = ids.iter().map(|i| i.len().max(1) as u64).sum();
    let vectors: Vec<Vec<f64>> = ids.iter().map(|i| super::embeddings::embedding(c.sim.seed, i)).collect();
    let (request_ids, mut done) = s.engine.submit_pooling(arrived, ids).await.map_err(|e| match e {
        SubmitError::Overloaded { .. } => overloaded(e.to_string()),
        _ => ApiError::bad_field("input", e.to_string()),
    })?;
    let guard = CancelOnDrop { engine: s.engine.clone(), ids: request_ids };
    let mut open = vectors.len();
    while open > 0 {
        match done.recv().await {
            Some(TokenMsg::Token { finish: Some(_), .. }) => open -= 1,
            Some(TokenMsg::Token { .. }) => {}
            Some(TokenMsg::Failed(reason)) => return Err(ApiError::status(500, reason)),
            None => return Err(ApiError::status(500, "the engine stopped")),
        }
    }
    drop(guard);
    let answer = super::embeddings::answer(&format!("embd-{n}"), s.created, &c.model, vectors, prompt_tokens);
    Ok(axum::Json(answer).into_response())
}

async fn models(State(s): State<Arc<AppState>>) -> Response {
    let model = &s.config.model;
    axum::Json(json!({
        "object": "list",
        "data": [{"id": model, "object": "model", "created": s.created, "owned_by": "batchlab", "root": model}],
    }))
    .into_response()
}

/// vLLM's `POST /tokenize`: the token ids the server counts (`prompt`, or chat `messages`): the
/// model's tokenizer's with `--tokenizer`, else the simulator's four-byte pseudo-ids; so
/// a client can fit its prompts to the server's counting (`vllm bench serve` does, for its random
/// dataset).
async fn tokenize(State(s): State<Arc<AppState>>, RequestBody(body): RequestBody) -> Response {
    let c = &s.config;
    let result = api::parse_tokenize(&body, &c.model, &c.request_format, c.image_tokens).and_then(|prompt| {
        counted_ids(&prompt, &c.counter).map_err(|e| ApiError::bad_field("messages", e.to_string()))
    });
    match result {
        Ok(ids) => axum::Json(
            json!({"count": ids.len(), "max_model_len": max_model_len(c), "tokens": ids, "token_strs": null}),
        )
        .into_response(),
        Err(e) => error_response(&e),
    }
}

/// vLLM's `POST /detokenize`: the text of token ids, the inverse of `/tokenize` on text.
async fn detokenize(State(s): State<Arc<AppState>>, RequestBody(body): RequestBody) -> Response {
    match api::parse_detokenize(&body, &s.config.model) {
        Ok(ids) => {
            let prompt = match &s.config.counter {
                TokenCounter::FourBytes => api::ids_text(&ids),
                TokenCounter::Tokenizer(t) => t.decode(&ids),
            };
            axum::Json(json!({"prompt": prompt})).into_response()
        }
        Err(e) => error_response(&e),
    }
}

/// The longest sequence the KV cache holds.
fn max_model_len(c: &ServeConfig) -> u64 {
    u64::from(c.sim.scheduler.num_kv_blocks).saturating_mul(u64::from(c.sim.scheduler.block_size))
}

async fn health() -> StatusCode {
    StatusCode::OK
}

async fn metrics_text(State(s): State<Arc<AppState>>) -> Response {
    let mut response = render(&s.registry).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

/// Cancels a request's sequences when its response is dropped (the client went away); a
/// finished request's ids are unknown to the core by then, so this is a no-op.
struct CancelOnDrop {
    engine: EngineHandle,
    ids: Vec<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.engine.cancel(std::mem::take(&mut self.ids));
    }
}

fn overloaded(message: String) -> ApiError {
    ApiError { status: 503, message, param: None, retry_after: Some(1) }
}

async fn generate(s: Arc<AppState>, endpoint: Endpoint, body: Bytes, tag: RequestTag) -> Result<Response, ApiError> {
    let arrived = MonotonicClock::read();
    let c = &s.config;
    let req = api::parse_request(endpoint, &body, &c.model, c.default_max_tokens, &c.request_format, c.image_tokens)?;
    let (n, faults) = admit(&s).await?;
    let prompt_param = match endpoint {
        Endpoint::Completions => "prompt",
        Endpoint::Chat => "messages",
    };
    let mut prompt_tokens = 0u64;
    let mut sequences = Vec::with_capacity(req.prompts.len());
    for prompt in &req.prompts {
        let ids = counted_ids(prompt, &c.counter).map_err(|e| ApiError::bad_field("messages", e.to_string()))?;
        prompt_tokens += ids.len() as u64;
        let mut draw = EngineRequest::tokens(Vec::new(), req.max_tokens).with_id(n);
        draw.min_tokens = req.min_tokens;
        draw.ignore_eos = req.ignore_eos;
        draw.seed = req.seed;
        let output_tokens = crate::engine::sim::output_tokens(&draw, &c.sim.cost, c.sim.seed).max(1);
        let images = crate::engine::image::prompt_images(prompt).map(EncoderInput::of).collect();
        sequences.push(NewSequence { prompt_ids: ids, output_tokens, max_tokens: req.max_tokens, images });
    }
    let (ids, tokens) = s.engine.submit(arrived, sequences).await.map_err(|e| match e {
        SubmitError::Overloaded { .. } => overloaded(e.to_string()),
        SubmitError::TooManyPrompts { .. } | SubmitError::PromptTooLong { .. } => {
            ApiError::bad_field(prompt_param, e.to_string())
        }
        SubmitError::Unschedulable(_) => ApiError::bad_field("max_tokens", e.to_string()),
    })?;
    let guard = CancelOnDrop { engine: s.engine.clone(), ids };
    let meta = ResponseMeta {
        endpoint,
        id: format!("{}-{n}", if endpoint == Endpoint::Chat { "chatcmpl" } else { "cmpl" }),
        created: s.created,
        model: c.model.clone(),
        prompt_tokens,
        choices: req.prompts.len(),
    };
    if req.stream {
        let timing = c.timing.as_ref().map(|sender| StreamTiming {
            sender: sender.clone(),
            request_id: tag.request_id.unwrap_or_else(|| Arc::from(meta.id.as_str())),
            received: tag.received.map_or(arrived, |Received(t)| t),
            tokens: vec![Vec::new(); meta.choices],
            batch: Vec::new(),
            finished: Vec::new(),
        });
        Ok(sse_response(token_stream(meta, req, tokens, guard, faults, timing)))
    } else {
        whole_response(meta, tokens, guard).await
    }
}

struct ResponseMeta {
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
    prompt_tokens: u64,
    choices: usize,
}

impl ResponseMeta {
    fn head(&self) -> api::ResponseHead<'_> {
        api::ResponseHead { endpoint: self.endpoint, id: &self.id, created: self.created, model: &self.model }
    }
}

async fn whole_response(
    meta: ResponseMeta,
    mut tokens: mpsc::UnboundedReceiver<TokenMsg>,
    guard: CancelOnDrop,
) -> Result<Response, ApiError> {
    let mut choices = vec![(String::new(), None::<FinishReason>); meta.choices];
    let mut generated = vec![0u32; meta.choices];
    let mut open = meta.choices;
    while open > 0 {
        match tokens.recv().await {
            Some(TokenMsg::Token { choice, finish }) => {
                let i = choice as usize;
                choices[i].0.push_str(api::token_text(generated[i]));
                generated[i] += 1;
                if finish.is_some() {
                    choices[i].1 = finish;
                    open -= 1;
                }
            }
            Some(TokenMsg::Failed(reason)) => return Err(ApiError::status(500, reason)),
            None => return Err(ApiError::status(500, "the engine stopped")),
        }
    }
    drop(guard);
    let completion: u64 = generated.iter().map(|&g| u64::from(g)).sum();
    let choices: Vec<(String, String)> = choices
        .into_iter()
        .map(|(text, f)| (text, f.as_ref().map_or("stop", api::finish_reason_name).to_string()))
        .collect();
    let usage = api::usage(meta.prompt_tokens, completion);
    Ok(axum::Json(api::full_response(meta.head(), &choices, usage)).into_response())
}

/// Where a stream is.
enum Phase {
    Tokens,
    /// `[DONE]` is next.
    Done,
    End,
}

struct StreamState {
    meta: ResponseMeta,
    chunks: ChunkRenderer,
    tokens: mpsc::UnboundedReceiver<TokenMsg>,
    _guard: CancelOnDrop,
    generated: Vec<u32>,
    open: usize,
    include_usage: bool,
    phase: Phase,
    faults: RequestFaults,
    /// Tokens after which the `drop_stream` fault drops the connection.
    drop_after: u64,
    sent: u64,
    timing: Option<StreamTiming>,
}

impl StreamState {
    /// Whether a token already waiting may join the frame being written: not past the
    /// `drop_stream` fault's cut, nor past the first token while the `stall_stream` fault waits.
    fn may_take_more(&self) -> bool {
        let dropping = self.faults.drop_stream && self.sent >= self.drop_after;
        let stalling = self.faults.stall.is_some() && self.sent >= 1;
        !dropping && !stalling
    }

    /// Appends choice `choice`'s next token's event to `out`.
    fn push_token(&mut self, out: &mut Vec<u8>, choice: u32, finish: Option<&FinishReason>) {
        let i = choice as usize;
        let index = self.generated[i];
        self.generated[i] += 1;
        self.sent += 1;
        if finish.is_some() {
            self.open -= 1;
        }
        let finish = finish.map(api::finish_reason_name);
        self.chunks.render(out, choice, api::token_text(index), finish, index == 0);
        if let Some(timing) = &mut self.timing {
            timing.batch.push((choice, finish.is_some()));
        }
    }

    /// Appends what follows the last token: the usage chunk if asked, `[DONE]`.
    fn push_end(&mut self, out: &mut Vec<u8>) {
        if self.include_usage {
            let completion: u64 = self.generated.iter().map(|&g| u64::from(g)).sum();
            let m = &self.meta;
            let chunk = api::usage_chunk(m.head(), api::usage(m.prompt_tokens, completion));
            chunk::push_event(out, &chunk.to_string());
        }
        chunk::push_event(out, "[DONE]");
        self.phase = Phase::End;
    }
}

/// A streamed request's send times, for the timing log (`--timing-log`).
struct StreamTiming {
    sender: TimingSender,
    request_id: Arc<str>,
    received: Timestamp,
    /// Per choice, when each token's event was handed to hyper.
    tokens: Vec<Vec<Timestamp>>,
    /// The tokens (choice, whether its last) of the frame being rendered, stamped together when
    /// it goes to hyper.
    batch: Vec<(u32, bool)>,
    /// Choices whose last token was just handed over: logged at the stream's next poll, so that
    /// nothing stands between the last token's time and its write.
    finished: Vec<u32>,
}

impl StreamTiming {
    /// Notes that the frame's tokens go to hyper now.
    fn stamp_batch(&mut self) {
        let now = MonotonicClock::read();
        for (choice, last) in self.batch.drain(..) {
            self.tokens[choice as usize].push(now);
            if last {
                self.finished.push(choice);
            }
        }
    }

    /// Logs the choices finished at the last poll, if any.
    fn log_finished(&mut self) {
        for choice in self.finished.drain(..) {
            self.sender.record(TimingRecord {
                request_id: self.request_id.clone(),
                choice,
                received: self.received,
                tokens: std::mem::take(&mut self.tokens[choice as usize]),
            });
        }
    }
}

impl Drop for StreamTiming {
    /// A client that goes away right after a choice's last token still gets it logged.
    fn drop(&mut self) {
        self.log_finished();
    }
}

/// A streamed response: `text/event-stream` of [`token_stream`]'s frames.
fn sse_response(body: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static) -> Response {
    (
        [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// The SSE events of one streamed response: a chunk per token (with `index` and, on a choice's
/// last, `finish_reason`), the usage chunk if asked, `[DONE]`. Each frame holds the tokens that
/// were waiting when the stream was polled (one wakeup and one write for tokens due at once), the
/// end after the last token. An `Err` item makes hyper drop the connection (the `drop_stream`
/// fault).
fn token_stream(
    meta: ResponseMeta,
    req: GenerationRequest,
    tokens: mpsc::UnboundedReceiver<TokenMsg>,
    guard: CancelOnDrop,
    faults: RequestFaults,
    timing: Option<StreamTiming>,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
    let choices = meta.choices;
    let total = u64::from(req.max_tokens) * choices as u64;
    let state = StreamState {
        chunks: ChunkRenderer::new(meta.head()),
        meta,
        tokens,
        _guard: guard,
        generated: vec![0; choices],
        open: choices,
        include_usage: req.include_usage,
        phase: Phase::Tokens,
        faults,
        drop_after: (total / 2).max(1),
        sent: 0,
        timing,
    };
    stream::unfold(state, |mut st| async move {
        if let Some(timing) = &mut st.timing {
            timing.log_finished();
        }
        match st.phase {
            Phase::End => None,
            Phase::Done => {
                st.phase = Phase::End;
                Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), st))
            }
            Phase::Tokens => {
                if st.open == 0 {
                    let mut out = Vec::new();
                    st.push_end(&mut out);
                    return Some((Ok(Bytes::from(out)), st));
                }
                if st.faults.drop_stream && st.sent >= st.drop_after {
                    st.phase = Phase::End;
                    return Some((Err(std::io::Error::other("injected fault: drop_stream")), st));
                }
                if let (Some(stall), 1) = (st.faults.stall, st.sent) {
                    st.faults.stall = None;
                    tokio::time::sleep(stall).await;
                }
                let mut next = st.tokens.recv().await;
                let mut out = Vec::with_capacity(256);
                loop {
                    match next {
                        Some(TokenMsg::Token { choice, finish }) => st.push_token(&mut out, choice, finish.as_ref()),
                        Some(TokenMsg::Failed(reason)) => {
                            st.phase = Phase::Done;
                            chunk::push_event(&mut out, &ApiError::status(500, reason).body().to_string());
                            break;
                        }
                        None => {
                            st.phase = Phase::End;
                            return Some((Err(std::io::Error::other("the engine stopped")), st));
                        }
                    }
                    if st.open == 0 {
                        st.push_end(&mut out);
                        break;
                    }
                    if !st.may_take_more() {
                        break;
                    }
                    next = match st.tokens.try_recv() {
                        Ok(msg) => Some(msg),
                        Err(_) => break,
                    };
                }
                // The last thing before hyper takes the frame and writes it.
                if let Some(timing) = &mut st.timing {
                    timing.stamp_batch();
                }
                Some((Ok(Bytes::from(out)), st))
            }
        }
    })
}
