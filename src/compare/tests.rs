use super::*;
use crate::report::tests::sample_report;

/// A run of the sample report; per benchmark `latency_ms` samples when given, each value in a
/// batch of its own (of `per_batch` requests when given through [`run_with_batches`]).
fn run(label: &str, latency_ms: Option<&[f64]>) -> Run {
    let batches: Option<Vec<(u64, f64)>> =
        latency_ms.map(|v| v.iter().enumerate().map(|(i, &v)| (i as u64, v)).collect());
    run_with_batches(label, batches.as_deref())
}

/// A run of the sample report; per benchmark `latency_ms` samples `(batch, value)` when given,
/// each batch dispatched 1 ms after the one before.
fn run_with_batches(label: &str, latency_ms: Option<&[(u64, f64)]>) -> Run {
    let report = sample_report();
    let requests = latency_ms.map(|values| {
        let samples = Samples {
            requests: values
                .iter()
                .map(|&(batch, v)| {
                    let mut timings = [None; 7];
                    timings[0] = Some(v);
                    Sample {
                        repeat: 0,
                        batch: Some(batch),
                        dispatched_ns: Some(batch * 1_000_000),
                        failed: false,
                        timings,
                    }
                })
                .collect(),
            batches: Vec::new(),
        };
        report.benchmarks.iter().map(|b| (b.name.clone(), samples.clone())).collect()
    });
    Run { label: label.into(), dir: ".".into(), report, requests }
}

fn row<'c>(c: &'c Comparison, benchmark: &str, metric: &str) -> &'c Row {
    c.rows.iter().find(|r| r.benchmark == benchmark && r.metric == metric).unwrap_or_else(|| panic!("{metric}"))
}

fn test_of(r: &Row) -> Option<TestKind> {
    r.judgement.as_ref().map(|j| j.test)
}

const LATENCIES: [f64; 8] = [110.0, 130.0, 300.0, 350.0, 120.0, 140.0, 310.0, 340.0];

#[test]
fn a_run_against_itself_is_within_noise_and_never_a_regression() {
    let a = run("a", Some(&LATENCIES));
    // The sample's errors are above the absolute limit: that alone fails a run against itself.
    let c = compare(&a, &a.clone(), &CompareOptions::default()).unwrap();
    assert!(
        c.regressions().all(|r| r.metric == "errors"
            && matches!(&r.gate, Some(Gate::Regression(why)) if why.contains("--max-error-rate")))
    );
    let c = compare(&a, &a.clone(), &CompareOptions { max_error_rate: 1.0, ..CompareOptions::default() }).unwrap();
    let regressions: Vec<_> = c.regressions().map(|r| (&r.metric, &r.gate)).collect();
    assert_ne!(c.outcome(), Outcome::Regression, "{regressions:?}");
    assert!(c.only_a.is_empty() && c.only_b.is_empty());
    for r in &c.rows {
        assert_eq!(r.delta, Some(0.0), "{r:?}");
        match r.metric.as_str() {
            m if m.starts_with("latency_") && !m.starts_with("latency_per_token") => {
                assert_eq!(test_of(r), Some(TestKind::Bootstrap), "{r:?}")
            }
            "completed" | "errors" | "cancelled" | "incomplete" | "lost" | "anomalies" | "slo_attainment" => {
                assert_eq!(test_of(r), Some(TestKind::Share), "{r:?}")
            }
            m if m.ends_with("_flush_share") => assert_eq!(test_of(r), Some(TestKind::Share), "{r:?}"),
            "requests_per_s" | "output_tokens_per_s" | "concurrency_mean" => {
                assert_eq!(test_of(r), Some(TestKind::Series), "{r:?}")
            }
            _ => assert!(matches!(r.verdict, Verdict::NotJudged(_)), "one run each: no repeats: {r:?}"),
        }
        if let Some(j) = &r.judgement {
            assert_eq!(r.verdict, Verdict::WithinNoise, "{r:?}");
            assert!(j.interval.low <= 0.0 && j.interval.high >= 0.0, "{r:?}");
        }
        assert!(!r.is_regression(), "{r:?}");
    }
    // Metrics neither run measured have no row.
    assert!(c.rows.iter().all(|r| r.a.is_some() || r.b.is_some()));
    let text = table::render_comparison(&c);
    assert!(text.contains("needs 2+ distinct repeats in each run"), "{text}");
}

