//! What a report says about a remote engine (an HTTP engine's boundary, mocked in virtual time):
//! dispatch delay and the client-lag validity warning, per-endpoint results with the time to
//! recover from an endpoint that fails mid-run, and where token counts came from. Public API only.

use std::sync::Arc;
use std::time::Duration;

use batchlab::engine::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats, FinishReason, RemoteError,
    RemoteErrorKind, Started, TimedEngine, TokenCountSource, VirtualTimeEngine,
};
use batchlab::report::{Report, RequestOutcome, read_records, render_html};
use batchlab::run::{RunOptions, RunSummary, run_with_blocking};
use batchlab::scenario::Scenario;
use batchlab::scenario::plan::Comparison;
use batchlab::time::{Clock, VirtualClock};

/// A remote engine in virtual time: batch `k` goes to `endpoints[k % len]`, is sent `send_after`
/// after our dispatch and answered 10 ms later; from batch `fails_from` on, endpoint `http://b`
/// refuses connections.
struct RemoteMock {
    clock: Arc<dyn Clock>,
    send_after: Duration,
    endpoints: &'static [&'static str],
    fails_from: Option<u64>,
    batches: u64,
}

impl RemoteMock {
    fn new(send_after: Duration, endpoints: &'static [&'static str], fails_from: Option<u64>) -> Self {
        RemoteMock { clock: Arc::new(VirtualClock::new()), send_after, endpoints, fails_from, batches: 0 }
    }
}

impl Engine for RemoteMock {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("remote-mock", "0").into())
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let k = self.batches;
        self.batches += 1;
        let endpoint = self.endpoints[(k % self.endpoints.len() as u64) as usize];
        if endpoint == "http://b" && self.fails_from.is_some_and(|from| k >= from) {
            self.clock.sleep(Duration::from_millis(2));
            return Err(EngineError::Remote(RemoteError::new(
                RemoteErrorKind::ConnectFailed,
                endpoint,
                "connection refused",
            )));
        }
        let sent = self.clock.now().as_secs_f64() + self.send_after.as_secs_f64();
        self.clock.sleep(self.send_after + Duration::from_millis(10));
        let mut stats = EngineStats::default();
        stats.sent_ts = Some(sent);
        stats.first_token_ts = Some(sent + 0.004);
        stats.last_token_ts = Some(sent + 0.010);
        stats.endpoint = Some(endpoint.to_owned());
        stats.token_count_source =
            Some(if endpoint == "http://b" { TokenCountSource::Chunks } else { TokenCountSource::Usage });
        Ok(batch
            .iter()
            .map(|r| {
                EngineOutput::new(Some(r.id), FinishReason::Length)
                    .with_prompt_tokens(16)
                    .with_output_tokens(r.max_tokens)
                    .with_stats(stats.clone())
            })
            .collect())
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

impl VirtualTimeEngine for RemoteMock {
    fn use_virtual_clock(&mut self, clock: VirtualClock) {
        self.clock = Arc::new(clock);
    }
}

/// 40 requests at 20/s (one every 50 ms), one per batch, a CI gate on the client's lag.
fn run(engine: RemoteMock, options: RunOptions) -> RunSummary {
    let plan = Scenario::builder()
        .sim_virtual()
        .synthetic(16, 8)
        .batch_size(1)
        .profile_constant(&[20.0])
        .max_requests(40)
        .expect("client_lag_p99_ms", Comparison::Le, 10.0)
        .build()
        .unwrap();
    run_with_blocking(&plan, TimedEngine::virtual_time(engine), options).unwrap()
}

fn warnings(report: &Report) -> Vec<String> {
    report.benchmarks.iter().flat_map(|b| b.validity_warnings.iter().map(|w| w.kind.clone())).collect()
}

