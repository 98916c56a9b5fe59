//! The outcome of one benchmark, as written to reports and checked by expectations.
//!
//! Every number an expectation can name is reachable through [`BenchmarkResult::metric`], and
//! [`metric_names`] lists them all; `docs/report.md` defines each one.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use super::client::{DispatchSummary, ValidityWarning};
use super::distribution::Summary;
use super::endpoints::EndpointResult;
use super::series::TimeSeries;
use super::server::ServerDelta;
use super::slo::SloResult;
use crate::batcher::RequestError;

/// One benchmark (one step of a profile), aggregated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkResult {
    /// `throughput`, `concurrent@4`, `constant@10.0/s`, ...
    pub name: String,
    /// Which run of the benchmark this is, 0-based (`--repeat N` runs each benchmark N times).
    #[serde(default)]
    pub repeat: u32,
    /// What happened to the requests: completed, failed by kind, lost.
    pub counts: Counts,
    /// Prompt and generated token totals over completed requests.
    pub tokens: Tokens,
    /// Length of the measurement window, seconds.
    pub duration_s: f64,
    /// Completed requests per second of the window. `None` for an empty window.
    pub requests_per_s: Option<f64>,
    /// Prompt tokens of completed requests per second of the window.
    pub input_tokens_per_s: Option<f64>,
    /// Generated tokens per second of the window.
    pub output_tokens_per_s: Option<f64>,
    /// Prompt plus generated tokens per second of the window.
    pub total_tokens_per_s: Option<f64>,
    /// Time-weighted mean number of requests in flight over the window.
    pub concurrency_mean: Option<f64>,
    /// Latency, TTFT, ITL, ... distributions, in milliseconds.
    pub distributions: Distributions,
    /// How late requests were sent against the load profile's schedule, and how much of that was
    /// the client's own lag (`metrics::client`). Absent in reports written before it.
    #[serde(default)]
    pub dispatch: DispatchSummary,
    /// Reasons to doubt this benchmark's numbers (the client fell behind its schedule); absent
    /// when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validity_warnings: Vec<ValidityWarning>,
    /// How many batches, how full, and why each was dispatched.
    pub batching: Batching,
    /// Completed requests whose engine stats were inconsistent.
    pub anomalies: AnomalyCounts,
    /// The prefix-cache hit rate the engine achieved: `cached / prompt` of
    /// [`PrefixCacheTokens`]; `None` when no completed request reported cached tokens.
    #[serde(default)]
    pub prefix_cache_hit_rate: Option<f64>,
    /// The hit rate the workload was designed for: `designed_cached / designed_prompt`; `None`
    /// for a workload without a design (a prompt file).
    #[serde(default)]
    pub prefix_cache_designed_hit_rate: Option<f64>,
    /// The token sums behind the two rates.
    #[serde(default)]
    pub prefix_cache_tokens: PrefixCacheTokens,
    /// Attainment and goodput against the scenario's `[slo]`; `None` without one.
    pub slo: Option<SloResult>,
    /// Per endpoint, for an engine that names the endpoint of each request (an HTTP engine):
    /// counts, errors, latency and TTFT, failures and the time to recover
    /// (`metrics::endpoints`); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointResult>,
    /// The servers' own counters over the benchmark (their `/metrics`), per endpoint
    /// (`metrics::server`); absent when no server has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server: Vec<ServerDelta>,
    /// Completed requests by where the engine's token counts came from (`usage`, `token_ids`,
    /// `chunks`), for an engine that says; absent otherwise.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub token_count_sources: BTreeMap<String, u64>,
    /// Completions, tokens, errors, concurrency and batches per interval of the window.
    pub time_series: TimeSeries,
    /// The `[matrix]` combination this benchmark ran, and whether it is on the run's
    /// throughput/latency Pareto front; absent without a matrix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<MatrixPoint>,
    /// The images the benchmark sent (`[workload.images]`); left out without images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<super::media::MediaResult>,
    /// The engine's prompt counts against the lengths the workload sized its prompts to
    /// (`metrics::prompt_target`); left out when the workload gives no targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_target: Option<super::prompt_target::PromptTargetResult>,
    /// The embeddings the benchmark made (`engine.openai.api = "embeddings"`, vLLM's
    /// `LLM.embed`): a pooling run has no first token, TPOT or ITL (their distributions are
    /// empty), so its rates are here; left out for a generation run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsResult>,
    /// The benchmark's sessions (`[workload.sessions]`); left out without sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<super::sessions::SessionsResult>,
}

