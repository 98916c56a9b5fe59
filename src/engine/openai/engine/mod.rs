//! [`OpenAiEngine`]: the HTTP client on a tokio runtime of its own, its two faces (the blocking
//! [`Engine`] and the [`ConcurrentEngine`]), endpoint checks at start, and the `/metrics` scrape.
//!
//! Files: this one holds the engine, its shared state and its faces; `batch` sends a batch's
//! HTTP requests and times their streams; `embed` reads an embeddings answer; `send` sends either request up to its response head (the slot, the
//! stall watch, a non-2xx as its error); `check` asks the endpoints at start (`/v1/models`,
//! `/version`) and scrapes their `/metrics`.

mod batch;
mod check;
mod embed;
mod send;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::header::{AUTHORIZATION, HeaderValue};
use http::{Method, Request};
use http_body_util::Full;
use tokio::sync::Semaphore;

use super::client::{HttpClient, Response};
use super::config::{OpenAiConfig, stall_limit};
use super::route::Router;
use crate::engine::{
    Concurrent, ConcurrentEngine, Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, GenerateDone,
    RemoteError, RemoteErrorKind, Started,
};
use crate::time::MonotonicClock;
use batch::run_batch;
use check::{Check, check_endpoint, server_counters};

/// How long a connection may take to open before the request fails with `connect_failed` (the
/// request's own `timeout` also applies, when shorter).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `start` waits for each endpoint's `/v1/models`, and a scrape for `/metrics`.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `shutdown` lets requests still running wind down before dropping them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Most bytes of an error response kept for its message.
const ERROR_BODY_BYTES: usize = 4096;

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
        let threads = self.config.threads.map_or_else(|| crate::sys::usable_cpus().get(), |n| n.max(1) as usize);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
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
