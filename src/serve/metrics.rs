//! `GET /metrics`: what the simulated engine does, under vLLM's own metric names.
//!
//! The names, types and labels (`model_name`, `engine`) are those of the vLLM in the venv
//! (`vllm/v1/metrics/loggers.py`), so a dashboard or an autoscaler written for vLLM reads
//! `batchlab serve` unchanged. Only what the simulator models is exported. The exposition is
//! prometheus-client's (OpenMetrics text; counters get their `_total` suffix as vLLM's do).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::engine::FinishReason;

/// vLLM's buckets for time to first token (seconds).
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
/// vLLM's buckets for inter-token latency (seconds).
const ITL_BUCKETS: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
/// vLLM's buckets for request latencies (seconds).
const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
/// Tokens a step computes, and preemptions of a request: 1, 2, 5, 10, 20, 50, ... as vLLM's.
const TOKEN_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0];

type Labels = Vec<(String, String)>;

/// The server's metrics; cloning shares them (every metric is an `Arc` inside).
#[derive(Clone, Debug)]
pub struct ServeMetrics {
    pub(crate) running: Gauge,
    pub(crate) waiting: Gauge,
    pub(crate) kv_cache_usage: Gauge<f64, AtomicU64>,
    pub(crate) prefix_cache_queries: Counter,
    pub(crate) prefix_cache_hits: Counter,
    pub(crate) preemptions: Counter,
    pub(crate) prompt_tokens: Counter,
    pub(crate) generation_tokens: Counter,
    pub(crate) request_success: Family<Labels, Counter>,
    pub(crate) ttft: Histogram,
    pub(crate) itl: Histogram,
    pub(crate) e2e: Histogram,
    pub(crate) iteration_tokens: Histogram,
    pub(crate) request_preemptions: Histogram,
    pub(crate) mm_cache_queries: Counter,
    pub(crate) mm_cache_hits: Counter,
}

/// Metric names `GET /metrics` exports (as registered; counters gain `_total`).
pub const METRIC_NAMES: &[&str] = &[
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:iteration_tokens_total",
    "vllm:request_num_preemptions",
    "vllm:mm_cache_queries",
    "vllm:mm_cache_hits",
];

impl ServeMetrics {
    /// Fresh metrics, and the registry that renders them, labelled with the served model's name.
    pub fn new(model_name: &str) -> (ServeMetrics, Registry) {
        let m = ServeMetrics {
            running: Gauge::default(),
            waiting: Gauge::default(),
            kv_cache_usage: Gauge::default(),
            prefix_cache_queries: Counter::default(),
            prefix_cache_hits: Counter::default(),
            preemptions: Counter::default(),
            prompt_tokens: Counter::default(),
            generation_tokens: Counter::default(),
            request_success: Family::default(),
            ttft: Histogram::new(TTFT_BUCKETS.iter().copied()),
            itl: Histogram::new(ITL_BUCKETS.iter().copied()),
            e2e: Histogram::new(LATENCY_BUCKETS.iter().copied()),
            iteration_tokens: Histogram::new(TOKEN_BUCKETS.iter().copied()),
            request_preemptions: Histogram::new(TOKEN_BUCKETS.iter().copied()),
            mm_cache_queries: Counter::default(),
            mm_cache_hits: Counter::default(),
        };
        let labels = [("model_name".into(), model_name.to_string().into()), ("engine".into(), "0".into())];
        let mut r = Registry::with_labels(labels.into_iter());
        let n = METRIC_NAMES;
        r.register(n[0], "Number of requests in model execution batches", m.running.clone());
        r.register(n[1], "Number of requests waiting to be processed", m.waiting.clone());
        r.register(n[2], "KV-cache usage. 1 means 100 percent usage", m.kv_cache_usage.clone());
        r.register(n[3], "Prefix cache queries, in terms of number of queried tokens", m.prefix_cache_queries.clone());
        r.register(n[4], "Prefix cache hits, in terms of number of cached tokens", m.prefix_cache_hits.clone());
        r.register(n[5], "Cumulative number of preemption from the engine", m.preemptions.clone());
        r.register(n[6], "Number of prefill tokens processed", m.prompt_tokens.clone());
        r.register(n[7], "Number of generation tokens processed", m.generation_tokens.clone());
        r.register(n[8], "Count of successfully processed requests", m.request_success.clone());
        r.register(n[9], "Histogram of time to first token in seconds", m.ttft.clone());
        r.register(n[10], "Histogram of inter-token latency in seconds", m.itl.clone());
        r.register(n[11], "Histogram of e2e request latency in seconds", m.e2e.clone());
        r.register(n[12], "Histogram of number of tokens per engine_step", m.iteration_tokens.clone());
        r.register(n[13], "Number of preemptions per request", m.request_preemptions.clone());
        r.register(n[14], "Multi-modal cache queries, in terms of number of queried items", m.mm_cache_queries.clone());
        r.register(n[15], "Multi-modal cache hits, in terms of number of cached items", m.mm_cache_hits.clone());
        (m, r)
    }

    /// Counts a request that finished (or was aborted) for `reason`.
    pub(crate) fn finished(&self, reason: &FinishReason) {
        let reason = match reason {
            FinishReason::Length => "length",
            FinishReason::Stop => "stop",
            FinishReason::Abort => "abort",
            FinishReason::Other(_) | FinishReason::Unknown => "error",
        };
        self.request_success.get_or_create(&vec![("finished_reason".into(), reason.into())]).inc();
    }
}

/// The registry as Prometheus/OpenMetrics text.
pub fn render(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, registry);
    text
}