#[test]
fn slower_requests_are_worse_and_a_gated_regression() {
    let a = run("a", Some(&LATENCIES));
    // Four times slower: every B request is slower than every A request.
    let slower: Vec<f64> = LATENCIES.iter().map(|v| v * 4.0).collect();
    let mut b = run("b", Some(&slower));
    for bench in &mut b.report.benchmarks {
        let l = &mut bench.distributions.latency;
        for v in [&mut l.mean, &mut l.p50, &mut l.p90, &mut l.p95, &mut l.p99, &mut l.p999, &mut l.min, &mut l.max] {
            *v = v.map(|x| x * 4.0);
        }
    }
    let c = compare(&a, &b, &CompareOptions::default()).unwrap();
    let p50 = row(&c, "throughput", "latency_p50_ms");
    assert_eq!(p50.verdict, Verdict::Worse);
    assert_eq!(test_of(p50), Some(TestKind::Bootstrap));
    assert!(p50.gated && p50.is_regression(), "{p50:?}");
    assert_eq!(c.outcome(), Outcome::Regression);
    // Faster the other way round: better, and the gate passes that metric.
    let c = compare(&b, &a, &CompareOptions { max_error_rate: 1.0, ..CompareOptions::default() }).unwrap();
    let p50 = row(&c, "throughput", "latency_p50_ms");
    assert_eq!((&p50.verdict, &p50.gate), (&Verdict::Better, &Some(Gate::Pass)), "{p50:?}");
    assert_ne!(c.outcome(), Outcome::Regression);
    // A margin above the change: still worse, but no regression.
    let lenient = CompareOptions { max_regression: 3.5, ..CompareOptions::default() };
    let c = compare(&a, &b, &lenient).unwrap();
    let p50 = row(&c, "throughput", "latency_p50_ms");
    assert_eq!(p50.verdict, Verdict::Worse);
    assert!(!p50.is_regression(), "{p50:?}");
    let text = table::render_comparison(&compare(&a, &b, &CompareOptions::default()).unwrap());
    assert!(text.contains("regression(s):") && text.contains("\nREGRESSION ("), "{text}");
}

/// Three repeats each: throughput is judged on the repeat values.
#[test]
fn throughput_is_judged_on_repeats() {
    let with_rates = |rates: [f64; 3]| {
        let mut r = run("r", None);
        let mut one = r.report.benchmarks[0].clone();
        one.time_series = Default::default();
        r.report.benchmarks = rates
            .iter()
            .enumerate()
            .map(|(i, &rps)| {
                let mut b = one.clone();
                b.repeat = i as u32;
                b.requests_per_s = Some(rps);
                b
            })
            .collect();
        r
    };
    let a = with_rates([4.0, 4.1, 3.9]);
    let b = with_rates([2.0, 2.1, 1.9]);
    let c = compare(&a, &b, &CompareOptions::default()).unwrap();
    let rps = row(&c, "throughput", "requests_per_s");
    assert_eq!((rps.a, rps.b), (Some(4.0), Some(2.0)));
    assert_eq!(rps.verdict, Verdict::Worse);
    assert!(rps.is_regression() && test_of(rps) == Some(TestKind::Repeats), "{rps:?}");
    // Repeats that differ only in requests_per_s: every timing is one distinct value... no: the
    // repeats are distinct, and their timings equal: an exact interval of 0, a pass.
    assert_eq!(row(&c, "throughput", "latency_p50_ms").gate, Some(Gate::Pass));
    // Overlapping repeats are within noise, and 3 repeats cannot show ±5 %: inconclusive.
    let c = compare(&a, &with_rates([4.6, 3.5, 4.1]), &CompareOptions::default()).unwrap();
    let rps = row(&c, "throughput", "requests_per_s");
    assert_eq!(rps.verdict, Verdict::WithinNoise);
    assert!(matches!(&rps.gate, Some(Gate::Inconclusive(why)) if why.contains("needs about")), "{rps:?}");
    // A metric without a better direction differs rather than improves.
    let mut d = with_rates([4.0, 4.1, 3.9]);
    for (i, bench) in d.report.benchmarks.iter_mut().enumerate() {
        bench.batching.batch_size_mean = Some(10.0 + i as f64 * 0.1);
    }
    assert_eq!(
        row(&compare(&a, &d, &CompareOptions::default()).unwrap(), "throughput", "batch_size_mean").verdict,
        Verdict::Differs
    );
}

