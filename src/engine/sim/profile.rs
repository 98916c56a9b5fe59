//! `profile.toml`: a calibrated simulator model, as `batchlab calibrate` writes it.
//!
//! It holds the step-time coefficients (in nanoseconds, as floats: a fit gives sub-nanosecond
//! per-token costs), the engine configuration the real engine resolved (the scheduler replays
//! under exactly these limits), the fit's residuals and where the profile came from. A scenario
//! uses it with `engine.sim.profile = "profile.toml"` (docs/simulation.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::CostModel;
use crate::engine::ResolvedEngineConfig;

/// A calibrated model of one engine on one machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The step-time coefficients.
    pub coefficients: Coefficients,
    /// The engine's resolved scheduler and KV-cache configuration.
    pub engine: ResolvedEngineConfig,
    /// What the fit was made from.
    #[serde(default)]
    pub fit: FitSummary,
    /// How far the fitted model is from the measurements, per metric (`scheduled`,
    /// `first_token`, `last_token`, `finish`: a batch's tail, `head`: a batch's first
    /// `scheduled_ts`).
    #[serde(default)]
    pub residuals: BTreeMap<String, Residual>,
    /// Where the profile came from.
    pub provenance: Provenance,
}

/// The [`CostModel`]'s coefficients in nanoseconds (docs/simulation.md has the formula).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Coefficients {
    /// Per `generate` call, before its first step.
    #[serde(deserialize_with = "non_negative")]
    pub fixed_overhead_ns: f64,
    /// Per request of a `generate` call, before its first step.
    #[serde(deserialize_with = "non_negative")]
    pub request_overhead_ns: f64,
    /// Per engine step.
    #[serde(deserialize_with = "non_negative")]
    pub decode_step_ns: f64,
    /// Per prefill token in a step.
    #[serde(deserialize_with = "non_negative")]
    pub prefill_per_token_ns: f64,
    /// Per sequence scheduled in a step.
    #[serde(deserialize_with = "non_negative")]
    pub per_seq_ns: f64,
    /// Per 1000 context tokens in a step.
    #[serde(deserialize_with = "non_negative")]
    pub context_per_1k_tokens_ns: f64,
    /// Per (1000 tokens)² computed in a step.
    #[serde(deserialize_with = "non_negative")]
    pub tokens_squared_per_1m_ns: f64,
    /// Per image token the vision encoder computes in a step (images that missed the encoder
    /// cache). `None` when the runs fitted had no images: the fit could not see it, and a scenario
    /// using the profile gets 0. Not in [`Self::NAMES`] and [`Self::to_array`], which hold the
    /// coefficients every fit has.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "non_negative_some")]
    pub encoder_per_image_token_ns: Option<f64>,
    /// Per `generate` call, after its last step.
    #[serde(deserialize_with = "non_negative")]
    pub finish_overhead_ns: f64,
    /// Per request of a `generate` call, after its last step.
    #[serde(deserialize_with = "non_negative")]
    pub finish_per_request_ns: f64,
    /// An HTTP server's frontend: from a request's arrival to the engine's waiting queue
    /// (`batchlab serve` delays each request by it). Only a profile calibrated from a URL has it;
    /// not in [`Self::NAMES`] and [`Self::to_array`].
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "non_negative_some")]
    pub frontend_overhead_ns: Option<f64>,
    /// An HTTP server's frontend serves requests one at a time, each this long
    /// ([`CostModel::frontend_per_request`]). Only a profile calibrated from a URL has it.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "non_negative_some")]
    pub frontend_per_request_ns: Option<f64>,
    /// The frontend's worker hands a burst of requests on together
    /// ([`CostModel::frontend_hands_off_bursts`]). Only a profile calibrated from a URL has it;
    /// absent means each request goes on as it is served.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub frontend_hands_off_bursts: bool,
}

impl Coefficients {
    /// The names of the coefficients, in the fit's column order.
    pub const NAMES: [&'static str; 9] = [
        "fixed_overhead",
        "request_overhead",
        "decode_step",
        "prefill_per_token",
        "per_seq",
        "context_per_1k_tokens",
        "tokens_squared_per_1m",
        "finish_overhead",
        "finish_per_request",
    ];

