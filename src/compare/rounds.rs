//! An A/B run judged by its rounds: `batchlab ab` runs A and B alternately (A B, B A, A B, …),
//! each round one run of each, so that both sides share the machine's state round by round. A
//! machine that slows down over the run slows A and B alike, and the round's own change
//! (`B / A − 1`) keeps only what the change did. The interval of every relative metric is a paired
//! t interval over the rounds ([`stats::paired_interval`]); shares (errors) pool every round's
//! requests, as a single comparison does, and the three-way rule is the same, except that a
//! regression must hold over the count of gated metrics (Bonferroni: its interval at
//! `1 − alpha/m` excludes no change), so that unchanged rounds fail the gate at most at alpha.

use std::collections::BTreeMap;

use super::stats::paired_interval;
use super::{
    CompareError, CompareOptions, Comparison, Gate, Judgement, Run, Scale, TestKind, compare_unprobed, gate_of,
    note_repeat_units, verdict_of,
};

/// Every run of `runs` as one, its repeats renumbered (round `r`'s repeat `k` becomes
/// `r · stride + k`) so that they stay apart; requests.jsonl only when every run has it.
pub fn merge(runs: &[Run], label: &str) -> Option<Run> {
    let first = runs.first()?;
    let stride = runs.iter().flat_map(|r| r.report.benchmarks.iter().map(|b| b.repeat + 1)).max().unwrap_or(1);
    let mut report = first.report.clone();
    report.benchmarks.clear();
    report.repeats.clear();
    let mut requests = runs.iter().all(|r| r.requests.is_some()).then(BTreeMap::new);
    for (round, run) in runs.iter().enumerate() {
        let offset = round as u32 * stride;
        report.benchmarks.extend(run.report.benchmarks.iter().cloned().map(|mut b| {
            b.repeat += offset;
            b
        }));
        if let (Some(all), Some(mine)) = (requests.as_mut(), &run.requests) {
            for (name, samples) in mine {
                let into: &mut super::Samples = all.entry(name.clone()).or_default();
                into.requests.extend(samples.requests.iter().cloned().map(|mut s| {
                    s.repeat += offset;
                    s
                }));
                into.batches.extend(samples.batches.iter().cloned().map(|mut s| {
                    s.repeat += offset;
                    s
                }));
            }
        }
    }
    Some(Run { label: label.to_string(), dir: first.dir.clone(), report, requests })
}