/// A pooling benchmark's throughput: completed embeddings and their input tokens per second of
/// the window, and the vectors' length.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingsResult {
    /// Completed embeddings (one per input).
    pub embeddings: u64,
    /// Completed embeddings per second of the window; `None` for an empty window.
    pub embeddings_per_s: Option<f64>,
    /// Their prompt tokens, as the engine counted them (`token_count_sources` says how).
    pub input_tokens: u64,
    /// Those prompt tokens per second of the window.
    pub input_tokens_per_s: Option<f64>,
    /// The shortest vector returned.
    pub dims_min: u32,
    /// The longest vector returned (a model's vectors are all one length).
    pub dims_max: u32,
}

/// Where a benchmark stands in a `[matrix]` run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixPoint {
    /// The combination's label, e.g. `batch_size=8,batch_timeout=10ms`.
    pub combination: String,
    /// (key, value) per matrix axis.
    pub values: Vec<(String, String)>,
    /// No other benchmark of the run has both more output tokens/s and a lower latency p99
    /// (see [`crate::metrics::pareto`]).
    pub pareto_front: bool,
}

/// Prompt tokens served from the prefix cache, over completed measured requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixCacheTokens {
    /// Σ cached tokens, over the requests whose engine reported both them and the prompt length.
    pub cached: u64,
    /// Σ prompt tokens of those same requests.
    pub prompt: u64,
    /// Σ designed cached tokens (`loadgen::PrefixDesign::cached_tokens`), over requests with a
    /// prompt length.
    pub designed_cached: u64,
    /// Σ prompt tokens of those same requests.
    pub designed_prompt: u64,
}

/// What happened to the benchmark's requests. `lost` must be 0.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Requests handed to the batcher.
    pub submitted: u64,
    /// Requests that got an output.
    pub completed: u64,
    /// Requests that failed, of any kind.
    pub errors: u64,
    /// Failed requests per [`RequestError::kind`]; `[expect]` names them `errors_<kind>`.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Requests cancelled before dispatch.
    pub cancelled: u64,
    /// Requests still unanswered when the window ended (an interrupted run).
    pub incomplete: u64,
    /// `submitted − (completed + errors + cancelled + incomplete)`. Anything but 0 is a bug.
    pub lost: i64,
}

/// Token totals over completed requests. Requests whose engine gave no count add nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// Prompt tokens.
    pub input: u64,
    /// Generated tokens.
    pub output: u64,
}