    /// The name of the encoder's coefficient, which only fits of runs with images have.
    pub const ENCODER_NAME: &'static str = "encoder_per_image_token";

    /// The coefficients in [`Self::NAMES`] order.
    pub fn to_array(&self) -> [f64; 9] {
        [
            self.fixed_overhead_ns,
            self.request_overhead_ns,
            self.decode_step_ns,
            self.prefill_per_token_ns,
            self.per_seq_ns,
            self.context_per_1k_tokens_ns,
            self.tokens_squared_per_1m_ns,
            self.finish_overhead_ns,
            self.finish_per_request_ns,
        ]
    }

    /// From values in [`Self::NAMES`] order.
    pub fn from_array(v: [f64; 9]) -> Self {
        Coefficients {
            fixed_overhead_ns: v[0],
            request_overhead_ns: v[1],
            decode_step_ns: v[2],
            prefill_per_token_ns: v[3],
            per_seq_ns: v[4],
            context_per_1k_tokens_ns: v[5],
            tokens_squared_per_1m_ns: v[6],
            finish_overhead_ns: v[7],
            finish_per_request_ns: v[8],
            encoder_per_image_token_ns: None,
            frontend_overhead_ns: None,
            frontend_per_request_ns: None,
            frontend_hands_off_bursts: false,
        }
    }

    /// A cost model's coefficients (the encoder's only when it is not 0).
    pub fn of(cost: &CostModel) -> Self {
        let ns = |d: Duration| d.as_nanos() as f64;
        Coefficients {
            fixed_overhead_ns: ns(cost.fixed_overhead),
            request_overhead_ns: ns(cost.request_overhead),
            decode_step_ns: ns(cost.decode_step),
            prefill_per_token_ns: ns(cost.prefill_per_token),
            per_seq_ns: ns(cost.per_seq),
            context_per_1k_tokens_ns: ns(cost.context_per_1k_tokens),
            tokens_squared_per_1m_ns: ns(cost.tokens_squared_per_1m),
            encoder_per_image_token_ns: (!cost.encoder_per_image_token.is_zero())
                .then(|| ns(cost.encoder_per_image_token)),
            finish_overhead_ns: ns(cost.finish_overhead),
            finish_per_request_ns: ns(cost.finish_per_request),
            frontend_overhead_ns: (!cost.frontend_overhead.is_zero()).then(|| ns(cost.frontend_overhead)),
            frontend_per_request_ns: (!cost.frontend_per_request.is_zero()).then(|| ns(cost.frontend_per_request)),
            frontend_hands_off_bursts: cost.frontend_hands_off_bursts,
        }
    }

    /// Sets `cost`'s coefficients to these, rounded to the nanosecond (`eos_probability` is kept).
    pub fn apply(&self, cost: &mut CostModel) {
        let d = |ns: f64| Duration::from_nanos(ns.max(0.0).round() as u64);
        cost.fixed_overhead = d(self.fixed_overhead_ns);
        cost.request_overhead = d(self.request_overhead_ns);
        cost.decode_step = d(self.decode_step_ns);
        cost.prefill_per_token = d(self.prefill_per_token_ns);
        cost.per_seq = d(self.per_seq_ns);
        cost.context_per_1k_tokens = d(self.context_per_1k_tokens_ns);
        cost.tokens_squared_per_1m = d(self.tokens_squared_per_1m_ns);
        cost.encoder_per_image_token = d(self.encoder_per_image_token_ns.unwrap_or(0.0));
        cost.finish_overhead = d(self.finish_overhead_ns);
        cost.finish_per_request = d(self.finish_per_request_ns);
        cost.frontend_overhead = d(self.frontend_overhead_ns.unwrap_or(0.0));
        cost.frontend_per_request = d(self.frontend_per_request_ns.unwrap_or(0.0));
        cost.frontend_hands_off_bursts = self.frontend_hands_off_bursts;
    }
}

/// What the fit was made from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitSummary {
    /// `generate` calls used.
    pub batches: u64,
    /// Batches left out (rows missing, or without engine timestamps).
    pub skipped_batches: u64,
    /// Timestamps fitted (three per request).
    pub samples: u64,
    /// Coefficients the data could not tell apart from the others (all batches the same size,
    /// say): fixed at 0, the others absorb them.
    pub unidentified: Vec<String>,
    /// Per batch size: how long its batches took to their last token, measured and predicted.
    #[serde(default)]
    pub by_batch_size: Vec<BatchSizeFit>,
    /// A fit from a URL (`batchlab calibrate` of an `openai` scenario): its design points and
    /// what it estimated of the server's hidden limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpFit>,
}

