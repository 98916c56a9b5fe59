//! The judging of one metric of one benchmark: each run's side (its distinct repeats, and its
//! requests and batches grouped in units of independence, batches or blocks of time), and the
//! intervals the two sides give (a bootstrap over units, a share's change in points, the
//! repeats, blocks of the time series), of which the narrowest is kept.

use std::collections::{BTreeMap, BTreeSet};

use super::comparison::{Judgement, Scale, TestKind};
use super::run::{BatchSpan, Run, Sample};
use super::stats::{
    self, BatchedValues, ClusteredShare, Interval, MIN_BATCHES, bootstrap_changes, ratio_interval, share_change,
};
use super::{GENERATE, PER_REQUEST, SERIES_BLOCKS};
use crate::metrics::result::BenchmarkResult;

/// The timing a metric is a statistic of, and which: `latency_p99_ms` → (`latency_ms`, `p99`).
fn timing_of(metric: &str) -> Option<(&'static str, &'static str)> {
    let (dist, stat) = metric.strip_suffix("_ms")?.rsplit_once('_')?;
    let stat = stats::STATS.iter().find(|s| **s == stat)?;
    let field = PER_REQUEST.iter().map(|(d, f, _)| (*d, *f)).chain([GENERATE]).find(|(d, _)| *d == dist)?.1;
    Some((field, stat))
}

/// A run's repeats of a benchmark, byte-identical copies counted once (a virtual-time run of one
/// seed repeats itself exactly: one sample, however many copies). Also whether copies were
/// dropped.
fn distinct_repeats(results: Vec<&BenchmarkResult>) -> (Vec<&BenchmarkResult>, bool) {
    let copies = results.len();
    let mut seen: Vec<serde_json::Value> = Vec::new();
    let mut out = Vec::new();
    for r in results {
        let mut value = serde_json::to_value(r).unwrap_or_default();
        if let Some(o) = value.as_object_mut() {
            o.remove("repeat");
        }
        if !seen.contains(&value) {
            seen.push(value);
            out.push(r);
        }
    }
    let dropped = out.len() < copies;
    (out, dropped)
}

/// An interval, or why none could be made.
pub(super) type Judged = Result<Judgement, String>;

/// The unit a run's requests are judged in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum UnitKind {
    /// The batch (generate call): the requests of one share its fate.
    Batch,
    /// A block of time: every request is its own batch, or the engine batches by itself.
    TimeBlock,
}

impl UnitKind {
    fn words(self) -> &'static str {
        match self {
            UnitKind::Batch => "batches",
            UnitKind::TimeBlock => "time blocks",
        }
    }
}

/// A request's own timings at the server: where a server batches concurrent requests
/// continuously, their distributions depend on the run's rhythm (see [`Pair::judge`]), not only on
/// the server's speed: how a request's time splits between waiting and decoding, and the tail of
/// the whole.
const RHYTHM_TIMINGS: &[&str] = &["latency_ms", "ttft_ms", "tpot_ms", "itl_max_ms", "latency_per_token_ms"];

/// One run's side of one benchmark: its distinct repeats and their requests.
pub(super) struct Side<'r> {
    results: Vec<&'r BenchmarkResult>,
    /// Every request its own unit of time while requests overlap at a server that batches them
    /// continuously (`batching.max_in_flight > 1` at batch size 1, or an engine that schedules
    /// its own steps): the run falls into a rhythm of its own (see [`Pair::judge`]).
    concurrent: bool,
    /// The measured requests of the distinct repeats.
    requests: Option<Vec<&'r Sample>>,
    batches: Option<Vec<&'r BatchSpan>>,
    unit: UnitKind,
    /// Per request (index into `requests`): its unit's id.
    unit_of: Vec<u64>,
    /// Per batch (index into `batches`): its unit's id.
    batch_unit: Vec<u64>,
}

