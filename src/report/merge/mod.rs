//! `batchlab merge`: one report from the reports and `requests.jsonl` of a sharded run's shards
//! (`batchlab run --shard K/N`), sans IO: the shards come in read, the report and its records go
//! out (the CLI reads and writes the files).
//!
//! - **Exact from raw records.** Every per-request metric (percentiles, means, counts, tokens,
//!   SLO attainment, client timing, endpoints, images, prompt targets, the time series of
//!   completions) is rebuilt from the union of the shards' measured rows by `replay`, through the
//!   aggregation a run uses; never from merged histograms.
//! - **One timeline.** Each shard's times are moved onto the first shard's clock by the
//!   difference of their schedule starts (`shard.schedule_start_ns`): the shards' common start.
//!   In virtual time every shard starts at the same instant and nothing moves.
//! - **What records cannot give** has a rule each (docs/distributed.md, "Exceptions"): the
//!   measured batches (`batching`) are summed over the shards, and the time series' batch columns
//!   summed interval by interval; the `generate` distribution (one sample per engine batch, which
//!   no record holds) is left empty and each shard's p99 is listed in its row; the servers'
//!   counters (`server`) are, per endpoint, the delta of the shard with the widest window (every
//!   shard's delta counts the whole server, so they are never summed); the designed prefix-cache tokens are summed;
//!   the environment is the first shard's (every host is in the rows).
//! - **Nothing left out silently.** A shard that is missing (fewer than `n`, or `--expect`) or
//!   failed (its report says incomplete or error, or its files cannot be read) makes the report
//!   `incomplete`, named in its `error` and in `merge.missing` / `merge.failed`.
//! - **A verdict per shard** (`verdict`): lagged, started late, clock off, against bounds.

mod replay;
pub mod table;
pub mod verdict;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use self::verdict::{Problem, ValidityBounds, judge};
use super::{Report, RequestOutcome, RequestRecord, evaluate};
use crate::metrics::distribution::Summary;
use crate::metrics::repeats::summarize_repeats;
use crate::metrics::result::BenchmarkResult;
use crate::metrics::slo::Slo;
use crate::scenario::plan::Expectation;
use crate::time::Timestamp;

/// One shard's output directory as read: its report and its records, or why each could not be read.
#[derive(Debug)]
pub struct ShardOutput {
    /// Where it came from (its directory), for messages.
    pub source: String,
    /// Its report.json.
    pub report: Result<Report, String>,
    /// Its requests.jsonl.
    pub records: Result<Vec<RequestRecord>, String>,
    /// A launcher's word that this shard was lost before it could write anything (its
    /// `shard-failed.json`): the Ray launcher writes it for a shard whose actor died.
    pub lost: Option<LostShard>,
}

/// A shard a launcher saw lost (`shard-failed.json` in its directory, written by
/// `python -m batchlab_engines.ray_run` when the shard's worker died): named failed, with the
/// launcher's reason, and not also missing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LostShard {
    /// Its index.
    pub k: u32,
    /// The number of shards.
    pub n: u32,
    /// What the launcher saw.
    pub reason: String,
}

/// The file of a [`LostShard`] in its shard's directory.
pub const LOST_SHARD_FILE: &str = "shard-failed.json";

/// How to merge.
#[derive(Clone, Debug, Default)]
pub struct MergeOptions {
    /// The number of shards expected; `None` takes the shards' own `n`.
    pub expect: Option<u32>,
    /// The bounds of the validity verdict.
    pub bounds: ValidityBounds,
}

/// report.json's `merge` block: the shards, each with its verdict, and those missing or failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MergeSummary {
    /// The number of shards the run was split into.
    pub n: u32,
    /// The shards merged, by index.
    pub shards: Vec<ShardRow>,
    /// Shards expected and not given.
    pub missing: Vec<u32>,
    /// Shards that failed (still merged when their records could be read).
    pub failed: Vec<FailedShard>,
    /// The bounds of the verdicts.
    pub bounds: ValidityBounds,
}

