//! `[workload.sessions]` on vLLM (`just test-vllm`): against a real `vllm serve` of the tiny
//! model, behind two recording endpoints, each turn carries the previous turn's messages and the
//! reply vLLM streamed, byte for byte, and `routing = "session_affinity"` with `X-Session-ID`
//! keeps each session on one endpoint of the two; in-process (scenarios/vllm-sessions.toml), the
//! history goes through the chat template and vLLM's prefix cache serves more of later turns.
//! Built with `--features vllm` only, as every vLLM test: `just test` needs no Python.

#![cfg(feature = "vllm")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use batchlab::report::{RequestOutcome, RequestRecord, read_records};
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, load_file, parse_str};

#[path = "common/python_env.rs"]
mod python_env;
#[path = "common/recording.rs"]
mod recording;
#[path = "common/vllm_serve.rs"]
mod vllm_serve;
use recording::{Recording, check_chains};
use vllm_serve::{MODEL, VllmServer};

/// One vLLM at a time: the machine has two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-vllm-sessions-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(plan_text: Option<&str>, path: &Path, out: &Path) -> (batchlab::run::RunSummary, Vec<RequestRecord>) {
    let plan = match plan_text {
        Some(text) => parse_str(text, "vllm-sessions-http.toml", Path::new("."), &Overrides::default()).unwrap(),
        None => load_file(path, &Overrides::default()).unwrap(),
    };
    let options = RunOptions { output_dir: Some(out.to_owned()), requests_jsonl: true, ..RunOptions::default() };
    let summary = run_blocking(&plan, options).unwrap();
    let records: Vec<_> = read_records(&out.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    let failed: Vec<_> = records.iter().filter(|r| r.outcome != RequestOutcome::Completed).collect();
    assert!(failed.is_empty(), "{failed:?}");
    (summary, records)
}

#[test]
fn each_turn_carries_vllm_serves_exact_reply_and_a_session_stays_on_one_endpoint_of_two() {
    if !python_env::ready(true) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = dir("serve");
    let server = VllmServer::start(&dir, &[]);
    let upstream = server.url.clone();
    let (a, b) = (
        Recording::start(MODEL, "x-session-id", Some(upstream.clone())),
        Recording::start(MODEL, "x-session-id", Some(upstream)),
    );
    let text = format!(
        "name = \"vllm-sessions-http\"\nseed = 34\n[engine]\nkind = \"openai\"\n[engine.openai]\n\
         urls = [\"{}\", \"{}\"]\nmodel = \"{MODEL}\"\napi = \"chat\"\nrouting = \"session_affinity\"\n\
         [batching]\nbatch_size = 1\nmax_in_flight = 4\n[workload]\nchat = true\n\
         system_prompt = \"You are a helpful assistant.\"\nprompt_tokens = {{ dist = \"uniform\", min = 8, max = 24 }}\n\
         output_tokens = {{ dist = \"uniform\", min = 8, max = 16 }}\n[workload.sessions]\nturns = 3\n\
         max_context_tokens = 200\n[profile]\nkind = \"concurrent\"\nlevels = [4]\n[stop]\nmax_requests = 24\n",
        a.url, b.url
    );
    let (_, records) = run(Some(&text), Path::new("."), &dir.join("out"));
    assert_eq!(records.len(), 24);
    let (seen_a, seen_b) = (a.seen(), b.seen());
    let (sessions_a, chained_a) = check_chains(&seen_a);
    let (sessions_b, chained_b) = check_chains(&seen_b);
    assert!(sessions_a >= 2 && sessions_b >= 2, "both endpoints serve sessions: {sessions_a}, {sessions_b}");
    assert!(chained_a + chained_b >= 12, "{chained_a} + {chained_b} chained turns");
    assert!(seen_a.iter().chain(&seen_b).all(|s| !s.reply.is_empty()), "vLLM replied with text");
    // Session s on endpoint s mod 2, every turn of it.
    for (seen, parity) in [(&seen_a, 0), (&seen_b, 1)] {
        for s in seen {
            let session: u64 = s.session.as_deref().unwrap().parse().unwrap();
            assert_eq!(session % 2, parity, "session {session}");
        }
    }
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_vllm_sessions_scenario_runs_the_history_through_the_chat_template_in_process() {
    if !python_env::ready(true) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = dir("in-process");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/vllm-sessions.toml");
    let (summary, records) = run(None, &path, &dir.join("out"));
    assert!(summary.report.passed(), "{}", batchlab::report::render_failures(&summary.report.expectations));
    let mut sessions: BTreeMap<u64, Vec<&RequestRecord>> = BTreeMap::new();
    for r in &records {
        sessions.entry(r.session.unwrap()).or_default().push(r);
    }
    let mut chained = 0;
    for (session, turns) in &sessions {
        for pair in turns.windows(2) {
            let (m0, m1) = (pair[0].metrics.as_ref().unwrap(), pair[1].metrics.as_ref().unwrap());
            // vLLM's own count: the last prompt, its reply and a new user turn, templated.
            let carried = m0.prompt_tokens.unwrap() + m0.output_tokens.unwrap();
            assert!(
                m1.prompt_tokens.unwrap() > carried,
                "session {session}: {} after {carried}",
                m1.prompt_tokens.unwrap()
            );
            chained += 1;
        }
    }
    assert!(chained >= 12, "{chained} chained turns");
    let s = summary.report.benchmarks[0].sessions.as_ref().expect("a sessions result");
    let rates: Vec<Option<f64>> = s.by_turn.iter().map(|t| t.cache_hit_rate).collect();
    assert!(rates.len() == 3 && rates[1] > rates[0] && rates[2] > rates[0], "hit rate by turn: {rates:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