/// A metric's value in one run: the mean over its repeats of the benchmark.
fn value(run: &Run, benchmark: &str, metric: &str) -> Option<f64> {
    let values: Vec<f64> =
        run.report.benchmarks.iter().filter(|b| b.name == benchmark).filter_map(|b| b.metric(metric)).collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Compares the rounds `(A, B)` of an A/B run: every round's runs merged per side, then every
/// relative metric's interval replaced by the paired interval over the rounds (at least 2).
pub fn compare_rounds(
    rounds: &[(Run, Run)],
    labels: (&str, &str),
    options: &CompareOptions,
) -> Result<Comparison, CompareError> {
    let a: Vec<Run> = rounds.iter().map(|(a, _)| a.clone()).collect();
    let b: Vec<Run> = rounds.iter().map(|(_, b)| b.clone()).collect();
    let (Some(merged_a), Some(merged_b)) = (merge(&a, labels.0), merge(&b, labels.1)) else {
        return Err(CompareError::NothingInCommon { a: String::new(), b: String::new() });
    };
    let (mut c, overruled) = compare_unprobed(&merged_a, &merged_b, options)?;
    // Merged rounds are not repeats of one machine state: the notes of copies still hold.
    let mut paired: Vec<(usize, Vec<f64>, Vec<f64>)> = Vec::new();
    for (i, row) in c.rows.iter_mut().enumerate() {
        if row.judgement.as_ref().is_some_and(|j| j.scale == Scale::Points) {
            continue;
        }
        let pairs: Option<Vec<(f64, f64)>> = rounds
            .iter()
            .map(|(x, y)| Some((value(x, &row.benchmark, &row.metric)?, value(y, &row.benchmark, &row.metric)?)))
            .collect();
        let Some(mut pairs) = pairs else { continue };
        // Rounds that repeat each other exactly (virtual time, one seed) are one sample.
        pairs.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
        pairs.dedup();
        let (va, vb): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
        let Some(interval) = paired_interval(&va, &vb, options.alpha) else { continue };
        let judgement = Judgement::relative(interval, TestKind::Paired, va.len(), "rounds");
        row.verdict = verdict_of(&row.metric, &judgement.interval);
        // The rounds' mean change is the table's change.
        row.relative = Some(interval.estimate);
        let judged = Ok(judgement);
        if row.gate.is_some() {
            row.gate = Some(gate_of(&row.metric, &judged, row.relative, options));
            paired.push((i, va, vb));
        }
        row.judgement = judged.ok();
    }
    // Every gated metric is a chance to fail unchanged rounds, and they are many (latency, TTFT,
    // TPOT, throughput, ...): a regression must hold at alpha over their count (Bonferroni), so
    // that unchanged rounds fail the gate at most at alpha as a whole. A pass needs no
    // correction: every gated metric must pass, each at alpha. Measured before this, on real vLLM
    // (scripts/compare_noise.py): 1 of 5 unchanged A/B windows exited 4, on latency p50 alone.
    let m = paired.len();
    if m > 1 {
        let corrected = options.alpha / m as f64;
        for (i, va, vb) in paired {
            let row = &mut c.rows[i];
            if !matches!(row.gate, Some(Gate::Regression(_))) {
                continue;
            }
            let Some(interval) = paired_interval(&va, &vb, corrected) else { continue };
            let judged = Ok(Judgement::relative(interval, TestKind::Paired, va.len(), "rounds"));
            if !matches!(gate_of(&row.metric, &judged, row.relative, options), Gate::Regression(_)) {
                row.gate = Some(Gate::Inconclusive(format!(
                    "worse alone, but not over the {m} gated metrics: at 1 − alpha/{m} its interval is [{:+.1} %, {:+.1} %], which holds no change; more rounds would decide it",
                    interval.low * 100.0,
                    interval.high * 100.0
                )));
            }
        }
    }
    note_repeat_units(&mut c, &overruled);
    c.notes.push(format!(
        "{} rounds, A and B alternated (A B, B A, …): relative metrics by a paired t over the distinct rounds, a regression at alpha over the {m} gated ones (Bonferroni), shares pooled",
        rounds.len()
    ));
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::Outcome;
    use crate::report::tests::sample_report;

    fn run_with_rps(rps: f64) -> Run {
        let mut report = sample_report();
        for b in &mut report.benchmarks {
            b.requests_per_s = Some(rps);
            (b.counts.submitted, b.counts.completed, b.counts.errors) = (256, 256, 0);
            b.time_series = Default::default();
        }
        Run { label: "r".into(), dir: ".".into(), report, requests: None }
    }

    /// A machine that slows by a fifth over the run, the same for A and B in each round: separate
    /// runs would read it as a change, the rounds see none.
    #[test]
    fn a_drifting_machine_is_paired_away() {
        let speeds = [1.0, 0.95, 0.9, 0.85, 0.8, 0.78];
        // B is 1 % faster than A in every round, well within the 5 % margin.
        let rounds: Vec<(Run, Run)> =
            speeds.iter().map(|s| (run_with_rps(100.0 * s), run_with_rps(101.0 * s))).collect();
        let options = CompareOptions { gates: vec!["requests_per_s".into()], ..CompareOptions::default() };
        let c = compare_rounds(&rounds, ("a", "b"), &options).unwrap();
        let row = c.rows.iter().find(|r| r.metric == "requests_per_s").unwrap();
        let j = row.judgement.as_ref().unwrap();
        assert_eq!((j.test, j.units), (TestKind::Paired, 6.0));
        assert!((j.interval.estimate - 0.01).abs() < 1e-9, "{j:?}");
        assert_eq!(row.gate, Some(Gate::Pass), "{row:?}");
        assert_eq!(c.outcome(), Outcome::Pass);
        // The first A against the last B, as two separate runs would be: a "regression" of −21 %.
        let separate = crate::compare::compare(&rounds[0].0, &rounds[5].1, &options).unwrap();
        let rps = separate.rows.iter().find(|r| r.metric == "requests_per_s").unwrap();
        assert!(rps.relative.unwrap() < -0.15, "{rps:?}");
        // A real change of −20 % in every round is a regression.
        let slower: Vec<(Run, Run)> =
            speeds.iter().map(|s| (run_with_rps(100.0 * s), run_with_rps(80.0 * s))).collect();
        let c = compare_rounds(&slower, ("a", "b"), &options).unwrap();
        assert_eq!(c.outcome(), Outcome::Regression);
    }

    /// A regression holds over every gated metric's chance: rounds 9 % slower but scattered
    /// (paired interval at 95 % [−17.2 %, −1.1 %]) are a regression with one gated metric, and
    /// inconclusive with two (at 97.5 %: [−19.1 %, +0.7 %]).
    #[test]
    fn a_regression_holds_over_the_count_of_gated_metrics() {
        let changes = [-0.02, -0.20, -0.05, -0.15, -0.01, -0.12];
        // One benchmark: each benchmark's gated metric is one more.
        let one = |rps: f64| {
            let mut r = run_with_rps(rps);
            r.report.benchmarks.truncate(1);
            r.report.benchmarks[0].output_tokens_per_s = Some(rps * 10.0);
            r
        };
        let rounds: Vec<(Run, Run)> = changes.iter().map(|c| (one(100.0), one(100.0 * (1.0 + c)))).collect();
        let gated = |gates: &[&str]| {
            let options =
                CompareOptions { gates: gates.iter().map(|g| g.to_string()).collect(), ..CompareOptions::default() };
            let c = compare_rounds(&rounds, ("a", "b"), &options).unwrap();
            let row = c.rows.iter().find(|r| r.metric == "requests_per_s").unwrap().clone();
            (c.outcome(), row)
        };
        let (outcome, row) = gated(&["requests_per_s"]);
        assert_eq!(outcome, Outcome::Regression, "{row:?}");
        let (outcome, row) = gated(&["requests_per_s", "output_tokens_per_s"]);
        assert_eq!(outcome, Outcome::Inconclusive, "{row:?}");
        assert!(
            matches!(&row.gate, Some(Gate::Inconclusive(why)) if why.contains("not over the 2 gated metrics")),
            "{row:?}"
        );
    }
}