/// Defines [`PerDistribution`] from one list of the distributions, in report order: the struct's
/// fields, [`PerDistribution::NAMES`], and the functions that walk every field.
macro_rules! per_distribution {
    ($($(#[doc = $doc:literal])+ $name:ident,)+) => {
        /// One `T` per timing distribution, a field each (serialized under its name), in report
        /// order: the one list of the distributions that the aggregator, the report and
        /// `[expect]`'s metric names all walk.
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        pub struct PerDistribution<T> {
            $($(#[doc = $doc])+ pub $name: T,)+
        }

        impl<T> PerDistribution<T> {
            /// Names in report order.
            pub const NAMES: [&'static str; [$(stringify!($name)),+].len()] = [$(stringify!($name)),+];

            /// `f` applied to every distribution's value.
            pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerDistribution<U> {
                PerDistribution { $($name: f(self.$name),)+ }
            }

            /// (name, value) for every distribution, in report order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, &T)> {
                [$((stringify!($name), &self.$name)),+].into_iter()
            }
        }
    };
}

per_distribution! {
    /// Per request: our submit to our completion.
    latency,
    /// Per request: our submit to the engine's first token.
    ttft,
    /// Per request: vLLM's TPOT, `(last_token − first_token) / (n − 1)`.
    tpot,
    /// Per gap between two consecutive tokens (vLLM's ITL); empty without per-token times.
    itl,
    /// Per request: latency divided by generated tokens, the first included (guidellm's TPOT).
    latency_per_token,
    /// Per request: our submit to the dispatch of its batch.
    batch_wait,
    /// Per request: the engine's `queued_ts` to `scheduled_ts`.
    engine_queue,
    /// Per batch: the engine's generate call.
    generate,
}

impl<T> PerDistribution<T> {
    /// The value of the distribution named `name` (one of [`Self::NAMES`]).
    pub fn get(&self, name: &str) -> Option<&T> {
        self.iter().find(|(n, _)| *n == name).map(|(_, value)| value)
    }
}

/// Per-request and per-batch timing distributions, in milliseconds.
pub type Distributions = PerDistribution<Summary>;

/// How the batcher grouped requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Batching {
    /// Batches dispatched.
    pub batches: u64,
    /// Batch size → number of batches of that size.
    pub batch_size_histogram: BTreeMap<usize, u64>,
    /// Mean requests per batch; `None` without batches.
    pub batch_size_mean: Option<f64>,
    /// Batches dispatched because they were full.
    pub full: u64,
    /// Batches dispatched because the oldest request waited `batch_timeout`.
    pub timeout: u64,
    /// Batches dispatched by shutdown draining the queue.
    pub drain: u64,
    /// `full / batches`; `None` when there were no batches. Likewise for the other shares.
    pub full_share: Option<f64>,
    /// `timeout / batches`.
    pub timeout_share: Option<f64>,
    /// `drain / batches`.
    pub drain_share: Option<f64>,
    /// Batches that were the engine's own steps (vLLM with continuous admission): the engine
    /// chose what each ran, and the batch is what it served in the step.
    #[serde(default)]
    pub steps: u64,
    /// Mean requests per engine step that got their first token (prefill finished in the step);
    /// `None` without engine steps that say.
    #[serde(default)]
    pub prefill_mean: Option<f64>,
    /// Mean requests per engine step that got a further token (decode).
    #[serde(default)]
    pub decode_mean: Option<f64>,
    /// The batches of the whole benchmark, warmup and drain included (the figures above count
    /// the measured window only): `tune` reads it to know that a larger `batch_size` would have
    /// changed nothing. Absent from reports of older versions (read as none).
    #[serde(default)]
    pub whole_run: BatchesSeen,
}

/// What every batch of a benchmark was, warmup and drain included ([`Batching::whole_run`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchesSeen {
    /// Batches dispatched.
    pub batches: u64,
    /// The largest batch.
    pub largest: usize,
}

impl BatchesSeen {
    /// Counts one batch.
    pub fn record(&mut self, size: usize) {
        self.batches += 1;
        self.largest = self.largest.max(size);
    }

    /// Whether the same run with a batch size of `batch_size` instead of `ran_with` would have
    /// dispatched exactly the same batches. It would when every batch was smaller than both:
    /// then none was full and every flush (a timeout's, a drain's) took the whole queue, so the
    /// queue never held more than the largest batch, and a batch size above that is never
    /// reached; the batch size decides nothing else.
    pub fn same_with_batch_size(&self, ran_with: usize, batch_size: usize) -> bool {
        self.batches > 0 && self.largest < ran_with && self.largest < batch_size
    }
}

/// Completed requests whose engine stats were inconsistent, in total and per kind of problem.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnomalyCounts {
    /// Requests with at least one anomaly.
    pub requests: u64,
    /// A timestamp was NaN, infinite or negative.
    pub non_finite: u64,
    /// The first token came before the request arrived.
    pub first_token_before_arrival: u64,
    /// The last token came before the first.
    pub last_before_first: u64,
    /// The engine scheduled the request before it queued it.
    pub scheduled_before_queued: u64,
    /// A token came after our completion time.
    pub token_after_completion: u64,
    /// A timestamp was 0 or outside our dispatch … completion; taken as missing.
    pub impossible_timestamp: u64,
    /// The engine's token count disagreed with its token ids.
    pub token_count_mismatch: u64,
    /// The per-token times were out of order or disagreed with the first/last token or the count.
    pub token_times_inconsistent: u64,
}

/// Metrics that are not a distribution statistic, in report order.
const SCALAR_METRICS: [&str; 28] = [
    "completed",
    "errors",
    "cancelled",
    "incomplete",
    "lost",
    "anomalies",
    "requests_per_s",
    "input_tokens_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "duration_s",
    "concurrency_mean",
    "batches",
    "batch_size_mean",
    "full_flush_share",
    "timeout_flush_share",
    "drain_flush_share",
    "prefix_cache_hit_rate",
    "prefix_cache_designed_hit_rate",
    "slo_attainment",
    "goodput_requests_per_s",
    "goodput_output_tokens_per_s",
    "dispatch_delay_p50_ms",
    "dispatch_delay_p99_ms",
    "dispatch_delay_max_ms",
    "client_lag_p50_ms",
    "client_lag_p99_ms",
    "client_lag_max_ms",
];

/// `errors_<kind>`: errors of one kind. A flat name, because in TOML `errors.engine_error` would
/// make `errors` a table and clash with the `errors` metric.
const ERROR_KIND_PREFIX: &str = "errors_";

static METRIC_NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut names: Vec<String> = SCALAR_METRICS.iter().map(|s| s.to_string()).collect();
    for dist in Distributions::NAMES {
        for stat in Summary::STATS {
            names.push(format!("{dist}_{stat}_ms"));
        }
    }
    names
});