/// Byte-identical repeats (virtual time, one seed) are one sample: counted once, and said.
#[test]
fn identical_repeats_count_once() {
    let mut a = run("a", None);
    let one = a.report.benchmarks[0].clone();
    a.report.benchmarks = (0..3)
        .map(|i| {
            let mut b = one.clone();
            b.repeat = i;
            b
        })
        .collect();
    let c = compare(&a, &a.clone(), &CompareOptions::default()).unwrap();
    assert!(c.notes.iter().any(|n| n.contains("3 repeats of throughput are 1 distinct")), "{:?}", c.notes);
    // One distinct repeat: no repeat interval, so the mean input rate is not judged.
    assert!(matches!(row(&c, "throughput", "input_tokens_per_s").verdict, Verdict::NotJudged(_)));
    assert!(table::render_comparison(&c).contains("copies are no evidence"));
}

#[test]
fn bad_comparisons_are_refused() {
    let a = run("a", None);
    let mut b = run("b", None);
    let gate = CompareOptions { gates: vec!["latency_p42_ms".into()], ..CompareOptions::default() };
    assert!(matches!(compare(&a, &b, &gate), Err(CompareError::UnknownGate(g)) if g == "latency_p42_ms"));
    for bench in &mut b.report.benchmarks {
        bench.name.push_str("-other");
    }
    let err = compare(&a, &b, &CompareOptions::default()).unwrap_err();
    assert!(err.to_string().contains("no benchmark in common"), "{err}");
}

#[test]
fn html_is_self_contained_and_escaped() {
    let a = run("a<&>", Some(&LATENCIES));
    let html = html::render_html(&compare(&a, &a.clone(), &CompareOptions::default()).unwrap(), &a, &a);
    assert!(html.to_lowercase().starts_with("<!doctype html>"), "{}", &html[..40]);
    assert!(html.contains("a&lt;&amp;&gt;"));
    assert_eq!(crate::report::html::external_urls(&html), Vec::<String>::new());
    assert!(html.contains("within noise"));
    assert!(html.contains("Latency CDF"), "distributions are charted");
    assert!(html.matches("<svg").count() >= 2 * 4, "four CDFs per benchmark");
}