impl<'r> Side<'r> {
    pub(super) fn new(name: &str, run: &'r Run, notes: &mut Vec<String>, which: &str) -> Self {
        let all: Vec<&BenchmarkResult> = run.report.benchmarks.iter().filter(|x| x.name == name).collect();
        let n_all = all.len();
        let (results, copies) = distinct_repeats(all);
        if copies {
            notes.push(format!(
                "{which}'s {n_all} repeats of {name} are {} distinct (byte-identical copies: virtual time, one seed); each is counted once, copies are no evidence",
                results.len()
            ));
        }
        let repeats: BTreeSet<u32> = results.iter().map(|r| r.repeat).collect();
        let samples = run.requests.as_ref().and_then(|r| r.get(name));
        let requests: Option<Vec<&Sample>> =
            samples.map(|s| s.requests.iter().filter(|x| repeats.contains(&x.repeat)).collect());
        let batches: Option<Vec<&BatchSpan>> =
            samples.map(|s| s.batches.iter().filter(|x| repeats.contains(&x.repeat)).collect());
        // Every request its own batch (batch_size 1), or the engine's own steps (continuous
        // admission): the batch is no unit, a block of time is.
        let steps = results.iter().any(|r| r.batching.steps > 0);
        let per_batch = requests.as_ref().map(|reqs| {
            let completed = reqs.iter().filter(|x| x.batch.is_some()).count();
            let batches: BTreeSet<(u32, u64)> = reqs.iter().filter_map(|x| x.batch.map(|b| (x.repeat, b))).collect();
            completed as f64 / batches.len().max(1) as f64
        });
        let unit = if steps || per_batch.is_some_and(|m| m <= 1.5) { UnitKind::TimeBlock } else { UnitKind::Batch };
        let in_flight = run.report.scenario.pointer("/batching/max_in_flight").and_then(|v| v.as_u64()).unwrap_or(1);
        let concurrent = unit == UnitKind::TimeBlock && (steps || in_flight > 1);
        let mut side =
            Side { results, concurrent, requests, batches, unit, unit_of: Vec::new(), batch_unit: Vec::new() };
        side.assign_units();
        side
    }

    /// Each request's and batch's unit: its batch, or its block of its repeat's window.
    fn assign_units(&mut self) {
        let Some(requests) = &self.requests else { return };
        // Per repeat: the window of dispatches.
        let mut window: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for r in requests {
            if let Some(d) = r.dispatched_ns {
                let w = window.entry(r.repeat).or_insert((u64::MAX, 0));
                *w = (w.0.min(d), w.1.max(d));
            }
        }
        let block = |repeat: u32, at: Option<u64>| -> u64 {
            let k = SERIES_BLOCKS as u64;
            let (from, to) = window.get(&repeat).copied().unwrap_or((0, 0));
            let i = match at {
                Some(t) if to > from => ((t.saturating_sub(from)) as u128 * k as u128 / (to - from) as u128) as u64,
                _ => 0,
            };
            u64::from(repeat) * k + i.min(k - 1)
        };
        let unit = self.unit;
        self.unit_of = requests
            .iter()
            .enumerate()
            .map(|(i, r)| match unit {
                UnitKind::TimeBlock => block(r.repeat, r.dispatched_ns),
                // A failed request has no batch id: its dispatch names its batch (a request never
                // dispatched is a unit of its own).
                UnitKind::Batch => match (r.batch, r.dispatched_ns) {
                    (Some(b), _) => u64::from(r.repeat) << 48 | b,
                    (None, Some(d)) => 1 << 63 | d,
                    (None, None) => 1 << 62 | i as u64,
                },
            })
            .collect();
        self.batch_unit = self
            .batches
            .iter()
            .flatten()
            .map(|b| match unit {
                UnitKind::TimeBlock => block(b.repeat, Some(b.dispatched_ns)),
                UnitKind::Batch => u64::from(b.repeat) << 48 | b.batch,
            })
            .collect();
    }

    pub(super) fn repeats(&self, metric: &str) -> Vec<f64> {
        self.results.iter().filter_map(|x| x.metric(metric)).collect()
    }

    /// `(unit, value)` of a timing field over the requests (or batches for `generate_ms`).
    fn timing(&self, field: &str) -> Option<Vec<(u64, f64)>> {
        if field == GENERATE.1 {
            let batches = self.batches.as_ref()?;
            return Some(batches.iter().zip(&self.batch_unit).map(|(b, &u)| (u, b.generate_ms)).collect());
        }
        let i = PER_REQUEST.iter().position(|(_, f, _)| *f == field)?;
        let requests = self.requests.as_ref()?;
        Some(requests.iter().zip(&self.unit_of).filter_map(|(r, &u)| r.timings[i].map(|v| (u, v))).collect())
    }

    /// How errors cluster: per unit where the request failures fall, `(failed, measured)`. For
    /// batches, a batch is its dispatch (a failed request has no batch id, but its dispatch).
    fn error_units(&self) -> Option<Vec<(u64, u64)>> {
        let requests = self.requests.as_ref()?;
        let mut units: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (i, r) in requests.iter().enumerate() {
            let key = match (self.unit, r.dispatched_ns) {
                (UnitKind::TimeBlock, _) => self.unit_of[i],
                (UnitKind::Batch, Some(d)) => u64::from(r.repeat) << 56 ^ d,
                (UnitKind::Batch, None) => 1 << 63 | i as u64,
            };
            let u = units.entry(key).or_default();
            *u = (u.0 + u64::from(r.failed), u.1 + 1);
        }
        Some(units.into_values().collect())
    }