/// A fit of a server from outside (docs/simulation.md, "Calibrating from a URL").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFit {
    /// Each design point, measured and as the fitted profile replays it.
    pub points: Vec<PointFit>,
    /// The limits the server did not say, and how each was estimated or assumed.
    pub estimated: Vec<Estimate>,
}

/// One design point of a fit from a URL: requests of one shape at one concurrency, measured by
/// the client, the fit's residual on its steps, and the point replayed on the fitted profile
/// (closed loop, virtual time).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointFit {
    /// `c8-p256-o32`.
    pub name: String,
    /// Requests in flight.
    pub concurrency: u64,
    /// Prompt tokens per request.
    pub prompt_tokens: u64,
    /// Output tokens per request.
    pub output_tokens: u64,
    /// Requests measured.
    pub requests: u64,
    /// Mean time to first token, measured by the client, ms.
    pub measured_ttft_ms: f64,
    /// The same, replayed on the profile, ms.
    pub predicted_ttft_ms: f64,
    /// Mean time per output token after the first, measured, ms.
    pub measured_tpot_ms: f64,
    /// The same, replayed, ms.
    pub predicted_tpot_ms: f64,
    /// The larger of |replayed − measured| / measured of the two means.
    pub replay_error: f64,
    /// Engine steps of the point that the fit timed (after dropping stalls).
    pub steps: u64,
    /// The fit's residual on them: |Σ predicted − Σ measured| / Σ measured of their times.
    pub residual: f64,
    /// The point's own noise: the half-width of the 95 % interval of its measured-to-predicted
    /// ratio over the design's rounds (how far a residual this point's rounds cannot tell from
    /// 0 goes). Absent with fewer than two rounds of rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residual_noise: Option<f64>,
}

/// A limit a server hides, as a fit from a URL sets it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Estimate {
    /// The profile's `engine` key (`max_num_seqs`).
    pub key: String,
    /// The value written.
    pub value: u64,
    /// `estimated` (from the data), `scraped` (from the server's /metrics) or `assumed` (a
    /// default the data could not test).
    pub source: String,
    /// How: what in the data gave it.
    pub how: String,
}

/// The fit's view of the batches of one size.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSizeFit {
    /// Requests per batch.
    pub size: u64,
    /// Batches of this size.
    pub batches: u64,
    /// Mean time from dispatch to a batch's last token, measured, ms.
    pub measured_ms: f64,
    /// The same, as the fitted model predicts it, ms.
    pub predicted_ms: f64,
    /// Mean of (predicted − measured) / measured over these batches.
    pub mean_rel_error: f64,
}

/// One metric's residuals: predicted minus measured, each measured from its batch's dispatch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residual {
    /// Timestamps compared.
    pub samples: u64,
    /// Mean absolute error, ms.
    pub mean_abs_ms: f64,
    /// Median absolute error, ms.
    pub p50_abs_ms: f64,
    /// 99th-percentile absolute error, ms.
    pub p99_abs_ms: f64,
    /// Mean relative error (|predicted − measured| / measured).
    pub mean_rel: f64,
    /// Median relative error.
    pub p50_rel: f64,
    /// 99th-percentile relative error.
    pub p99_rel: f64,
}

/// Where a profile came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The engine measured (`vllm`, `sim`).
    pub engine_name: String,
    /// Its version.
    pub engine_version: String,
    /// The batchlab that fitted it.
    pub batchlab_version: String,
    /// When, UTC, RFC 3339.
    pub created: String,
    /// The output directories the fit read.
    pub sources: Vec<String>,
}

/// Reading or writing a profile failed.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read profile {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid profile.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was found and what was expected.
        message: String,
    },
    /// The file could not be written.
    #[error("cannot write profile {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn non_negative<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !v.is_finite() || v < 0.0 {
        return Err(serde::de::Error::custom(format!("expected a finite number of nanoseconds >= 0, found {v}")));
    }
    Ok(v)
}

