//! `[workload.sessions]` end to end: `check` refuses bad session settings at their line;
//! scenarios/sessions.toml on the simulator, in virtual time: every turn carries the previous
//! prompt and its reply, the prefix cache hits more with each turn, think times have their mean,
//! and a seed gives the same report byte for byte.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use batchlab::report::{RequestOutcome, RequestRecord, read_records};
use batchlab::run::{RunOptions, RunSummary, run_blocking};
use batchlab::scenario::{Overrides, load_file, parse_str};

fn sessions_toml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/sessions.toml")
}

/// The error text of `source` (read as `scenarios/bad.toml`).
fn problems(source: &str) -> String {
    match parse_str(source, "scenarios/bad.toml", Path::new("scenarios"), &Overrides::default()) {
        Ok(_) => panic!("expected problems in:\n{source}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts `text` has a problem at `line` that says `says`.
fn at_line(text: &str, line: usize, says: &str) {
    let place = format!("--> scenarios/bad.toml:{line}:");
    assert!(
        text.split("error: ").any(|problem| problem.contains(&place) && problem.contains(says)),
        "no problem at line {line} saying {says:?} in:\n{text}"
    );
}

const SESSIONS: &str = "[workload]\nprompt_tokens = 100\noutput_tokens = 50\n[workload.sessions]\n";

#[test]
fn check_refuses_bad_session_settings_at_their_line() {
    at_line(&problems(&format!("{SESSIONS}turns = 0\n")), 5, "`workload.sessions.turns`");
    at_line(&problems(&format!("{SESSIONS}turns = {{ dist = \"fixed\", value = 0 }}\n")), 5, "value");
    at_line(&problems(&format!("{SESSIONS}think_time = \"-2s\"\n")), 5, "`workload.sessions.think_time`");
    // The first turn is up to 100 + 50 tokens: 149 is below it, 150 is not.
    let text = problems(&format!("{SESSIONS}turns = 3\nmax_context_tokens = 149\n"));
    at_line(&text, 6, "`workload.sessions.max_context_tokens` (149) is below the first turn: up to 150 tokens");
    let ok = format!("{SESSIONS}max_context_tokens = 150\n");
    parse_str(&ok, "scenarios/good.toml", Path::new("scenarios"), &Overrides::default()).unwrap();
    // A system prompt counts too (20 bytes: 5 tokens).
    let chat = "[workload]\nchat = true\nsystem_prompt = \"You are a good bot.\"\nprompt_tokens = 100\n\
                output_tokens = 50\n[workload.sessions]\nmax_context_tokens = 150\n";
    at_line(&problems(chat), 7, "(150) is below the first turn: up to 155 tokens");
    at_line(&problems(&format!("{SESSIONS}next_turn = \"soon\"\n")), 5, "next_turn");
    at_line(&problems(&format!("{SESSIONS}turn = 3\n")), 5, "unknown key `turn`");
    // A text file has no conversations to replay: at the sessions' table.
    let text_file = format!(
        "[workload]\nsource = \"file\"\npath = \"{}\"\nformat = \"text\"\n[workload.sessions]\nturns = 2\n",
        sessions_toml().display()
    );
    at_line(&problems(&text_file), 5, "`workload.format = \"text\"` has none");
    // An embedding replies with no text to chain: sessions are refused at their table, naming
    // the api (and vLLM's pooling runner alike).
    let embeddings = "[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"http://127.0.0.1:8000\"]\n\
                      api = \"embeddings\"\n[workload]\nprompt_tokens = 100\n[workload.sessions]\nturns = 2\n";
    at_line(&problems(embeddings), 8, "but `engine.openai.api` is \"embeddings\", which replies with no text");
    let pooling = "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"m\"\nengine_args = { runner = \"pooling\" }\n\
                   [workload]\nprompt_tokens = 100\n[workload.sessions]\nturns = 2\n";
    at_line(&problems(pooling), 8, "`runner = \"pooling\"` (`LLM.embed`), which replies with no text");
}

fn run(path: &Path, dir: &Path) -> (RunSummary, Vec<RequestRecord>) {
    let plan = load_file(path, &Overrides::default()).unwrap();
    let options = RunOptions { output_dir: Some(dir.to_owned()), requests_jsonl: true, ..RunOptions::default() };
    let summary = run_blocking(&plan, options).unwrap();
    let records = read_records(&dir.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    (summary, records)
}

#[test]
fn the_sessions_scenario_chains_its_turns_hits_more_with_each_and_is_reproducible() {
    let dir = std::env::temp_dir().join(format!("batchlab-sessions-{}", std::process::id()));
    let (summary, records) = run(&sessions_toml(), &dir);
    let report = std::fs::read(dir.join("report.json")).unwrap();
    let b = &summary.report.benchmarks[0];
    assert_eq!((b.counts.completed, b.counts.lost), (800, 0));

    // Every session's turns, in order: turn k's prompt is turn k-1's prompt, its reply and the
    // new user turn (32 to 128 tokens), by the engine's own counts.
    let mut sessions: BTreeMap<u64, Vec<&RequestRecord>> = BTreeMap::new();
    for r in &records {
        assert_eq!(r.outcome, RequestOutcome::Completed);
        sessions.entry(r.session.expect("every request is a turn")).or_default().push(r);
    }
    let mut chained = 0;
    for (session, turns) in &sessions {
        for (k, pair) in turns.windows(2).enumerate() {
            let (before, after) = (pair[0], pair[1]);
            assert_eq!((before.turn, after.turn), (Some(k as u32), Some(k as u32 + 1)), "session {session}");
            let (m0, m1) = (before.metrics.as_ref().unwrap(), after.metrics.as_ref().unwrap());
            let carried = m0.prompt_tokens.unwrap() + m0.output_tokens.unwrap();
            assert_eq!(after.history_tokens, Some(carried), "session {session} turn {}", k + 1);
            let user = m1.prompt_tokens.unwrap() - carried;
            assert!((32..=128).contains(&user), "session {session} turn {}: a user turn of {user}", k + 1);
            // The next turn went only once the reply was complete.
            assert!(after.submitted_ns.unwrap() >= before.finished_ns.unwrap());
            chained += 1;
        }
    }
    assert!(chained > 500, "{chained} chained turns");

    // `levels = [16]` counts active sessions, thinking ones included: never more than 16 are
    // between their first submit and their last outcome, and 16 are at some time.
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for turns in sessions.values() {
        edges.push((turns[0].submitted_ns.unwrap().as_nanos(), 1));
        edges.push((turns.last().unwrap().finished_ns.unwrap().as_nanos(), -1));
    }
    edges.sort();
    let most = edges.iter().scan(0, |open, (_, d)| {
        *open += d;
        Some(*open)
    });
    assert_eq!(most.max(), Some(16));

    // The prefix cache serves more of each later turn.
    let s = b.sessions.as_ref().expect("a sessions result");
    let rates: Vec<f64> = s.by_turn.iter().map(|t| t.cache_hit_rate.unwrap()).collect();
    assert_eq!(rates[0], 0.0, "a first turn shares nothing");
    assert!(rates.windows(2).all(|w| w[1] > w[0]), "hit rate by turn: {rates:?}");
    assert_eq!(s.started, s.completed + s.failed + s.cut + s.unfinished);
    assert!(s.cut > 0 && s.failed == 0, "{s:?}");

    // Think times: the gaps between a reply and the next turn, with the configured mean (2 s).
    let gaps: Vec<f64> = sessions
        .values()
        .flat_map(|t| {
            t.windows(2)
                .map(|p| p[1].submitted_ns.unwrap().saturating_since(p[0].finished_ns.unwrap()).as_nanos() as f64)
        })
        .collect();
    let mean_s = gaps.iter().sum::<f64>() / gaps.len() as f64 / 1e9;
    assert!((mean_s - 2.0).abs() <= 0.1, "mean think time {mean_s} s over {} gaps", gaps.len());
    let drawn = s.think_time_mean_ms.unwrap();
    assert!((drawn - 2000.0).abs() <= 100.0, "drawn mean {drawn} ms");
    // Think time is not client lag.
    assert_eq!(b.metric("client_lag_max_ms"), Some(0.0));
    assert!(b.validity_warnings.is_empty(), "{:?}", b.validity_warnings);

    // The same seed: the same report, byte for byte (but for the run's machine and version).
    let again = std::env::temp_dir().join(format!("batchlab-sessions-again-{}", std::process::id()));
    let (_, records_again) = run(&sessions_toml(), &again);
    assert_eq!(records_again, records);
    let strip = |bytes: &[u8]| {
        let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        // The machine's description and the version differ between machines, not runs.
        v.as_object_mut().unwrap().remove("environment");
        serde_json::to_string(&v).unwrap()
    };
    assert_eq!(strip(&std::fs::read(again.join("report.json")).unwrap()), strip(&report));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&again).unwrap();
}

/// `next_turn = "rate_tick"` under a constant rate: every request, a new session's first turn or
/// a queued turn, goes at one of the profile's arrivals (i / rate after the start), a turn only
/// after its reply and think time, and a queued turn before any new session.
#[test]
fn rate_tick_sends_queued_turns_at_the_profiles_arrivals_before_new_sessions() {
    let text = std::fs::read_to_string(sessions_toml()).unwrap();
    let text = text
        .replace("next_turn = \"after_reply\"", "next_turn = \"rate_tick\"")
        .replace("think_time_dist = \"exponential\"", "think_time_dist = \"fixed\"")
        .replace("kind = \"concurrent\"\nlevels = [16]", "kind = \"constant\"\nrates = [20.0]")
        .replace("max_requests = 800", "max_requests = 400");
    assert!(text.contains("rate_tick") && text.contains("rates = [20.0]") && text.contains("\"fixed\""));
    // Every think time is 2 s: a turn is ready 2 s after its reply.
    let ready = |before: &RequestRecord| before.finished_ns.unwrap().as_nanos() + 2_000_000_000;
    let dir = std::env::temp_dir().join(format!("batchlab-sessions-tick-{}", std::process::id()));
    let plan = parse_str(&text, "scenarios/tick.toml", Path::new("scenarios"), &Overrides::default()).unwrap();
    let options = RunOptions { output_dir: Some(dir.clone()), requests_jsonl: true, ..RunOptions::default() };
    let summary = run_blocking(&plan, options).unwrap();
    let records: Vec<RequestRecord> = read_records(&dir.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(records.len(), 400);
    let start = records.iter().map(|r| r.submitted_ns.unwrap().as_nanos()).min().unwrap();
    // 20/s: one arrival each 50 ms; in virtual time each request goes exactly at one.
    for r in &records {
        let offset = r.submitted_ns.unwrap().as_nanos() - start;
        assert_eq!(offset % 50_000_000, 0, "request {} at {offset} ns", r.id);
    }
    let mut sessions: BTreeMap<u64, Vec<&RequestRecord>> = BTreeMap::new();
    for r in &records {
        sessions.entry(r.session.unwrap()).or_default().push(r);
    }
    let mut later_turns = 0;
    for turns in sessions.values() {
        for pair in turns.windows(2) {
            // Queued at the reply plus think time: it cannot go before.
            assert!(pair[1].submitted_ns.unwrap().as_nanos() >= ready(pair[0]));
            later_turns += 1;
        }
    }
    assert!(later_turns > 150, "{later_turns} turns after a first");
    // A queued turn goes before a new session: a session only starts when no turn was waiting,
    // so no first turn goes while a later turn's think time had ended and it had not gone.
    for first in sessions.values().map(|t| t[0]) {
        let at = first.submitted_ns.unwrap();
        let waiting = sessions
            .values()
            .flat_map(|t| t.windows(2))
            .any(|p| ready(p[0]) <= at.as_nanos() && p[1].submitted_ns.unwrap() > at);
        assert!(!waiting, "session {} started while a turn was queued", first.session.unwrap());
    }
    let s = summary.report.benchmarks[0].sessions.as_ref().unwrap();
    assert!(s.started < 400 && s.completed > 0, "{s:?}");
}
