//! `batchlab serve`: the calibrated simulator as an OpenAI-compatible HTTP server.
//!
//! Everything a user builds around a model talks HTTP; this puts the calibrated step-level
//! simulator behind that boundary, in real time, so gateways, clients and load generators can be
//! tested without a GPU. The layers, bottom up:
//! - [`core`]: `ServeCore`, the sans-IO engine: one continuous batch (vLLM v1's scheduler, the
//!   simulated engine's [`crate::engine::sim::scheduler::Stepper`]) for every connection, priced
//!   step by step by the cost model, `now` in and tokens out;
//! - [`worker`]: the engine thread that owns the core and the clock and routes tokens to
//!   connections;
//! - [`http`]: axum on tokio/hyper: the OpenAI endpoints, SSE through axum's `Sse`, errors as
//!   OpenAI error JSON, `/metrics` ([`metrics`], vLLM's names), the HTTP faults ([`faults`]),
//!   graceful shutdown;
//! - [`conn`]: the connections: accept (backing off when it fails), the connection cap, hyper's
//!   HTTP/1.1 with its header-read (and idle) timeout, graceful shutdown;
//! - [`api`]: request bodies validated field by field, and the JSON answered;
//! - [`embeddings`]: `/v1/embeddings`' body, its deterministic vectors and its answer (prefill
//!   only: `ServeCore::submit_pooling`);
//! - [`timing`]: the opt-in timing log (`--timing-log`), each token's send time per request and
//!   choice, written by a thread of its own.
//!
//! [`ServeConfig::from_plan`] is the one place a scenario's plan is read.

pub mod api;
mod chunk;
pub mod conn;
pub mod core;
pub mod embeddings;
mod error;
pub mod faults;
pub mod http;
pub mod metrics;
pub mod timing;
pub mod worker;

use std::path::Path;
use std::time::Duration;

pub use error::ServeError;
pub use faults::HttpFaults;
pub use http::{ServeOutcome, serve};
pub use timing::{TimingLog, TimingSender, TimingSummary};

use crate::engine::chat::RequestFormat;
use crate::engine::image::ImageTokenRule;
use crate::engine::sim::{Profile, SimConfig};
use crate::engine::tokenizer::TokenCounter;
use crate::loadgen::WorkloadSpec;
use crate::scenario::Plan;
use crate::scenario::plan::EnginePlan;

/// The shipped example profile (`scenarios/profiles/example.toml`): the engine without a scenario.
pub const EXAMPLE_PROFILE: &str = include_str!("../../scenarios/profiles/example.toml");

/// Everything the server needs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The model name it serves (`/v1/models`; a request for another is a 404).
    pub model: String,
    /// The simulated engine: step costs, scheduler limits, EOS seed.
    pub sim: SimConfig,
    /// How chat messages become the prompt (the workload's `request_format`).
    pub request_format: RequestFormat,
    /// The HTTP faults (`[faults]`).
    pub faults: HttpFaults,
    /// Prompts (sequences) that may wait for admission; past it, 503. A request of more prompts
    /// than this can never be admitted: 400.
    pub max_waiting: usize,
    /// How long in-flight streams may go on after SIGTERM or Ctrl-C before they are failed.
    pub grace: Duration,
    /// `max_tokens` of a request that sets none.
    pub default_max_tokens: u32,
    /// Where streamed requests' token send times go (`--timing-log`; [`TimingLog::sender`]).
    pub timing: Option<TimingSender>,
    /// How much of a peer the server takes: bodies, times, connections.
    pub limits: Limits,
    /// How prompts are counted and turned into ids for the prefix cache and `/tokenize`: the
    /// model's tokenizer (`--tokenizer`, or the scenario's `workload.tokenizer`), else four bytes
    /// a token.
    pub counter: TokenCounter,
    /// What an image of a chat message costs in prompt tokens (the workload's
    /// `[workload.images]` rule; 576 an image without it).
    pub image_tokens: ImageTokenRule,
}

/// How the server bounds its peers, so that slow, idle or too many clients cannot hold it
/// (docs/serve.md, "Limits").
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Limits {
    /// The largest request body (`--max-body-bytes`); a larger one gets 413.
    pub max_body_bytes: usize,
    /// How long a connection may take to send a request's head, counted from when the server is
    /// ready for it (`--header-read-timeout`): on a new connection and between the requests of a
    /// kept-alive one, so it is also the idle timeout. Past it, the connection is closed.
    pub header_read_timeout: Duration,
    /// How long a request's body may take once its head arrived (`--body-read-timeout`); past
    /// it, 408 and the connection is closed.
    pub body_read_timeout: Duration,
    /// Connections served at once (`--max-connections`); a connection past it is answered 503
    /// and closed.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 2 << 20,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 4096,
        }
    }
}

/// The default served model name.
pub const DEFAULT_MODEL: &str = "batchlab-sim";

impl ServeConfig {
    /// The server for a scenario's plan: its `[engine.sim]`, `[faults]` and the workload's chat
    /// format. Any other engine is an error.
    pub fn from_plan(plan: &Plan) -> Result<ServeConfig, ServeError> {
        let EnginePlan::Sim(sim) = plan.engine() else {
            return Err(ServeError::NotSimulated);
        };
        let request_format = match plan.workload() {
            WorkloadSpec::Synthetic { request_format, .. } | WorkloadSpec::File { request_format, .. } => {
                request_format.clone()
            }
        };
        let mut config = ServeConfig::with_sim(sim.clone());
        config.request_format = request_format;
        config.counter = plan.workload().counter();
        if let WorkloadSpec::Synthetic { images: Some(images), .. } = plan.workload() {
            config.image_tokens = images.token_rule();
        }
        config.faults = HttpFaults::from_faults(plan.faults(), sim.seed);
        Ok(config)
    }

    /// The server for the shipped example profile, with no faults.
    pub fn example() -> ServeConfig {
        let profile = Profile::parse(EXAMPLE_PROFILE, Path::new("scenarios/profiles/example.toml"))
            .expect("the shipped profile parses");
        let mut sim = SimConfig::default();
        profile.apply(&mut sim.cost, &mut sim.scheduler);
        ServeConfig::with_sim(sim)
    }

    /// The server for `sim`, every other setting at its default.
    pub fn with_sim(sim: SimConfig) -> ServeConfig {
        ServeConfig {
            model: DEFAULT_MODEL.into(),
            sim,
            request_format: RequestFormat::default(),
            faults: HttpFaults::default(),
            max_waiting: 4096,
            grace: Duration::from_secs(5),
            default_max_tokens: 16,
            timing: None,
            limits: Limits::default(),
            counter: TokenCounter::FourBytes,
            image_tokens: ImageTokenRule::default(),
        }
    }
}