/// One shard, as the merge saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardRow {
    /// Its index.
    pub k: u32,
    /// Its directory.
    pub source: String,
    /// Its host.
    pub host: Option<String>,
    /// Measured requests completed, over its benchmarks.
    pub completed: u64,
    /// Measured requests failed.
    pub errors: u64,
    /// The largest dispatch-delay p99 of its benchmarks, ms.
    pub dispatch_delay_p99_ms: Option<f64>,
    /// The largest client-lag p99 of its benchmarks, ms.
    pub client_lag_p99_ms: Option<f64>,
    /// The largest `generate` p99 of its benchmarks, ms (not mergeable from records).
    pub generate_p99_ms: Option<f64>,
    /// How late it started after the common start, ms.
    pub start_lateness_ms: Option<f64>,
    /// Its clock offset as a launcher measured it, ms.
    pub clock_offset_ms: Option<f64>,
    /// What is wrong with it; empty is ok.
    pub verdict: Vec<Problem>,
}

impl ShardRow {
    /// `ok`, or its problems joined.
    pub fn verdict_label(&self) -> String {
        if self.verdict.is_empty() {
            "ok".into()
        } else {
            self.verdict.iter().map(|p| p.label()).collect::<Vec<_>>().join(", ")
        }
    }
}

/// A shard that failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailedShard {
    /// Its index, when its report could be read.
    pub k: Option<u32>,
    /// Its directory.
    pub source: String,
    /// What went wrong.
    pub reason: String,
}

/// Why shards cannot be merged at all.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    /// No shard's report could be read.
    #[error("no shard to merge: {0}")]
    Nothing(String),
    /// A report that is not a shard's.
    #[error("{dir}: report.json has no `shard` block: it is not a shard of a sharded run (batchlab run --shard K/N)")]
    NotAShard {
        /// The directory.
        dir: String,
    },
    /// Shards of different runs.
    #[error("{dir}: shard {k}/{n} does not belong with {first}: {what} differs")]
    Mismatch {
        /// The directory.
        dir: String,
        /// Its shard.
        k: u32,
        /// Its shard count.
        n: u32,
        /// The first shard's directory.
        first: String,
        /// What differs.
        what: &'static str,
    },
    /// The same shard twice.
    #[error("shard {k} is given twice: {first} and {second}")]
    Duplicate {
        /// The shard.
        k: u32,
        /// One directory.
        first: String,
        /// The other.
        second: String,
    },
}

/// A shard read whole: its report, its records on the common timeline.
struct Loaded {
    source: String,
    report: Report,
    records: Result<Vec<RequestRecord>, String>,
    /// Added to its times to put them on the first shard's clock, ns.
    shift: i128,
}