/// A run read from disk: only the measured, completed requests give samples, by benchmark, and a
/// bad `requests.jsonl` line is refused with its file and line.
#[test]
fn load_samples_measured_completed_requests_only() {
    use crate::report::requests::{MetricsMs, REQUESTS_FILE};
    use crate::report::{Phase, RequestOutcome, RequestRecord, RequestsJsonl, write_json};

    let dir = std::env::temp_dir().join(format!("batchlab-compare-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    write_json(&sample_report(), &dir).unwrap();
    let record = |id: u64, phase: Phase, latency_ms: Option<f64>| {
        let mut r = RequestRecord::unfinished(id, "throughput", phase, RequestOutcome::Incomplete, None, None);
        if let Some(latency_ms) = latency_ms {
            r.outcome = RequestOutcome::Completed;
            // A batch of its own, dispatched at 1 s, done at 1 s + its latency.
            r.batch = Some(id);
            r.dispatched_ns = Some(crate::time::Timestamp::from_nanos(1_000_000_000));
            r.finished_ns = Some(crate::time::Timestamp::from_nanos(1_000_000_000 + (latency_ms * 1e6) as u64));
            r.metrics = Some(MetricsMs {
                latency_ms,
                batch_wait_ms: 1.0,
                engine_queue_ms: None,
                ttft_ms: Some(latency_ms / 2.0),
                tpot_ms: None,
                itl_max_ms: None,
                latency_per_token_ms: None,
                prompt_tokens: Some(4),
                output_tokens: Some(2),
                anomalies: Vec::new(),
            });
        }
        r
    };
    let mut out = RequestsJsonl::create(&dir).unwrap();
    for r in [
        record(0, Phase::Warmup, Some(1.0)),
        record(1, Phase::Measure, Some(10.0)),
        record(2, Phase::Measure, None),
        record(3, Phase::Measure, Some(30.0)),
        record(4, Phase::Cooldown, Some(2.0)),
    ] {
        out.write(&r).unwrap();
    }
    out.finish().unwrap();
    let run = Run::load(&dir).unwrap();
    let samples = &run.requests.as_ref().unwrap()["throughput"];
    let latency: Vec<(Option<u64>, Option<f64>)> = samples.requests.iter().map(|s| (s.batch, s.timings[0])).collect();
    assert_eq!(latency, [(Some(1), Some(10.0)), (Some(3), Some(30.0))], "measured and completed only");
    let ttft: Vec<Option<f64>> = samples.requests.iter().map(|s| s.timings[1]).collect();
    assert_eq!(ttft, [Some(5.0), Some(15.0)]);
    // One value per batch of measured requests: its dispatch to its last completion.
    let generate: Vec<(u64, f64)> = samples.batches.iter().map(|b| (b.batch, b.generate_ms)).collect();
    assert_eq!(generate, [(1, 10.0), (3, 30.0)]);
    assert!(samples.requests.iter().all(|s| s.timings[2].is_none()), "a timing no request has gives no value");

    let jsonl = dir.join(REQUESTS_FILE);
    let mut text = std::fs::read_to_string(&jsonl).unwrap();
    text.push_str("{\"id\": 5, \"phase\": \"measure\"}\n");
    std::fs::write(&jsonl, text).unwrap();
    let err = Run::load(&dir).unwrap_err().to_string();
    assert!(err.contains(&format!("{}:6: not a requests.jsonl record", jsonl.display())), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Errors are judged as users judge them: an absolute limit on B's share, and the change in
/// points, each run at its effective size (here, without requests.jsonl, its generate calls).
#[test]
fn errors_are_judged_against_a_limit_and_in_points() {
    let with_errors = |errors: u64| {
        let mut r = run("r", None);
        for b in &mut r.report.benchmarks {
            b.counts.submitted = 256;
            (b.counts.completed, b.counts.errors) = (256 - errors, errors);
            (b.batching.batches, b.batching.batch_size_mean) = (8, Some(32.0));
        }
        r
    };
    let errors = |a: u64, b: u64, options: &CompareOptions| {
        let c = compare(&with_errors(a), &with_errors(b), options).unwrap();
        row(&c, "throughput", "errors").clone()
    };
    let default = CompareOptions::default();
    // One failed batch of eight: B's error share is at least 2.2 %, above the 0.5 % limit.
    let one_batch = errors(0, 32, &default);
    assert!(
        matches!(&one_batch.gate, Some(Gate::Regression(why)) if why.contains("--max-error-rate")),
        "{one_batch:?}"
    );
    assert_eq!(test_of(&one_batch), Some(TestKind::Share));
    // With a lenient limit, the change in points decides: 1 of 8 cannot be told from chance, nor
    // shown within 1 pp.
    let lenient = CompareOptions { max_error_rate: 0.1, ..CompareOptions::default() };
    let one_batch = errors(0, 32, &lenient);
    assert!(matches!(&one_batch.gate, Some(Gate::Inconclusive(_))), "{one_batch:?}");
    // Every request failed: a regression either way.
    let all = errors(0, 256, &lenient);
    assert_eq!(all.verdict, Verdict::Worse, "{all:?}");
    assert!(all.is_regression(), "{all:?}");
    // From all failed to none: better, and the errors pass.
    let fixed = errors(256, 0, &default);
    assert_eq!((&fixed.verdict, &fixed.gate), (&Verdict::Better, &Some(Gate::Pass)), "{fixed:?}");
    // None against none in 8 batches: no change, but 8 generate calls cannot rule out 1 pp.
    let none = errors(0, 0, &default);
    assert!(matches!(&none.gate, Some(Gate::Inconclusive(why)) if why.contains("needs about")), "{none:?}");
}

/// Exit 0 only when every gated metric passes: one inconclusive gate, nothing regressed, is
/// inconclusive (exit 5), not a pass.
#[test]
fn an_inconclusive_gate_is_not_a_pass() {
    let mut r = run("r", None);
    for b in &mut r.report.benchmarks {
        (b.counts.submitted, b.counts.completed, b.counts.errors) = (256, 256, 0);
        b.batching.batches = 8;
    }
    let options = CompareOptions { gates: vec!["errors".into()], ..CompareOptions::default() };
    let c = compare(&r, &r.clone(), &options).unwrap();
    assert!(c.rows.iter().filter(|r| r.gated).all(|r| matches!(r.gate, Some(Gate::Inconclusive(_)))));
    assert_eq!(c.outcome(), Outcome::Inconclusive);
    // A lenient margin of 40 points: 8 clean batches show that much, and the gate passes.
    let c = compare(&r, &r.clone(), &CompareOptions { max_error_increase: 0.4, ..options }).unwrap();
    assert_eq!(c.outcome(), Outcome::Pass);
}

/// Without repeats, throughput is judged on each run's time series, in blocks of time.
#[test]
fn throughput_of_one_run_is_judged_on_its_time_series() {
    // 1000 intervals of 1 ms; `base + (i % 3)` completions in interval i.
    let with_completions = |base: u64| {
        let mut r = run("r", None);
        for bench in &mut r.report.benchmarks {
            let series = &mut bench.time_series;
            series.completed = (0..series.len() as u64).map(|i| base + i % 3).collect();
            bench.requests_per_s = Some((base as f64 + 1.0) * 1000.0);
        }
        r
    };
    let c = compare(&with_completions(4), &with_completions(3), &CompareOptions::default()).unwrap();
    let rps = row(&c, "throughput", "requests_per_s");
    assert_eq!(test_of(rps), Some(TestKind::Series), "{rps:?}");
    assert_eq!(rps.verdict, Verdict::Worse, "{rps:?}");
    assert!(rps.is_regression(), "{rps:?}");
    // The same series: within noise, and a pass.
    let c = compare(&with_completions(4), &with_completions(4), &CompareOptions::default()).unwrap();
    let rps = row(&c, "throughput", "requests_per_s");
    assert_eq!((&rps.verdict, &rps.gate), (&Verdict::WithinNoise, &Some(Gate::Pass)));
}

/// Where every request is its own batch, the unit is a block of time, not the request: 200
/// requests that each differ by chance are 10 blocks, and a small shift is not "certain".
#[test]
fn requests_that_are_their_own_batches_are_judged_in_blocks_of_time() {
    // 200 single-request batches; latency drifts slowly in blocks (shared state in time).
    let latencies = |shift: f64| -> Vec<(u64, f64)> {
        (0..200u64)
            .map(|i| (i, 100.0 + [0.0, 9.0, 3.0, 7.0, 1.0][(i / 40) as usize] + (i % 7) as f64 + shift))
            .collect()
    };
    let a = run_with_batches("a", Some(&latencies(0.0)));
    let b = run_with_batches("b", Some(&latencies(0.4)));
    let c = compare(&a, &b, &CompareOptions::default()).unwrap();
    let p50 = row(&c, "throughput", "latency_p50_ms");
    let j = p50.judgement.as_ref().unwrap();
    assert_eq!((j.test, j.unit.as_str(), j.units), (TestKind::Bootstrap, "time blocks", 10.0), "{p50:?}");
    assert!(!p50.is_regression(), "{p50:?}");
}

/// More data never weakens a verdict: a regression on the repeats stays one with requests.jsonl.
#[test]
fn requests_jsonl_never_turns_a_regression_into_a_pass() {
    let with = |scale: f64, jsonl: bool| {
        let values: Vec<(u64, f64)> = (0..64u64).map(|i| (i / 8, 100.0 + (i * 37 % 101) as f64)).collect();
        let scaled: Vec<(u64, f64)> = values.iter().map(|&(b, v)| (b, v * scale)).collect();
        let mut r = run_with_batches("r", jsonl.then_some(&scaled[..]));
        let one = r.report.benchmarks[0].clone();
        r.report.benchmarks = (0..3)
            .map(|i| {
                let mut b = one.clone();
                b.repeat = i;
                b.distributions.latency.p50 = Some(150.0 * scale * (1.0 + 0.001 * i as f64));
                b
            })
            .collect();
        r
    };
    for jsonl in [false, true] {
        let c = compare(&with(1.0, jsonl), &with(1.3, jsonl), &CompareOptions::default()).unwrap();
        let p50 = row(&c, "throughput", "latency_p50_ms");
        assert!(p50.is_regression(), "requests.jsonl {jsonl}: {p50:?}");
    }
}

/// A run of two repeats, each 32 batches of 4 requests whose latencies are `level` (per repeat)
/// times a batch's own factor, 1.0 to 1.09, the same in every repeat.
fn two_repeats(levels: [f64; 2]) -> Run {
    let mut r = run("r", None);
    let one = r.report.benchmarks[0].clone();
    let mut requests = Vec::new();
    r.report.benchmarks = (0..2u32)
        .map(|repeat| {
            let level = levels[repeat as usize];
            let mut b = one.clone();
            b.repeat = repeat;
            let mut sum = 0.0;
            for i in 0..128u64 {
                let batch = i / 4;
                let v = level * (1.0 + 0.01 * (batch * 7 % 10) as f64);
                sum += v;
                let mut timings = [None; 7];
                timings[0] = Some(v);
                let dispatched_ns = Some(batch * 1_000_000);
                requests.push(Sample { repeat, batch: Some(batch), dispatched_ns, failed: false, timings });
            }
            b.distributions.latency.mean = Some(sum / 128.0);
            b
        })
        .collect();
    let samples = Samples { requests, batches: Vec::new() };
    r.requests = Some(r.report.benchmarks.iter().map(|b| (b.name.clone(), samples.clone())).collect());
    r
}

/// Where both runs have repeats, and these differ more than their batches allow (a machine that
/// wandered between them), the repeat is the unit, not the batch: a pooled bootstrap over 64
/// batches would read repeats 20 % apart within each run, and B 9 % above A, as a regression.
/// Repeats that agree with their batches keep the batches' narrower interval.
#[test]
fn repeats_that_differ_more_than_their_batches_allow_are_the_unit() {
    let options = CompareOptions::default();
    let c = compare(&two_repeats([100.0, 120.0]), &two_repeats([110.0, 130.0]), &options).unwrap();
    let mean = row(&c, "throughput", "latency_mean_ms");
    assert_eq!(test_of(mean), Some(TestKind::Repeats), "{mean:?}");
    assert!(!mean.is_regression() && mean.verdict == Verdict::WithinNoise, "{mean:?}");
    assert!(
        c.notes.iter().any(|n| n.contains("the repeat is the unit for") && n.contains("latency_mean_ms")),
        "{:?}",
        c.notes
    );
    // The same batches, repeats that agree (0.5 % apart, as their 32 batches' spread allows): the
    // bootstrap over all 64, narrower than the repeats' t on 2 degrees of freedom, and worse.
    let c = compare(&two_repeats([100.0, 100.5]), &two_repeats([120.0, 120.6]), &options).unwrap();
    let mean = row(&c, "throughput", "latency_mean_ms");
    assert_eq!(test_of(mean), Some(TestKind::Bootstrap), "{mean:?}");
    assert_eq!(mean.verdict, Verdict::Worse, "{mean:?}");
    assert!(!c.notes.iter().any(|n| n.contains("the repeat is the unit")), "{:?}", c.notes);
}

/// A machine that slowed between the runs is named, not blamed on the change: a regression
/// between runs whose speed probes differ by more than the margin is inconclusive.
#[test]
fn a_drifting_machine_is_named_not_blamed() {
    use crate::report::MachineProbe;
    let probe = |ms: f64| MachineProbe {
        probe_start_ms: ms,
        probe_end_ms: ms,
        load_start: None,
        load_end: None,
        steal_share: None,
    };
    let a = run("a", Some(&LATENCIES));
    let slower: Vec<f64> = LATENCIES.iter().map(|v| v * 4.0).collect();
    let mut b = run("b", Some(&slower));
    // The report shows what its requests did (the gate's regression needs the table's change
    // beyond the margin too).
    for r in &mut b.report.benchmarks {
        scale_summary(&mut r.distributions.latency, 4.0);
    }
    let options = CompareOptions { max_error_rate: 1.0, ..CompareOptions::default() };
    let (mut a_probed, mut b_probed) = (a.clone(), b.clone());
    a_probed.report.environment.machine = Some(probe(20.0));
    b_probed.report.environment.machine = Some(probe(20.4));
    // Probes within the margin (+2 %): the regression stands.
    let c = compare(&a_probed, &b_probed, &options).unwrap();
    assert!(row(&c, "throughput", "latency_p50_ms").is_regression());
    // The machine 25 % slower: even a fourfold latency is inconclusive (a server suffers more from
    // contention than the probe shows), and the drift is named.
    b_probed.report.environment.machine = Some(probe(25.0));
    let c = compare(&a_probed, &b_probed, &options).unwrap();
    let p50 = row(&c, "throughput", "latency_p50_ms");
    assert!(matches!(&p50.gate, Some(Gate::Inconclusive(why)) if why.contains("drifted by +25.0 %")), "{p50:?}");
    assert_eq!(c.outcome(), Outcome::Inconclusive);
    assert!(table::render_comparison(&c).contains("the machine drifted by +25.0 %"));
    // Without probes (virtual time), nothing to say.
    b.report.environment.machine = None;
    assert!(row(&compare(&a, &b, &options).unwrap(), "throughput", "latency_p50_ms").is_regression());
}

/// Under continuous admission the engine's step is the batch (~228 requests of 256 in one step on
/// vLLM): a run is about one batch, so the unit is a block of time, never the step.
#[test]
fn continuous_admission_is_judged_in_blocks_of_time() {
    // 256 requests in 2 "batches" (the engine's steps), dispatched one by one over time.
    let values: Vec<(u64, f64)> = (0..256u64).map(|i| (i / 128, 100.0 + (i % 17) as f64)).collect();
    let mut a = run_with_batches("a", Some(&values));
    for (i, s) in a.requests.as_mut().unwrap().values_mut().flat_map(|s| s.requests.iter_mut()).enumerate() {
        s.dispatched_ns = Some((i as u64 % 256) * 1_000_000);
        s.timings[5] = s.timings[0].map(|v| v / 50.0);
    }
    for b in &mut a.report.benchmarks {
        b.batching.steps = 2;
    }
    let c = compare(&a, &a.clone(), &CompareOptions { max_error_rate: 1.0, ..CompareOptions::default() }).unwrap();
    let j = row(&c, "throughput", "batch_wait_p50_ms").judgement.clone().unwrap();
    assert_eq!((j.test, j.unit.as_str(), j.units), (TestKind::Bootstrap, "time blocks", 10.0), "{j:?}");
    // The requests' own timings at the server: the run is their unit (the waves; see
    // phase_timings_of_overlapping_requests_are_judged_by_the_run).
    assert!(matches!(row(&c, "throughput", "latency_p50_ms").verdict, Verdict::NotJudged(_)));
}

/// Every value of a report's summary of one timing (not its count or std) times `factor`, as a
/// run whose requests took that much longer would report it.
fn scale_summary(s: &mut crate::metrics::distribution::Summary, factor: f64) {
    for v in [&mut s.mean, &mut s.p50, &mut s.p90, &mut s.p95, &mut s.p99, &mut s.p999, &mut s.min, &mut s.max] {
        *v = v.map(|x| x * factor);
    }
}

/// A run of 200 requests, each its own batch, dispatched 1 ms apart, whose TTFT (and largest gap
/// between tokens, a quarter of it) is `scale` times a fixed pattern, the report's TTFT summary
/// scaled alike, at `in_flight` requests at once.
fn phase_run(label: &str, scale: f64, in_flight: u64) -> Run {
    let ttft = |i: u64| (40.0 + (i % 13) as f64) * scale;
    let values: Vec<(u64, f64)> = (0..200u64).map(|i| (i, 250.0 + (i % 7) as f64)).collect();
    let mut r = run_with_batches(label, Some(&values));
    for s in r.requests.as_mut().unwrap().values_mut() {
        for (i, x) in s.requests.iter_mut().enumerate() {
            x.timings[1] = Some(ttft(i as u64));
            x.timings[3] = Some(ttft(i as u64) / 4.0);
        }
    }
    r.report.scenario =
        serde_json::json!({ "name": "phase", "batching": { "batch_size": 1, "max_in_flight": in_flight } });
    for b in &mut r.report.benchmarks {
        scale_summary(&mut b.distributions.ttft, scale);
    }
    r
}

/// Requests that overlap at a continuously batching server fall into waves that hold for a run
/// and differ between runs (unchanged runs of scenarios/http.toml against `batchlab serve`: TTFT
/// p50 +7.3 %, its time-block interval [+3.0 %, +8.5 %]; latency p99 +5.5 % [+1.8 %, +6.1 %]). So
/// their per-request timings are judged by the run (the repeats), never by one run's blocks of
/// time; one request at a time has no waves, and its blocks judge them.
#[test]
fn phase_timings_of_overlapping_requests_are_judged_by_the_run() {
    let options = CompareOptions { max_error_rate: 1.0, ..CompareOptions::default() };
    let slower = 1.3;
    // One request at a time: a +30 % TTFT is a regression, judged in blocks of time.
    let c = compare(&phase_run("a", 1.0, 1), &phase_run("b", slower, 1), &options).unwrap();
    let ttft = row(&c, "throughput", "ttft_p50_ms");
    assert!(ttft.is_regression(), "{ttft:?}");
    assert_eq!(ttft.judgement.as_ref().map(|j| j.unit.as_str()), Some("time blocks"));
    // 32 in flight: the same change is not judged from one run each, nor is the latency; the gate
    // says why and what decides it, and throughput is still judged in blocks of time.
    let c = compare(&phase_run("a", 1.0, 32), &phase_run("b", slower, 32), &options).unwrap();
    let ttft = row(&c, "throughput", "ttft_p50_ms");
    assert!(matches!(&ttft.verdict, Verdict::NotJudged(why) if why.contains("waves")), "{ttft:?}");
    assert!(
        matches!(&ttft.gate, Some(Gate::Inconclusive(why)) if why.contains("--repeat N") && why.contains("batchlab ab")),
        "{ttft:?}"
    );
    let latency = row(&c, "throughput", "latency_p99_ms");
    assert!(matches!(&latency.verdict, Verdict::NotJudged(why) if why.contains("latency's tail")), "{latency:?}");
    assert_eq!(test_of(row(&c, "throughput", "requests_per_s")), Some(TestKind::Series));
    // With repeats, the repeats judge it: a run is a unit.
    let repeated = |label: &str, scale: f64| {
        let mut r = phase_run(label, scale, 32);
        let mut second: Vec<_> = r.report.benchmarks.clone();
        for b in &mut second {
            b.repeat = 1;
            b.distributions.ttft.p50 = b.distributions.ttft.p50.map(|x| x * 1.01);
        }
        r.report.benchmarks.extend(second);
        r
    };
    let c = compare(&repeated("a", 1.0), &repeated("b", slower), &options).unwrap();
    let ttft = row(&c, "throughput", "ttft_p50_ms");
    assert_eq!(test_of(ttft), Some(TestKind::Repeats), "{ttft:?}");
    assert!(ttft.is_regression(), "{ttft:?}");
}

/// requests.jsonl keeps each request's largest gap between tokens: its values give the run's
/// largest gap, not the p50 or mean of all gaps that the table shows.
#[test]
fn only_the_largest_gap_between_tokens_is_judged_from_requests() {
    let c = compare(&phase_run("a", 1.0, 1), &phase_run("b", 1.0, 1), &CompareOptions::default()).unwrap();
    assert_eq!(test_of(row(&c, "throughput", "itl_max_ms")), Some(TestKind::Bootstrap));
    for metric in ["itl_p50_ms", "itl_mean_ms", "itl_p99_ms"] {
        let r = row(&c, "throughput", metric);
        assert!(matches!(&r.verdict, Verdict::NotJudged(why) if why.contains("largest gap")), "{r:?}");
    }
}

/// The gate's regression needs the table's change beyond the margin, not only the interval's own
/// estimate (nearest-rank quantiles of requests.jsonl can put it a hair past): a row that reads
/// +4.98 % at a 5 % margin is no regression.
#[test]
fn a_change_the_table_shows_inside_the_margin_is_no_regression() {
    let options = CompareOptions::default();
    let interval = stats::Interval { estimate: 0.0503, low: 0.005, high: 0.067 };
    let judged: judge::Judged = Ok(Judgement::relative(interval, TestKind::Bootstrap, 10, "time blocks"));
    assert!(matches!(gate_of("ttft_p99_ms", &judged, Some(0.0498), &options), Gate::Inconclusive(_)));
    assert!(matches!(gate_of("ttft_p99_ms", &judged, Some(0.0503), &options), Gate::Regression(_)));
}