/// [`non_negative`], for a coefficient a profile may leave out.
fn non_negative_some<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    non_negative(d).map(Some)
}

impl Profile {
    /// Reads and checks `path`. Errors name the file, line and column.
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ProfileError::Read { path: path.to_path_buf(), source })?;
        Profile::parse(&text, path)
    }

    /// Parses profile text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Profile, ProfileError> {
        let at = |offset: usize, message: String| {
            let before = &text[..offset.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            ProfileError::Parse { path: path.to_path_buf(), line, column, message }
        };
        // A profile of an older step model: its coefficient meant something else, so say so.
        for (old, new, why) in super::RENAMED_COSTS {
            let key = format!("{old}_ns");
            if let Some(offset) = find_key(text, &key) {
                return Err(at(
                    offset,
                    format!(
                        "`{key}` was renamed to `{new}_ns` ({why}): this profile comes from an older batchlab; \
                         refit it with `batchlab calibrate` from the runs under its `[provenance]` sources"
                    ),
                ));
            }
        }
        let profile: Profile = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            at(offset, e.message().to_owned())
        })?;
        let e = &profile.engine;
        let limits = [
            ("max_num_seqs", e.max_num_seqs),
            ("max_num_batched_tokens", e.max_num_batched_tokens),
            ("num_kv_blocks", e.num_kv_blocks),
            ("block_size", e.block_size),
        ];
        if let Some((key, _)) = limits.iter().find(|(_, v)| *v == 0) {
            let offset = find_key(text, key).unwrap_or(0);
            return Err(at(offset, format!("`engine.{key}` must be >= 1, found 0")));
        }
        Ok(profile)
    }

    /// The profile as TOML text, with a header naming what it is.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).unwrap_or_default();
        format!(
            "# A batchlab simulator profile, written by `batchlab calibrate` (docs/simulation.md).\n\
             # Use it with `[engine.sim] profile = \"<this file>\"`.\n\
             # t_step = decode_step + prefill_per_token*P + per_seq*S + context_per_1k_tokens*C/1000\n\
             #          + tokens_squared_per_1m*T^2/1e6 + encoder_per_image_token*E (P prompt tokens,\n\
             #          S sequences, C context tokens and T tokens computed in the step, E image tokens\n\
             #          encoded; encoder_per_image_token only when the runs fitted had images);\n\
             # a generate call of n requests first pays fixed_overhead + request_overhead*n and, after its\n\
             # last step, finish_overhead + finish_per_request*n; frontend_overhead (a fit from a URL only)\n\
             # delays each HTTP request before it reaches the engine, after frontend_per_request of the\n\
             # frontend's time, which serves one request at a time (frontend_hands_off_bursts: a burst\n\
             # of requests served back to back goes on together, when the last is served).\n\n{body}"
        )
    }

    /// Writes the profile to `path`.
    pub fn write(&self, path: &Path) -> Result<(), ProfileError> {
        std::fs::write(path, self.to_toml()).map_err(|source| ProfileError::Write { path: path.to_path_buf(), source })
    }

    /// Sets a cost model and scheduler limits from this profile (`eos_probability` is kept).
    pub fn apply(&self, cost: &mut CostModel, scheduler: &mut ResolvedEngineConfig) {
        self.coefficients.apply(cost);
        *scheduler = self.engine;
    }
}

/// The profile's prediction of one `generate` of `batch` requests of `longest` (prompt, output)
/// tokens each, start to return: the scheduler replayed under the profile's limits, each step
/// priced by its coefficients. `None` without lengths, or when such a request cannot be scheduled
/// (longer than the engine's limits).
pub fn predicted_generate(profile: &Profile, longest: Option<(u32, u32)>, batch: usize) -> Option<Duration> {
    let (prompt_len, output_len) = longest?;
    let spec = super::scheduler::SeqSpec {
        prompt_len,
        output_len,
        prefix: super::scheduler::PrefixSource::Known(0),
        encoder_tokens: 0,
    };
    let schedule = super::scheduler::replay(&profile.engine, &vec![spec; batch]).ok()?;
    let mut cost = CostModel::default();
    profile.coefficients.apply(&mut cost);
    let ns = cost.generate_ns(&schedule, batch);
    ns.is_finite().then(|| Duration::from_nanos(ns.max(0.0).round() as u64))
}