    /// The generate calls the run made in its measured window (its batches; for an engine that
    /// batches by itself, its requests, each handed over alone).
    fn calls(&self) -> u64 {
        self.results
            .iter()
            .map(|r| if r.batching.steps > 0 { r.counts.completed + r.counts.errors } else { r.batching.batches })
            .sum()
    }
}

/// The variance of the change a within-run interval (a bootstrap or blocks of time over `units`
/// units) stands for: its half-width over the t quantile on `units − 1` degrees of freedom (the
/// expanded bootstrap is read as wide as that t interval; the blocks' Welch t has at least as
/// many, so for them this is the smaller variance: the check errs towards the repeats).
fn within_variance(j: &Judgement, alpha: f64) -> f64 {
    let h = j.interval.half_width() / stats::t_of(alpha, (j.units - 1.0).max(1.0));
    h * h
}

/// Every statistic's interval of one timing, in [`stats::STATS`]' order.
type StatIntervals = [Option<Interval>; 9];

/// One benchmark of both runs.
pub(super) struct Pair<'r> {
    pub(super) a: Side<'r>,
    pub(super) b: Side<'r>,
    pub(super) alpha: f64,
    /// Per requests.jsonl field: each statistic's bootstrap interval, or why there is none.
    pub(super) bootstraps: BTreeMap<&'static str, Result<(StatIntervals, usize), String>>,
    /// The metrics whose within-run interval the repeats' spread overruled (see [`Pair::judge`]).
    pub(super) repeat_bound: Vec<String>,
}

impl<'r> Pair<'r> {
    pub(super) fn judge(&mut self, metric: &str) -> Judged {
        if let Some(shared) = self.share(metric) {
            return shared;
        }
        let mut candidates: Vec<Judged> = Vec::new();
        if let Some((field, stat)) = timing_of(metric) {
            // Requests that overlap at a server batching them continuously fall into a rhythm:
            // those that start together stay together (waves), and which waves form depends on
            // how the run began, then holds for the whole run. It moves TTFT and TPOT (how a
            // request's time splits between waiting and decoding) and the latency's tail with
            // nothing changed, and every block of time of one run shares it: for these timings
            // the run is the unit, and only the repeats judge them. Measured, unchanged runs of
            // scenarios/http.toml against `batchlab serve` (32 in flight): TTFT p50 +7.3 %, its
            // time-block interval [+3.0 %, +8.5 %] (one run in one wave of 32, the other in two
            // of 16); latency p99 +5.5 % [+1.8 %, +6.1 %]. The rates keep their blocks of time:
            // a closed loop's throughput is its concurrency over the mean latency, which the
            // waves do not move.
            if RHYTHM_TIMINGS.contains(&field) && (self.a.concurrent || self.b.concurrent) {
                return self.repeats_only(metric, false).map_err(|repeats| {
                    format!(
                        "{repeats}: requests that overlap at a continuously batching server fall into waves that hold for a run and differ between runs, moving TTFT, TPOT and the latency's tail with nothing changed, so the run is the unit (or run A and B alternately: batchlab ab)"
                    )
                });
            }
            candidates.push(self.bootstrap(field, stat));
        }
        if let Some(field) = series_field(metric) {
            candidates.push(self.series(field));
        }
        // Where both runs have 2+ repeats, their spread checks the within-run intervals (above):
        // the batches or blocks of time of one repeat share its machine's state, so an interval
        // over them is right only if the repeats differ no more than it allows. Where they differ
        // more, the repeat is the unit. Seen on in-process vLLM (a CI run of tests/vllm_compare.rs,
        // the 4 repeats of one run split in two halves): the halves' repeats so far apart that
        // their throughput's repeats-t read −13.4 % [−40.5 %, +13.7 %], while TPOT p50's bootstrap
        // over the 10 batches of each half read +16.7 % [+7.8 %, …]: a regression of nothing.
        if let Some(spread) = self.repeat_spread(metric) {
            let alpha = self.alpha;
            for c in &mut candidates {
                if let Ok(j) = c
                    && spread > within_variance(j, alpha)
                {
                    self.repeat_bound.push(metric.to_string());
                    *c = Err(format!("the repeats differ more than the {} of one repeat allow", j.unit));
                }
            }
        }
        candidates.push(self.by_repeats(metric));
        // The narrowest interval: the one that holds the most independent information.
        let mut best: Option<Judgement> = None;
        let mut reasons: Vec<String> = Vec::new();
        for c in candidates {
            match c {
                Ok(j) => {
                    if best.as_ref().is_none_or(|b| j.interval.half_width() < b.interval.half_width()) {
                        best = Some(j);
                    }
                }
                // The repeats' reason names requests.jsonl too.
                Err(r) if r.starts_with("needs requests.jsonl") => {}
                Err(r) => reasons.push(r),
            }
        }
        best.ok_or_else(|| reasons.join("; "))
    }