static ALL_METRIC_NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut names = METRIC_NAMES.clone();
    names.extend(RequestError::KINDS.iter().map(|k| format!("{ERROR_KIND_PREFIX}{k}")));
    names
});

/// The CSV's metric columns, in order: every metric except the per-kind error counts, which the
/// CSV has in its `errors_by_kind` column.
pub fn metric_names() -> &'static [String] {
    &METRIC_NAMES
}

/// Every name [`BenchmarkResult::metric`] accepts (and `[expect]` may use), in a fixed order:
/// [`metric_names`], then `errors_<kind>` for every [`RequestError::KINDS`].
pub fn all_metric_names() -> &'static [String] {
    &ALL_METRIC_NAMES
}

/// Whether `name` is a metric expectations may use.
pub fn is_metric_name(name: &str) -> bool {
    ALL_METRIC_NAMES.iter().any(|n| n == name)
}

impl BenchmarkResult {
    /// The name people read: the benchmark's name, and from its second repeat on which one it is
    /// (`throughput #2`), so every run of a `--repeat` report has a label of its own.
    pub fn label(&self) -> String {
        if self.repeat == 0 { self.name.clone() } else { format!("{} #{}", self.name, self.repeat + 1) }
    }

    /// The metric called `name`; `None` for an unknown name or a value that was not measured
    /// (a percentile with no samples, a rate over an empty window).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let c = &self.counts;
        let b = &self.batching;
        match name {
            "completed" => Some(c.completed as f64),
            "errors" => Some(c.errors as f64),
            "cancelled" => Some(c.cancelled as f64),
            "incomplete" => Some(c.incomplete as f64),
            "lost" => Some(c.lost as f64),
            "anomalies" => Some(self.anomalies.requests as f64),
            "requests_per_s" => self.requests_per_s,
            "input_tokens_per_s" => self.input_tokens_per_s,
            "output_tokens_per_s" => self.output_tokens_per_s,
            "total_tokens_per_s" => self.total_tokens_per_s,
            "duration_s" => Some(self.duration_s),
            "concurrency_mean" => self.concurrency_mean,
            "batches" => Some(b.batches as f64),
            "batch_size_mean" => b.batch_size_mean,
            "full_flush_share" => b.full_share,
            "timeout_flush_share" => b.timeout_share,
            "drain_flush_share" => b.drain_share,
            "prefix_cache_hit_rate" => self.prefix_cache_hit_rate,
            "prefix_cache_designed_hit_rate" => self.prefix_cache_designed_hit_rate,
            "slo_attainment" => self.slo.as_ref()?.attainment,
            "goodput_requests_per_s" => self.slo.as_ref()?.goodput_requests_per_s,
            "goodput_output_tokens_per_s" => self.slo.as_ref()?.goodput_output_tokens_per_s,
            _ if name.starts_with("dispatch_delay_") || name.starts_with("client_lag_") => {
                let (timing, stat) = name.strip_suffix("_ms")?.rsplit_once('_')?;
                let d = &self.dispatch;
                match timing {
                    "dispatch_delay" => d.dispatch_delay.stat(stat),
                    "client_lag" => d.client_lag.stat(stat),
                    _ => None,
                }
            }
            _ if name.starts_with(ERROR_KIND_PREFIX) => {
                let kind = name.strip_prefix(ERROR_KIND_PREFIX)?;
                RequestError::KINDS.contains(&kind).then(|| c.errors_by_kind.get(kind).copied().unwrap_or(0) as f64)
            }
            _ => {
                let (dist, stat) = name.strip_suffix("_ms")?.rsplit_once('_')?;
                if !Summary::STATS.contains(&stat) {
                    return None;
                }
                self.distributions.get(dist)?.stat(stat)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_distribution_walks_its_fields_in_report_order() {
        let mut next = 0;
        let numbered = PerDistribution::<usize>::default().map(|_| {
            next += 1;
            next - 1
        });
        let walked: Vec<_> = numbered.iter().map(|(name, &k)| (name, k)).collect();
        let expected: Vec<_> = PerDistribution::<usize>::NAMES.into_iter().zip(0..).collect();
        assert_eq!(walked, expected);
        assert_eq!(numbered.get("itl"), Some(&3));
        assert_eq!(numbered.get("bogus"), None);
        // report.json keeps the names, in the same order.
        let json = serde_json::to_string(&numbered).unwrap();
        let at: Vec<_> = Distributions::NAMES.iter().map(|n| json.find(&format!("\"{n}\":")).unwrap()).collect();
        assert!(at.is_sorted(), "{json}");
    }

    #[test]
    fn names_are_unique_and_complete() {
        let names = metric_names();
        assert_eq!(names.len(), 28 + 8 * 9);
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        for name in
            ["ttft_p99_ms", "generate_std_ms", "engine_queue_p999_ms", "lost", "drain_flush_share", "client_lag_p99_ms"]
        {
            assert!(is_metric_name(name), "{name}");
        }
    }

    #[test]
    fn errors_by_kind_are_metrics() {
        let r = crate::metrics::aggregate::tests::sample_result();
        assert_eq!(r.metric("errors_engine_error"), Some(1.0));
        assert_eq!(r.metric("errors_engine_died"), Some(0.0), "a kind that did not occur counts 0");
        assert!(is_metric_name("errors_generate_timed_out"));
        assert!(!metric_names().iter().any(|n| n.starts_with(ERROR_KIND_PREFIX)), "not CSV columns");
    }

    #[test]
    fn unknown_names_resolve_to_nothing() {
        let r = crate::metrics::aggregate::tests::sample_result();
        for name in [
            "",
            "latency",
            "latency_ms",
            "latency_p42_ms",
            "bogus_p50_ms",
            "p50_ms",
            "ttft_p99",
            "errors_bogus",
            "client_lag_p90_ms",
            "dispatch_delay_mean_ms",
        ] {
            assert_eq!(r.metric(name), None, "{name}");
            assert!(!is_metric_name(name), "{name}");
        }
    }

    #[test]
    fn every_listed_name_resolves_on_a_non_empty_result() {
        let r = crate::metrics::aggregate::tests::sample_result();
        for name in all_metric_names() {
            let v = r.metric(name);
            assert!(v.is_some_and(f64::is_finite), "{name}: {v:?}");
        }
    }
}
