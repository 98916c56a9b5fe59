//! What `batchlab tune` found, as a report carries it (report.json's `tune`, report.html's
//! "Tuning" section): data only. The search, its bounds and its policy (plateau, headroom, which
//! points to confirm) are `batchlab::tune`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::scenario::units::format_duration;

/// A search and, for a real engine, its confirmation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneReport {
    /// What was maximized, in words ("goodput under the SLO", ...).
    pub objective: String,
    /// Wall time of the search in the simulator, seconds.
    pub search_s: f64,
    /// The search's runs on the simulator, and those it took from a run proven the same.
    #[serde(default)]
    pub runs: SearchRuns,
    /// Every point, the recommendation and the space.
    pub result: TuneResult,
    /// The best points run again on the real engine, the recommendation first (empty when the
    /// scenario's engine is the simulator, or with `--confirm 0`).
    pub confirmed: Vec<Confirmation>,
}

/// How many runs a search made on the simulator, and how many it took from a run it had made
/// that was provably the same (the same timeout, load and seed, and a batch size the made run
/// never reached: docs/tuning.md). The points, and so the result, are the same either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchRuns {
    /// Runs made on the simulator.
    pub simulated: usize,
    /// Runs taken from a run made before.
    pub reused: usize,
}

/// One point predicted by the simulator and measured on the real engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Confirmation {
    /// The point's label, which is also its benchmark's name in this report.
    pub point: String,
    /// The objective, predicted.
    pub predicted: Option<f64>,
    /// The objective, measured.
    pub measured: Option<f64>,
    /// Latency p99 in ms, predicted.
    pub predicted_latency_p99_ms: Option<f64>,
    /// Latency p99 in ms, measured.
    pub measured_latency_p99_ms: Option<f64>,
}

impl Confirmation {
    /// (predicted − measured) / measured, in percent.
    pub fn error_pct(&self) -> Option<f64> {
        match (self.predicted, self.measured) {
            (Some(p), Some(m)) if m != 0.0 => Some((p - m) / m * 100.0),
            _ => None,
        }
    }
}

/// Which load dimension the profile has.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadKnob {
    /// `profile.max_concurrency` of a throughput profile.
    MaxConcurrency,
    /// `profile.rates` (one rate) of a constant profile.
    Rate,
    /// No load dimension (another profile kind): batch size and timeout only.
    None,
}

/// The bounds of the search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Space {
    /// Batch sizes, inclusive.
    pub batch_size: (u32, u32),
    /// Batch timeouts in microseconds, inclusive.
    pub batch_timeout_us: (u64, u64),
    /// The load dimension and its bounds (max_concurrency, or a rate in requests/s).
    pub load: LoadKnob,
    /// Bounds of the load dimension.
    pub load_range: (f64, f64),
}

/// One evaluated point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Batch size.
    pub batch_size: u32,
    /// Batch timeout.
    pub batch_timeout: Duration,
    /// The load value (max_concurrency or rate), if the profile has one.
    pub load: Option<f64>,
    /// Output tokens/s.
    pub throughput: Option<f64>,
    /// Goodput in output tokens/s, with an `[slo]`.
    pub goodput: Option<f64>,
    /// Latency p99, ms.
    pub latency_p99_ms: Option<f64>,
    /// What the search maximizes (`None`: infeasible).
    pub score: Option<f64>,
    /// Found by the coarse grid (`false`: by the refinement).
    pub grid: bool,
    /// On the front of all evaluated points (score up, latency p99 down).
    pub front: bool,
    /// Within the plateau (`tune::PLATEAU`, 2 %) of the highest score: a candidate for the
    /// recommendation.
    #[serde(default)]
    pub plateau: bool,
    /// A plateau point's score with the load raised by `tune::STRESS` (1.5×, its headroom); `None`
    /// when it was not stressed or met no objective there.
    #[serde(default)]
    pub stress_score: Option<f64>,
    /// Tied with the recommendation within the search's noise (`TuneResult::noise`), at the
    /// scenario's load and at `tune::STRESS` times it: the data cannot tell these points apart,
    /// and the recommendation is the simplest of them (`tune::simpler`).
    #[serde(default)]
    pub tied: bool,
}

impl Point {
    /// What the point measured, as the search compares points: (score, latency p99). Points with
    /// the same result ran the same (a timeout that never fired, a batch size never reached) and
    /// the front, the plateau's headroom check and every table count them once.
    pub fn result(&self) -> (Option<f64>, Option<f64>) {
        (self.score, self.latency_p99_ms)
    }

    /// `batch_size=32,batch_timeout=10ms,max_concurrency=64`.
    pub fn label(&self, knob: LoadKnob) -> String {
        let mut s = format!("batch_size={},batch_timeout={}", self.batch_size, format_duration(self.batch_timeout));
        match (knob, self.load) {
            (LoadKnob::MaxConcurrency, Some(c)) => s.push_str(&format!(",max_concurrency={c}")),
            (LoadKnob::Rate, Some(r)) => s.push_str(&format!(",rate={r}")),
            _ => {}
        }
        s
    }
}

/// What a search found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneResult {
    /// Every point evaluated, in order.
    pub points: Vec<Point>,
    /// Index of the best point in `points`; `None` when no point was feasible.
    pub best: Option<usize>,
    /// The space searched.
    pub space: Space,
    /// The search's noise: the relative standard deviation of the best point's score over runs
    /// with different seeds (`tune::NOISE_SEEDS` of them); `None` before the search ends or when
    /// no point met the objective. Two scores closer than `tune::tie_band` of it tie.
    #[serde(default)]
    pub noise: Option<f64>,
}

impl TuneResult {
    /// The best point.
    pub fn best_point(&self) -> Option<&Point> {
        self.best.map(|i| &self.points[i])
    }

    /// The recommended settings as a ready-to-paste `[batching]` section (and the load as a
    /// commented `[profile]` line).
    pub fn snippet(&self) -> Option<String> {
        let p = self.best_point()?;
        let mut s = format!(
            "[batching]\nbatch_size = {}\nbatch_timeout = \"{}\"\n",
            p.batch_size,
            format_duration(p.batch_timeout)
        );
        match (self.space.load, p.load) {
            (LoadKnob::MaxConcurrency, Some(c)) => s.push_str(&format!("# [profile] max_concurrency = {c}\n")),
            (LoadKnob::Rate, Some(r)) => s.push_str(&format!("# [profile] rates = [{r}]\n")),
            _ => {}
        }
        Some(s)
    }

    /// The points `keep` selects, best score first, one per result: points with the same score
    /// and latency p99 ran the same (a timeout that never fired, a batch size never reached), and
    /// the recommendation, if it is one of them, stands for them, else the first evaluated.
    pub fn distinct(&self, keep: impl Fn(&Point) -> bool) -> Vec<&Point> {
        let best = self.best_point();
        let mut v: Vec<&Point> = self.points.iter().filter(|p| keep(p)).collect();
        v.sort_by_key(|p| best != Some(*p));
        let mut seen: Vec<(Option<f64>, Option<f64>)> = Vec::new();
        v.retain(|p| {
            let new = !seen.contains(&p.result());
            seen.push(p.result());
            new
        });
        v.sort_by(|a, b| b.score.unwrap_or(f64::MIN).total_cmp(&a.score.unwrap_or(f64::MIN)));
        v
    }
}