#[test]
fn a_client_that_sends_late_gets_a_validity_warning_and_one_on_time_does_not() {
    let on_time = run(RemoteMock::new(Duration::ZERO, &["http://a"], None), RunOptions::quiet());
    let b = &on_time.report.benchmarks[0];
    assert_eq!(b.counts.completed, 40);
    assert_eq!((b.dispatch.engine_sent, b.metric("client_lag_max_ms")), (40, Some(0.0)));
    // One request per batch, dispatched at its submit: no delay at all.
    assert_eq!(b.metric("dispatch_delay_max_ms"), Some(0.0));
    assert!(warnings(&on_time.report).is_empty());
    assert!(on_time.report.passed(), "client_lag_p99_ms <= 10 holds");
    assert!(!on_time.table.contains("validity warning"), "{}", on_time.table);

    // The engine sends each request 30 ms after our dispatch (say, waiting for a connection).
    let late = run(RemoteMock::new(Duration::from_millis(30), &["http://a"], None), RunOptions::quiet());
    let b = &late.report.benchmarks[0];
    assert_eq!(b.metric("client_lag_p50_ms"), b.metric("client_lag_max_ms"));
    assert!((b.metric("client_lag_p99_ms").unwrap() - 30.0).abs() < 0.05, "{:?}", b.dispatch);
    assert!((b.metric("dispatch_delay_p99_ms").unwrap() - 30.0).abs() < 0.05);
    assert_eq!(warnings(&late.report), ["client_lag"]);
    assert!(!late.report.passed(), "the [expect] on the client's lag fails");
    let line = format!("validity warning: {}: the client fell behind its own schedule", b.label());
    assert!(late.table.contains(&line), "{}", late.table);
    let html = render_html(&late.report);
    assert!(html.contains("<span class=\"badge bad\">1 validity warning</span>"));
}

#[test]
fn an_endpoint_that_dies_mid_run_fails_its_own_requests_and_the_run_recovers_on_the_other() {
    let dir = std::env::temp_dir().join(format!("batchlab-report-remote-{}", std::process::id()));
    let options = RunOptions { output_dir: Some(dir.clone()), requests_jsonl: true, ..RunOptions::quiet() };
    // Batches alternate a, b, a, b, ...; b refuses from batch 10 on: its batches 11, 13, ..., 39.
    let summary = run(RemoteMock::new(Duration::ZERO, &["http://a", "http://b"], Some(10)), options);
    let b = &summary.report.benchmarks[0];
    assert_eq!((b.counts.completed, b.counts.errors, b.counts.lost), (25, 15, 0));
    assert_eq!(b.metric("errors_connect_failed"), Some(15.0));
    let [a_result, b_result] = b.endpoints.as_slice() else { panic!("two endpoints: {:?}", b.endpoints) };
    assert_eq!(a_result.endpoint, "http://a");
    assert_eq!((a_result.requests, a_result.completed, a_result.errors, &a_result.failures), (20, 20, 0, &None));
    assert!((a_result.latency.p50.unwrap() - 10.0).abs() < 0.05, "{:?}", a_result.latency);
    assert!((a_result.ttft.p99.unwrap() - 4.0).abs() < 0.01, "{:?}", a_result.ttft);
    assert_eq!((b_result.requests, b_result.completed, b_result.errors), (20, 5, 15));
    assert_eq!(b_result.errors_by_kind.get("connect_failed"), Some(&15));
    let f = b_result.failures.as_ref().expect("b failed");
    // Batch 11 was submitted at 550 ms and refused 2 ms later; batch 12 (on a) was sent at 600 ms
    // and completed at 610 ms: 58 ms without a success once the failure showed.
    assert_eq!((f.episodes, f.unrecovered), (1, false));
    assert!((f.began_s - 0.552).abs() < 1e-6, "{f:?}");
    assert!((f.time_to_recover_s.unwrap() - 0.058).abs() < 1e-6, "{f:?}");
    assert_eq!(
        b.token_count_sources,
        [("chunks".to_string(), 5), ("usage".to_string(), 20)].into_iter().collect(),
        "a's counts from usage, b's from chunks"
    );
    let sources = format!("(token counts of {}: 5 from chunks, 20 from usage)", b.label());
    assert!(summary.table.contains(&sources), "{}", summary.table);
    assert!(summary.table.contains("per endpoint"), "{}", summary.table);
    let html = render_html(&summary.report);
    assert!(html.contains("<h3>Endpoints</h3>") && html.contains("connect_failed=15"));

    // requests.jsonl names the endpoint of every request, served or failed.
    let records: Vec<_> = read_records(&dir.join("requests.jsonl")).unwrap().collect::<Result<_, _>>().unwrap();
    let on = |endpoint: &str, outcome: RequestOutcome| {
        records.iter().filter(|r| r.endpoint.as_deref() == Some(endpoint) && r.outcome == outcome).count()
    };
    let refused = RequestOutcome::Error { kind: "connect_failed".into() };
    assert_eq!((on("http://a", RequestOutcome::Completed), on("http://b", refused)), (20, 15));
    assert!(records.iter().all(|r| r.intended_ns.is_some()), "every row has its intended arrival");
    std::fs::remove_dir_all(&dir).unwrap();
}
