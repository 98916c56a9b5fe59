//! `batchlab calibrate` from a URL, proved on a server whose costs we chose: `batchlab serve`
//! with a known profile (a frontend overhead and a `max_num_seqs` below the design's largest
//! concurrency included) on 127.0.0.1, calibrated from its URL only. The fitted costs come back
//! within a stated tolerance, the hidden limit is estimated and said so, and every design point's
//! residual (measured against replayed on the fitted profile) is under 5 %. The costs are
//! milliseconds, so the machine's scheduling noise (tenths of one) stays small beside them.

use std::path::Path;
use std::process::Command;

use batchlab::engine::sim::profile::{Coefficients, Profile};
use batchlab::engine::sim::{DEFAULT_SCHEDULER, profile::Provenance};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

/// The costs the server runs with, ns: a 4 ms step, 20 µs a prompt token, 0.5 ms a sequence,
/// a 15 ms frontend for a request alone (2 ms of its worker, which serves one request at a time,
/// and a 13 ms hop); at most 6 sequences run at once.
fn known() -> Profile {
    let mut engine = DEFAULT_SCHEDULER;
    engine.max_num_seqs = 6;
    Profile {
        coefficients: Coefficients {
            frontend_overhead_ns: Some(13e6),
            frontend_per_request_ns: Some(2e6),
            ..Coefficients::from_array([0.0, 0.0, 4e6, 20e3, 0.5e6, 0.0, 0.0, 0.0, 0.0])
        },
        engine,
        fit: Default::default(),
        residuals: Default::default(),
        provenance: Provenance { engine_name: "chosen".into(), ..Provenance::default() },
    }
}

/// Relative tolerance on each recovered step cost.
const TOLERANCE: f64 = 0.10;

/// What the served HTTP path may add to the recovered frontend, ns.
const HTTP_PATH_NS: f64 = 2.5e6;

#[test]
fn a_served_profile_is_recovered_from_its_url() {
    let dir = std::env::temp_dir().join(format!("batchlab-calibrate-url-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let truth = known();
    truth.write(&dir.join("known.toml")).unwrap();
    let serve_scenario =
        format!("name = \"known\"\n[engine.sim]\nprofile = \"{}\"\n", dir.join("known.toml").display());
    let server = Server::start(Some(&serve_scenario), &[]);

    let scenario = format!(
        r#"name = "url"
seed = 7
[engine]
kind = "openai"
[engine.openai]
urls = ["{}"]
model = "{MODEL}"
api = "completions"
timeout = "60s"
[workload]
source = "synthetic"
prompt_tokens = 32
output_tokens = 16
vocab_size = 4000
ignore_eos = true
[stop]
max_requests = 8
"#,
        server.url
    );
    std::fs::write(dir.join("url.toml"), scenario).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["calibrate", "url.toml", "--output", "fitted.toml", "--quiet"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}\n{stderr}");
    assert!(out.status.success(), "{stdout}\n{stderr}");

    let fitted = Profile::load(&dir.join("fitted.toml")).unwrap();
    let (got, want) = (&fitted.coefficients, &truth.coefficients);
    for (name, g, w) in [
        ("decode_step", got.decode_step_ns, want.decode_step_ns),
        ("prefill_per_token", got.prefill_per_token_ns, want.prefill_per_token_ns),
        ("per_seq", got.per_seq_ns, want.per_seq_ns),
    ] {
        assert!((g - w).abs() <= w * TOLERANCE, "{name}: fitted {g} ns, true {w} ns\n{stdout}");
    }
    // The frontend a client sees is the profile's plus the server's own HTTP path (parsing, the
    // hop to the engine thread, its wake-up: 1 to 1.7 ms measured here), which a twin must
    // include too.
    // The frontend's worker, found from the waves: its 2 ms and what of the server's own path
    // from the socket to its engine thread is serial (0.5 to 2 ms found on a server with no
    // worker of its own). A request alone pays the hop and one service.
    let service = got.frontend_per_request_ns.unwrap_or(0.0);
    let true_service = want.frontend_per_request_ns.unwrap();
    assert!(
        service >= true_service - HTTP_PATH_NS / 4.0 && service <= true_service + HTTP_PATH_NS,
        "frontend_per_request: fitted {service} ns, true {true_service} ns\n{stdout}"
    );
    let alone = |c: &Coefficients| c.frontend_overhead_ns.unwrap() + c.frontend_per_request_ns.unwrap_or(0.0);
    let (g, w) = (alone(got), alone(want));
    assert!(g >= w - HTTP_PATH_NS / 4.0 && g <= w + HTTP_PATH_NS, "frontend: fitted {g} ns, true {w} ns\n{stdout}");
    // No context cost in the truth: what the fit gives it stays below a tenth of a step per 1000.
    assert!(got.context_per_1k_tokens_ns < 0.4e6, "{got:?}");
    // The hidden limit: estimated from the steps, and said so in the profile and the printout.
    assert_eq!(fitted.engine.max_num_seqs, 6, "{stdout}");
    let http = fitted.fit.http.as_ref().expect("a fit from a URL says so");
    let seqs = http.estimated.iter().find(|e| e.key == "max_num_seqs").unwrap();
    assert_eq!(seqs.source, "estimated");
    assert!(stdout.contains("engine.max_num_seqs") && stdout.contains("ESTIMATED"), "{stdout}");
    // Every design point's residual is under 5 %, its TPOT replays within 5 % of what the client
    // measured, and its TTFT within 10 % (how many of a wave's requests reach the engine before
    // the step it starts on the first is what the frontend's queue decides; real-time jitter of a
    // millisecond moves it a little, run to run).
    assert_eq!(http.points.len(), batchlab::calibrate::url::URL_DESIGN.len());
    for p in &http.points {
        assert!(p.steps >= 10, "{}: {} steps\n{stdout}", p.name, p.steps);
        assert!(p.residual < 0.05, "{}: residual {:.1} %\n{stdout}", p.name, p.residual * 100.0);
        let tpot = (p.predicted_tpot_ms - p.measured_tpot_ms).abs() / p.measured_tpot_ms;
        assert!(tpot < 0.05, "{}: TPOT replayed {:.1} % off\n{stdout}", p.name, tpot * 100.0);
        let ttft = (p.predicted_ttft_ms - p.measured_ttft_ms).abs() / p.measured_ttft_ms;
        assert!(ttft < 0.10, "{}: TTFT replayed {:.1} % off\n{stdout}", p.name, ttft * 100.0);
        assert!(stdout.contains(&format!("point {}", p.name)), "{stdout}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