    /// The variance of the change the repeats' own spread gives, where both runs have 2+ distinct
    /// repeats.
    fn repeat_spread(&self, metric: &str) -> Option<f64> {
        stats::ratio_variance(&self.a.repeats(metric), &self.b.repeats(metric))
    }

    /// The repeats' interval.
    fn by_repeats(&self, metric: &str) -> Judged {
        self.repeats_only(metric, timing_of(metric).is_some())
    }

    /// The repeats' interval; `requests_would_do` says whether requests.jsonl could stand in for
    /// them (the error names it).
    fn repeats_only(&self, metric: &str, requests_would_do: bool) -> Judged {
        let (ra, rb) = (self.a.repeats(metric), self.b.repeats(metric));
        ratio_interval(&ra, &rb, self.alpha)
            .map(|interval| Judgement::relative(interval, TestKind::Repeats, ra.len().min(rb.len()), "repeats"))
            .ok_or_else(|| {
                format!(
                    "needs 2+ distinct repeats in each run (--repeat N; A has {}, B has {}){}",
                    ra.len(),
                    rb.len(),
                    if requests_would_do { ", or requests.jsonl in both" } else { "" }
                )
            })
    }

    fn series(&self, field: SeriesField) -> Judged {
        let (ba, bb) = (series_blocks(&self.a.results, field), series_blocks(&self.b.results, field));
        ratio_interval(&ba, &bb, self.alpha)
            .map(|interval| Judgement::relative(interval, TestKind::Series, ba.len().min(bb.len()), "time blocks"))
            .ok_or_else(|| format!("too short a time series: needs {SERIES_BLOCKS}+ intervals in each run"))
    }

    fn bootstrap(&mut self, field: &'static str, stat: &str) -> Judged {
        // A request's record keeps its largest gap between tokens, not every gap: its values
        // give the distribution of the largest gaps, whose max is the run's, but whose p50 or
        // mean is not the run's p50 or mean of all gaps (the table's value).
        if field == "itl_max_ms" && stat != "max" {
            return Err("requests.jsonl keeps each request's largest gap between tokens only, so only itl_max_ms is judged from it".into());
        }
        let (a, b, alpha) = (&self.a, &self.b, self.alpha);
        let unit = if a.unit == UnitKind::TimeBlock || b.unit == UnitKind::TimeBlock {
            UnitKind::TimeBlock
        } else {
            UnitKind::Batch
        };
        let tests = self.bootstraps.entry(field).or_insert_with(|| {
            let (Some(va), Some(vb)) = (a.timing(field), b.timing(field)) else {
                return Err("needs requests.jsonl in both runs".to_string());
            };
            if va.is_empty() || vb.is_empty() {
                return Err("no completed request with this timing in one of the runs".to_string());
            }
            let (Some(xa), Some(xb)) = (BatchedValues::new(&va), BatchedValues::new(&vb)) else {
                return Err("a value that is not a number".to_string());
            };
            let stream = PER_REQUEST.iter().position(|(_, f, _)| *f == field).unwrap_or(PER_REQUEST.len()) as u64;
            let units = xa.batches().min(xb.batches());
            bootstrap_changes(&xa, &xb, alpha, stream).map(|t| (t, units)).ok_or_else(|| {
                format!(
                    "fewer than {MIN_BATCHES} {} with this timing in a run (A has {}, B has {}): too few to resample",
                    unit.words(),
                    xa.batches(),
                    xb.batches()
                )
            })
        });
        let i = stats::STATS.iter().position(|s| *s == stat).unwrap_or_default();
        match tests {
            Ok((tests, units)) => tests[i]
                .map(|interval| Judgement::relative(interval, TestKind::Bootstrap, *units, unit.words()))
                .ok_or_else(|| "too few values".to_string()),
            Err(reason) => Err(reason.clone()),
        }
    }

