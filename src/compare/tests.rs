use super::*;
use crate::report::tests::sample_report;

/// A run of the sample report; per benchmark `latency_ms` samples when given, each value in a
/// batch of its own.
fn run(label: &str, latency_ms: Option<&[f64]>) -> Run {
    let batches: Option<Vec<(u64, f64)>> =
        latency_ms.map(|v| v.iter().enumerate().map(|(i, &v)| (i as u64, v)).collect());
    run_with_batches(label, batches.as_deref())
}

/// A run of the sample report; per benchmark `latency_ms` samples `(batch, value)` when given.
fn run_with_batches(label: &str, latency_ms: Option<&[(u64, f64)]>) -> Run {
    let report = sample_report();
    let requests = latency_ms.map(|values| {
        report
            .benchmarks
            .iter()
            .map(|b| (b.name.clone(), Samples::from([("latency_ms".to_string(), values.to_vec())])))
            .collect()
    });
    Run { label: label.into(), dir: ".".into(), report, requests }
}

fn row<'c>(c: &'c Comparison, benchmark: &str, metric: &str) -> &'c Row {
    c.rows.iter().find(|r| r.benchmark == benchmark && r.metric == metric).unwrap_or_else(|| panic!("{metric}"))
}

const LATENCIES: [f64; 8] = [110.0, 130.0, 300.0, 350.0, 120.0, 140.0, 310.0, 340.0];

#[test]
fn a_run_against_itself_is_within_noise_or_not_judged() {
    let a = run("a", Some(&LATENCIES));
    let c = compare(&a, &a.clone(), &CompareOptions::default()).unwrap();
    assert!(c.passed());
    assert!(c.only_a.is_empty() && c.only_b.is_empty());
    for r in &c.rows {
        assert_eq!(r.delta, Some(0.0), "{r:?}");
        let kind = r.test.map(|(kind, _)| kind);
        match r.metric.as_str() {
            m if m.starts_with("latency_") && !m.starts_with("latency_per_token") => {
                assert_eq!(kind, Some(TestKind::Bootstrap), "{r:?}")
            }
            "completed" | "errors" | "cancelled" | "incomplete" | "lost" | "anomalies" | "slo_attainment" => {
                assert_eq!(kind, Some(TestKind::Fisher), "{r:?}")
            }
            m if m.ends_with("_flush_share") => assert_eq!(kind, Some(TestKind::Fisher), "{r:?}"),
            "requests_per_s" | "output_tokens_per_s" | "concurrency_mean" => {
                assert_eq!(kind, Some(TestKind::Series), "{r:?}")
            }
            _ => assert!(matches!(r.verdict, Verdict::NotJudged(_)), "one run each: no repeats: {r:?}"),
        }
        if kind.is_some() {
            assert_eq!(r.verdict, Verdict::WithinNoise, "{r:?}");
            // Identical data: nothing to tell apart. Fisher's p sums to 1 up to rounding; a
            // bootstrap's resampled differences fall on both sides of 0 about equally.
            assert!(r.test.is_some_and(|(_, p)| p > 0.9), "{r:?}");
        }
    }
    // Metrics neither run measured have no row.
    assert!(c.rows.iter().all(|r| r.a.is_some() || r.b.is_some()));
    let text = table::render_comparison(&c);
    assert!(text.contains("needs 2+ repeats in each run"), "{text}");
    assert!(text.contains("no gated metric worse by more than 5%"), "{text}");
}

#[test]
fn slower_requests_are_worse_and_a_gated_regression() {
    let a = run("a", Some(&LATENCIES));
    // Four times slower: every B request is slower than every A request.
    let doubled: Vec<f64> = LATENCIES.iter().map(|v| v * 4.0).collect();
    let mut b = run("b", Some(&doubled));
    for bench in &mut b.report.benchmarks {
        let l = &mut bench.distributions.latency;
        for v in [&mut l.mean, &mut l.p50, &mut l.p90, &mut l.p95, &mut l.p99, &mut l.p999, &mut l.min, &mut l.max] {
            *v = v.map(|x| x * 4.0);
        }
    }
    let c = compare(&a, &b, &CompareOptions::default()).unwrap();
    let p50 = row(&c, "throughput", "latency_p50_ms");
    assert_eq!(p50.verdict, Verdict::Worse);
    assert!(p50.test.is_some_and(|(k, p)| k == TestKind::Bootstrap && p < 0.01), "{p50:?}");
    assert!(p50.gated && p50.regression, "{p50:?}");
    assert!(!c.passed());
    // Faster the other way round, and no regression then.
    let c = compare(&b, &a, &CompareOptions::default()).unwrap();
    assert_eq!(row(&c, "throughput", "latency_p50_ms").verdict, Verdict::Better);
    assert!(c.passed());
    // A threshold above the change lets it pass, still worse.
    let lenient = CompareOptions { max_regression: 3.5, ..CompareOptions::default() };
    let c = compare(&a, &b, &lenient).unwrap();
    assert_eq!(row(&c, "throughput", "latency_p50_ms").verdict, Verdict::Worse);
    assert!(c.passed());
    let text = table::render_comparison(&compare(&a, &b, &CompareOptions::default()).unwrap());
    assert!(text.contains("regression(s) beyond 5%"), "{text}");
}