/// The byte offset of the line that sets `key`, for an error about its value.
fn find_key(text: &str, key: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('=')) {
            return Some(offset + (line.len() - trimmed.len()));
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Profile {
        Profile {
            coefficients: Coefficients {
                encoder_per_image_token_ns: Some(2500.5),
                frontend_overhead_ns: Some(15_000_000.0),
                frontend_per_request_ns: Some(1_250_000.0),
                frontend_hands_off_bursts: true,
                ..Coefficients::from_array([1e6, 1e4, 8e5, 900.5, 2e4, 3000.25, 1500.75, 5e5, 1234.5])
            },
            engine: crate::engine::sim::DEFAULT_SCHEDULER,
            fit: FitSummary {
                batches: 3,
                skipped_batches: 0,
                samples: 90,
                unidentified: vec![],
                by_batch_size: vec![BatchSizeFit {
                    size: 8,
                    batches: 3,
                    measured_ms: 10.5,
                    predicted_ms: 10.0,
                    mean_rel_error: -0.05,
                }],
                http: Some(HttpFit {
                    points: vec![PointFit {
                        name: "c8-p256-o32".into(),
                        concurrency: 8,
                        prompt_tokens: 256,
                        output_tokens: 32,
                        requests: 24,
                        measured_ttft_ms: 40.5,
                        predicted_ttft_ms: 41.0,
                        measured_tpot_ms: 8.25,
                        predicted_tpot_ms: 8.0,
                        replay_error: 0.030303,
                        steps: 300,
                        residual: 0.0125,
                        residual_noise: Some(0.031),
                    }],
                    estimated: vec![Estimate {
                        key: "max_num_seqs".into(),
                        value: 4,
                        source: "estimated".into(),
                        how: "no step held more than 4 of 8 requests in flight".into(),
                    }],
                }),
            },
            residuals: BTreeMap::from([("first_token".to_owned(), Residual { samples: 30, ..Residual::default() })]),
            provenance: Provenance { engine_name: "sim".into(), ..Provenance::default() },
        }
    }

    #[test]
    fn round_trips_through_toml() {
        let p = sample();
        let text = p.to_toml();
        assert_eq!(Profile::parse(&text, Path::new("p.toml")).unwrap(), p, "{text}");
        // A profile fitted without images leaves the encoder out, and reads back so.
        let without = Profile {
            coefficients: Coefficients {
                encoder_per_image_token_ns: None,
                frontend_overhead_ns: None,
                frontend_per_request_ns: None,
                frontend_hands_off_bursts: false,
                ..p.coefficients
            },
            fit: FitSummary { http: None, ..p.fit },
            ..p
        };
        let text = without.to_toml();
        assert!(!text.contains("encoder_per_image_token_ns ="), "{text}");
        assert!(!text.contains("frontend_overhead_ns =") && !text.contains("[fit.http"), "{text}");
        assert!(!text.contains("frontend_per_request_ns =") && !text.contains("frontend_hands_off_bursts ="), "{text}");
        assert_eq!(Profile::parse(&text, Path::new("p.toml")).unwrap(), without);
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let text = sample().to_toml();
        let cases = [
            ("decode_step_ns = 800000.0", "decode_step_ns = -1.0", "found -1"),
            ("block_size = 16", "block_size = 0", "`engine.block_size` must be >= 1, found 0"),
            ("max_num_seqs = 256", "max_num_seqs = 256\nmax_num_seq = 3", "unknown field `max_num_seq`"),
            ("per_seq_ns = 20000.0", "decode_per_seq_ns = 20000.0", "`decode_per_seq_ns` was renamed to `per_seq_ns`"),
            ("encoder_per_image_token_ns = 2500.5", "encoder_per_image_token_ns = -2.0", "found -2"),
        ];
        for (from, to, expected) in cases {
            assert!(text.contains(from), "{from} not in\n{text}");
            let bad = text.replace(from, to);
            let line = bad.lines().position(|l| l.contains(to.lines().last().unwrap())).unwrap() + 1;
            let err = Profile::parse(&bad, Path::new("dir/p.toml")).unwrap_err().to_string();
            assert!(err.starts_with(&format!("dir/p.toml:{line}:")), "{err} (expected line {line})");
            assert!(err.contains(expected), "{err}");
        }
    }
}