/// The merged report of `shards` and its records (every shard's rows, on one timeline, in the
/// order of their outcomes).
pub fn merge(shards: Vec<ShardOutput>, options: &MergeOptions) -> Result<(Report, Vec<RequestRecord>), MergeError> {
    let mut failed = Vec::new();
    let mut lost = Vec::new();
    let mut by_k: BTreeMap<u32, Loaded> = BTreeMap::new();
    for shard in shards {
        if let Some(l) = shard.lost {
            lost.push(l.k);
            failed.push(FailedShard { k: Some(l.k), source: shard.source, reason: l.reason });
            continue;
        }
        let report = match shard.report {
            Ok(report) => report,
            Err(reason) => {
                failed.push(FailedShard { k: None, source: shard.source, reason });
                continue;
            }
        };
        let Some(info) = report.shard.as_ref() else { return Err(MergeError::NotAShard { dir: shard.source }) };
        let k = info.k;
        if let Some(first) = by_k.get(&k) {
            return Err(MergeError::Duplicate { k, first: first.source.clone(), second: shard.source });
        }
        by_k.insert(k, Loaded { source: shard.source, report, records: shard.records, shift: 0 });
    }
    let Some(first) = by_k.values().next() else {
        let reasons: Vec<String> = failed.iter().map(|f| format!("{}: {}", f.source, f.reason)).collect();
        return Err(MergeError::Nothing(reasons.join("; ")));
    };
    let first_info = first.report.shard.clone().expect("checked above");
    for shard in by_k.values() {
        let info = shard.report.shard.as_ref().expect("checked above");
        let mismatch = |what| MergeError::Mismatch {
            dir: shard.source.clone(),
            k: info.k,
            n: info.n,
            first: first.source.clone(),
            what,
        };
        if info.n != first_info.n {
            return Err(mismatch("the number of shards"));
        }
        if shard.report.scenario != first.report.scenario {
            return Err(mismatch("the scenario"));
        }
    }
    let base = first_info.schedule_start_ns.as_nanos() as i128;
    for shard in by_k.values_mut() {
        let start = shard.report.shard.as_ref().expect("checked above").schedule_start_ns;
        shard.shift = base - start.as_nanos() as i128;
    }
    let n = options.expect.unwrap_or(first_info.n);
    let missing: Vec<u32> = (0..n).filter(|k| !by_k.contains_key(k) && !lost.contains(k)).collect();
    for (k, shard) in &by_k {
        let mut reasons = Vec::new();
        if let Err(e) = &shard.records {
            reasons.push(e.clone());
        }
        if let Some(e) = &shard.report.error {
            reasons.push(e.clone());
        }
        if shard.report.incomplete && reasons.is_empty() {
            reasons.push("its report is marked incomplete (interrupted, or its engine became unusable)".into());
        }
        if !reasons.is_empty() {
            failed.push(FailedShard { k: Some(*k), source: shard.source.clone(), reason: reasons.join("; ") });
        }
    }
    let per_shard: Vec<Vec<RequestRecord>> =
        by_k.values().map(|s| s.records.iter().flatten().map(|r| shifted(r, s.shift)).collect()).collect();
    let benchmarks = merged_benchmarks(&by_k, &per_shard);
    let records: Vec<RequestRecord> = per_shard.into_iter().flatten().collect();
    let rows = by_k.iter().map(|(k, s)| row(*k, s, &options.bounds)).collect();

    let mut report = by_k.values().next().expect("one shard").report.clone();
    let expectations = expectations_of(&report);
    report.expectations = evaluate(&expectations, &benchmarks);
    report.repeats = summarize_repeats(&benchmarks);
    report.benchmarks = benchmarks;
    report.shard = None;
    let mut problems: Vec<String> = missing.iter().map(|k| format!("shard {k} of {n} is missing")).collect();
    problems.extend(failed.iter().map(|f| match f.k {
        Some(k) => format!("shard {k} ({}) failed: {}", f.source, f.reason),
        None => format!("{} failed: {}", f.source, f.reason),
    }));
    report.incomplete = !problems.is_empty();
    report.error = (!problems.is_empty()).then(|| problems.join("; "));
    report.merge = Some(MergeSummary { n, shards: rows, missing, failed, bounds: options.bounds });

    let order: BTreeMap<(&str, u32), usize> =
        report.benchmarks.iter().enumerate().map(|(i, b)| ((b.name.as_str(), b.repeat), i)).collect();
    let mut records = records;
    records.sort_by_key(|r| {
        let at = order.get(&(r.benchmark.as_str(), r.repeat)).copied().unwrap_or(usize::MAX);
        (at, r.outcome == RequestOutcome::Incomplete, r.finished_ns, r.id)
    });
    Ok((report, records))
}