/// Three repeats each: throughput is judged by Welch's t on the repeat values.
#[test]
fn throughput_is_judged_on_repeats() {
    let with_rates = |rates: [f64; 3]| {
        let mut r = run("r", None);
        let one = r.report.benchmarks[0].clone();
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
    assert!(rps.regression && matches!(rps.test, Some((TestKind::Welch, _))), "{rps:?}");
    // Without requests.jsonl, timings fall back to the repeats: equal in every repeat here.
    assert_eq!(row(&c, "throughput", "latency_p50_ms").verdict, Verdict::WithinNoise);
    // Overlapping repeats are within noise.
    let c = compare(&a, &with_rates([4.05, 3.95, 4.1]), &CompareOptions::default()).unwrap();
    assert_eq!(row(&c, "throughput", "requests_per_s").verdict, Verdict::WithinNoise);
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
    assert_eq!(samples["latency_ms"], [(1, 10.0), (3, 30.0)]);
    assert_eq!(samples["ttft_ms"], [(1, 5.0), (3, 15.0)]);
    // One value per batch of measured requests: its dispatch to its last completion.
    assert_eq!(samples["generate_ms"], [(1, 10.0), (3, 30.0)]);
    assert!(!samples.contains_key("tpot_ms"), "a timing no request has gives no samples");

    let jsonl = dir.join(REQUESTS_FILE);
    let mut text = std::fs::read_to_string(&jsonl).unwrap();
    text.push_str("{\"id\": 5, \"phase\": \"measure\"}\n");
    std::fs::write(&jsonl, text).unwrap();
    let err = Run::load(&dir).unwrap_err().to_string();
    assert!(err.contains(&format!("{}:6: not a requests.jsonl record", jsonl.display())), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Counts are judged in batches: one failed batch of 32 among 8 is no evidence (it would be
/// overwhelming as 32 independent requests of 256), a whole failed run is.
#[test]
fn errors_are_counted_in_batches() {
    let with_errors = |errors: u64| {
        let mut r = run("r", None);
        for b in &mut r.report.benchmarks {
            b.counts.submitted = 256;
            (b.counts.completed, b.counts.errors) = (256 - errors, errors);
            (b.batching.batches, b.batching.batch_size_mean) = (8, Some(32.0));
        }
        r
    };
    let errors = |a: u64, b: u64| {
        let c = compare(&with_errors(a), &with_errors(b), &CompareOptions::default()).unwrap();
        row(&c, "throughput", "errors").clone()
    };
    let one_batch = errors(0, 32);
    assert_eq!(one_batch.verdict, Verdict::WithinNoise, "{one_batch:?}");
    assert!(one_batch.test.is_some_and(|(k, p)| k == TestKind::Fisher && p > 0.9), "{one_batch:?}");
    let all = errors(0, 256);
    assert_eq!(all.verdict, Verdict::Worse, "{all:?}");
    assert!(all.regression && all.test.is_some_and(|(_, p)| p < 1e-3), "{all:?}");
    assert_eq!(errors(256, 0).verdict, Verdict::Better);
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
    assert!(matches!(rps.test, Some((TestKind::Series, p)) if p < 1e-6), "{rps:?}");
    assert_eq!(rps.verdict, Verdict::Worse, "{rps:?}");
    assert!(rps.regression, "{rps:?}");
    // The same series: within noise.
    let c = compare(&with_completions(4), &with_completions(4), &CompareOptions::default()).unwrap();
    assert_eq!(row(&c, "throughput", "requests_per_s").verdict, Verdict::WithinNoise);
}