    /// A share metric's change in points; `None` for a metric that is not a share.
    fn share(&self, metric: &str) -> Option<Judged> {
        share_of(metric, self.a.results.first()?)?;
        let side = |s: &Side| -> Option<ClusteredShare> {
            let (hits, total, per_request) =
                s.results.iter().map(|r| share_of(metric, r)).try_fold((0u64, 0u64, false), |(h, t, _), x| {
                    let (hits, total, per_request) = x?;
                    Some((h + hits, t + total, per_request))
                })?;
            let units = if metric == "errors" { s.error_units().unwrap_or_default() } else { Vec::new() };
            let fallback_units = if per_request { s.calls() } else { total };
            Some(ClusteredShare { hits, total, units, fallback_units })
        };
        let (Some(a), Some(b)) = (side(&self.a), side(&self.b)) else {
            return Some(Err("not measured in one of the runs".to_string()));
        };
        Some(
            share_change(&a, &b, self.alpha, 1.0)
                .map(|c| {
                    let measured = a.design_effect().or(b.design_effect());
                    Judgement {
                        interval: c.change,
                        scale: Scale::Points,
                        test: TestKind::Share,
                        units: c.n_a.min(c.n_b),
                        unit: match measured {
                            Some(d) => format!("independent requests (design effect {d:.1})"),
                            None => "generate calls".into(),
                        },
                        b_share: Some((c.b_low, c.b_high)),
                        share_inputs: Some((a, b)),
                    }
                })
                .ok_or_else(|| "nothing to count in one of the runs".to_string()),
        )
    }
}

/// The share a count metric is: (hits, out of, whether the members are requests rather than
/// batches); `None` for a metric that is not a share, or a run without it.
fn share_of(metric: &str, r: &BenchmarkResult) -> Option<(u64, u64, bool)> {
    let c = &r.counts;
    let b = &r.batching;
    Some(match metric {
        "completed" => (c.completed, c.submitted, true),
        "errors" => (c.errors, c.completed + c.errors, true),
        "cancelled" => (c.cancelled, c.submitted, true),
        "incomplete" => (c.incomplete, c.submitted, true),
        "lost" => (c.lost.max(0) as u64, c.submitted.max(c.lost.max(0) as u64), true),
        "anomalies" => (r.anomalies.requests, c.completed, true),
        "slo_attainment" => {
            let slo = r.slo.as_ref()?;
            (slo.met, slo.judged, true)
        }
        "full_flush_share" => (b.full, b.batches, false),
        "timeout_flush_share" => (b.timeout, b.batches, false),
        "drain_flush_share" => (b.drain, b.batches, false),
        _ => return None,
    })
}

/// The per-interval series a metric is judged by.
#[derive(Copy, Clone)]
enum SeriesField {
    Completed,
    OutputTokens,
    Concurrency,
}

fn series_field(metric: &str) -> Option<SeriesField> {
    match metric {
        "requests_per_s" => Some(SeriesField::Completed),
        "output_tokens_per_s" => Some(SeriesField::OutputTokens),
        "concurrency_mean" => Some(SeriesField::Concurrency),
        _ => None,
    }
}

/// Every repeat's window cut into [`SERIES_BLOCKS`] blocks of consecutive intervals, and the
/// metric over each block: a rate per second, or the time-weighted mean concurrency. A repeat
/// with fewer intervals than blocks gives none.
fn series_blocks(runs: &[&BenchmarkResult], field: SeriesField) -> Vec<f64> {
    let mut out = Vec::new();
    for r in runs {
        let s = &r.time_series;
        let n = s.len();
        if n < SERIES_BLOCKS {
            continue;
        }
        for k in 0..SERIES_BLOCKS {
            let (mut seconds, mut sum) = (0.0, 0.0);
            for i in k * n / SERIES_BLOCKS..(k + 1) * n / SERIES_BLOCKS {
                let len = s.interval_len_s(i, r.duration_s);
                match field {
                    SeriesField::Completed => (seconds, sum) = (seconds + len, sum + s.completed[i] as f64),
                    SeriesField::OutputTokens => (seconds, sum) = (seconds + len, sum + s.output_tokens[i] as f64),
                    SeriesField::Concurrency => {
                        if let Some(c) = s.concurrency.get(i).copied().flatten() {
                            (seconds, sum) = (seconds + len, sum + c * len);
                        }
                    }
                }
            }
            if seconds > 0.0 {
                out.push(sum / seconds);
            }
        }
    }
    out
}