/// The scenario's `[expect]`, as the shards' reports checked it.
fn expectations_of(report: &Report) -> Vec<Expectation> {
    let mut seen = Vec::<Expectation>::new();
    for o in &report.expectations {
        let e = Expectation { metric: o.metric.clone(), op: o.op, value: o.expected, origin: o.origin.clone() };
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    seen
}

/// `t` moved by `shift` ns (at 0 at the least).
fn shift_ts(t: Timestamp, shift: i128) -> Timestamp {
    Timestamp::from_nanos((t.as_nanos() as i128 + shift).clamp(0, u64::MAX as i128) as u64)
}

/// `r` with every time moved by `shift`.
fn shifted(r: &RequestRecord, shift: i128) -> RequestRecord {
    let mut r = r.clone();
    if shift == 0 {
        return r;
    }
    let s = |t: &mut Option<Timestamp>| *t = t.map(|t| shift_ts(t, shift));
    for t in [
        &mut r.submitted_ns,
        &mut r.dispatched_ns,
        &mut r.finished_ns,
        &mut r.engine_scheduled_ns,
        &mut r.engine_first_token_ns,
        &mut r.engine_last_token_ns,
        &mut r.intended_ns,
        &mut r.sent_ns,
    ] {
        s(t);
    }
    if let Some(tokens) = &mut r.token_ns {
        tokens.iter_mut().for_each(|t| *t = shift_ts(*t, shift));
    }
    r
}

/// Every benchmark of the shards, in the first shard's order, rebuilt from the union of records.
fn merged_benchmarks(by_k: &BTreeMap<u32, Loaded>, per_shard: &[Vec<RequestRecord>]) -> Vec<BenchmarkResult> {
    let mut keys: Vec<(String, u32)> = Vec::new();
    for s in by_k.values() {
        for b in &s.report.benchmarks {
            if !keys.iter().any(|(n, r)| *n == b.name && *r == b.repeat) {
                keys.push((b.name.clone(), b.repeat));
            }
        }
    }
    let first = &by_k.values().next().expect("one shard").report;
    let slo: Slo = first.scenario.get("slo").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default();
    // Per benchmark, each shard's rows in its own file order (the order its run saw them).
    let mut by_benchmark: BTreeMap<(&str, u32), Vec<Vec<&RequestRecord>>> = BTreeMap::new();
    for (i, records) in per_shard.iter().enumerate() {
        for r in records {
            let parts = by_benchmark
                .entry((r.benchmark.as_str(), r.repeat))
                .or_insert_with(|| vec![Vec::new(); per_shard.len()]);
            parts[i].push(r);
        }
    }
    keys.iter()
        .map(|(name, repeat)| {
            let parts: Vec<(&BenchmarkResult, i128)> = by_k
                .values()
                .filter_map(|s| {
                    let b = s.report.benchmarks.iter().find(|b| b.name == *name && b.repeat == *repeat)?;
                    Some((b, s.shift))
                })
                .collect();
            let windows: Vec<(Timestamp, Timestamp)> = by_k
                .values()
                .flat_map(|s| {
                    let info = s.report.shard.as_ref().expect("a shard");
                    info.windows
                        .iter()
                        .filter(|w| w.benchmark == *name && w.repeat == *repeat)
                        .map(|w| (shift_ts(w.start_ns, s.shift), shift_ts(w.end_ns, s.shift)))
                })
                .collect();
            let start = windows.iter().map(|w| w.0).min().unwrap_or_default();
            let end = windows.iter().map(|w| w.1).max().unwrap_or(start);
            let rows = by_benchmark.get(&(name.as_str(), *repeat)).map(Vec::as_slice).unwrap_or_default();
            let mut merged = replay::replay(name, *repeat, &slo, (start, end), rows);
            add_unrecorded(&mut merged, &parts);
            merged
        })
        .collect()
}

/// The servers' counters of the run: per endpoint, the delta a shard read over the widest window
/// (its longest benchmark). A server counts every shard's requests, so the shards' deltas overlap
/// and are never summed; the widest is the nearest to the whole run's.
fn widest_server_deltas(parts: &[(&BenchmarkResult, i128)]) -> Vec<crate::metrics::server::ServerDelta> {
    let mut widest: Vec<(f64, &crate::metrics::server::ServerDelta)> = Vec::new();
    for (part, _) in parts {
        for delta in &part.server {
            match widest.iter_mut().find(|(_, w)| w.endpoint == delta.endpoint) {
                Some(slot) if slot.0 >= part.duration_s => {}
                Some(slot) => *slot = (part.duration_s, delta),
                None => widest.push((part.duration_s, delta)),
            }
        }
    }
    widest.into_iter().map(|(_, d)| d.clone()).collect()
}

/// The fields no record holds, by their rules (module docs).
fn add_unrecorded(merged: &mut BenchmarkResult, parts: &[(&BenchmarkResult, i128)]) {
    let lost: i64 = parts.iter().map(|(b, _)| b.counts.lost).sum();
    merged.counts.lost += lost;
    merged.counts.submitted = merged.counts.submitted.saturating_add_signed(lost);
    let b = &mut merged.batching;
    for (part, _) in parts {
        let p = &part.batching;
        for (size, count) in &p.batch_size_histogram {
            *b.batch_size_histogram.entry(*size).or_default() += count;
        }
        (b.full, b.timeout, b.drain, b.steps) =
            (b.full + p.full, b.timeout + p.timeout, b.drain + p.drain, b.steps + p.steps);
        b.whole_run.batches += p.whole_run.batches;
        b.whole_run.largest = b.whole_run.largest.max(p.whole_run.largest);
        merged.prefix_cache_tokens.designed_cached += part.prefix_cache_tokens.designed_cached;
        merged.prefix_cache_tokens.designed_prompt += part.prefix_cache_tokens.designed_prompt;
    }
    merged.server = widest_server_deltas(parts);
    b.batches = b.batch_size_histogram.values().sum();
    let size_sum: u128 = b.batch_size_histogram.iter().map(|(&s, &n)| s as u128 * u128::from(n)).sum();
    let share = |n: u64| (b.batches > 0).then(|| n as f64 / b.batches as f64);
    b.batch_size_mean = (b.batches > 0).then(|| size_sum as f64 / b.batches as f64);
    (b.full_share, b.timeout_share, b.drain_share) = (share(b.full), share(b.timeout), share(b.drain));
    // Each shard's mean weighted by its engine steps (one shard's alone is kept as it is).
    let steps_weighted = |f: fn(&crate::metrics::result::Batching) -> Option<f64>| {
        let given: Vec<(f64, u64)> =
            parts.iter().filter_map(|(p, _)| Some((f(&p.batching)?, p.batching.steps))).collect();
        match given.as_slice() {
            [] => None,
            [(mean, _)] => Some(*mean),
            _ => {
                let total: u64 = given.iter().map(|(_, s)| s).sum();
                (total > 0).then(|| given.iter().map(|(m, s)| m * *s as f64).sum::<f64>() / total as f64)
            }
        }
    };
    b.prefill_mean = steps_weighted(|b| b.prefill_mean);
    b.decode_mean = steps_weighted(|b| b.decode_mean);
    let p = &merged.prefix_cache_tokens;
    merged.prefix_cache_designed_hit_rate =
        (p.designed_prompt > 0).then(|| p.designed_cached as f64 / p.designed_prompt as f64);
    merged.distributions.generate = Summary::default();
    let series = &mut merged.time_series;
    series.batches = vec![0; series.len()];
    let mut size_sums = vec![0.0; series.len()];
    for (part, _) in parts {
        let ps = &part.time_series;
        let intervals = series.batches.iter_mut().zip(size_sums.iter_mut());
        for ((batches, sum), (&more, mean)) in intervals.zip(ps.batches.iter().zip(&ps.batch_size_mean)) {
            *batches += more;
            *sum += mean.unwrap_or(0.0) * more as f64;
        }
    }
    series.batch_size_mean =
        series.batches.iter().zip(&size_sums).map(|(&n, &sum)| (n > 0).then(|| sum / n as f64)).collect();
    merged.matrix = parts.first().and_then(|(p, _)| p.matrix.clone());
}

/// A shard's row: its totals, worst p99s, start and verdict.
fn row(k: u32, shard: &Loaded, bounds: &ValidityBounds) -> ShardRow {
    let r = &shard.report;
    let info = r.shard.as_ref().expect("a shard");
    let worst = |f: fn(&BenchmarkResult) -> Option<f64>| r.benchmarks.iter().filter_map(f).reduce(f64::max);
    let client_lag_p99_ms = worst(|b| b.dispatch.client_lag.p99);
    ShardRow {
        k,
        source: shard.source.clone(),
        host: info.host.clone(),
        completed: r.benchmarks.iter().map(|b| b.counts.completed).sum(),
        errors: r.benchmarks.iter().map(|b| b.counts.errors).sum(),
        dispatch_delay_p99_ms: worst(|b| b.dispatch.dispatch_delay.p99),
        client_lag_p99_ms,
        generate_p99_ms: worst(|b| b.distributions.generate.p99),
        start_lateness_ms: info.start_lateness_ms,
        clock_offset_ms: info.clock_offset_ms,
        verdict: judge(client_lag_p99_ms, info.start_lateness_ms, info.clock_offset_ms, bounds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::aggregate::tests::sample_result;
    use crate::metrics::server::ServerDelta;

    fn delta(endpoint: &str, prompt_tokens: f64) -> ServerDelta {
        ServerDelta {
            endpoint: endpoint.into(),
            counters: BTreeMap::from([("prompt_tokens".to_string(), prompt_tokens)]),
            ..ServerDelta::default()
        }
    }

    #[test]
    fn a_servers_counters_come_from_the_widest_window_never_summed() {
        // Shards 0 and 1 both read server a (each delta counts both shards' requests); only shard
        // 1 reads server b.
        let mut short = sample_result();
        short.duration_s = 9.0;
        short.server = vec![delta("a", 900.0)];
        let mut long = sample_result();
        long.duration_s = 10.0;
        long.server = vec![delta("a", 1000.0), delta("b", 50.0)];
        for parts in [[(&short, 0), (&long, 0)], [(&long, 0), (&short, 0)]] {
            let server = widest_server_deltas(&parts);
            assert_eq!(
                server,
                vec![delta("a", 1000.0), delta("b", 50.0)],
                "the widest window's a (not 900, never 1900), and b"
            );
        }
    }
}
