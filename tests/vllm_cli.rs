//! vLLM's EngineCore and worker processes never outlive batchlab: not on a normal exit, not on
//! Ctrl-C (once: drain and report; twice: leave at once), not when the engine fails to start.
//!
//! Each case runs the real binary on `scenarios/vllm-cpu.toml` (or `vllm-faults.toml`) in multiprocess mode, in its own
//! process group, and afterwards looks for any process still in that group. Run with
//! `just test-vllm`; without the venv and model the tests fail, unless `BATCHLAB_SKIP_PYTHON=1`
//! asks to skip them (tests/common/python_env.rs). The tests of the engine's guarantees run once
//! per admission mode (`name::batch`, `name::continuous`: `engine.vllm.admission`).
#![cfg(feature = "vllm")]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use batchlab::engine::python::vllm::Admission;
use batchlab::engine::python::{batchlab_home, default_venv};
use batchlab::report::requests::MetricsMs;
use batchlab::report::{Phase, RequestOutcome, RequestRecord, read_records};

#[path = "common/python_env.rs"]
mod python_env;

#[path = "common/hf_chat.rs"]
mod hf_chat;

#[macro_use]
#[path = "common/admission.rs"]
mod admission;

/// Long enough for a multiprocess engine start on a loaded 2-core machine.
const START_LIMIT: Duration = Duration::from_secs(300);

struct Run {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Vec<String>,
}

/// One engine at a time on a 2-core machine: every test here holds this while it runs.
static ONE_ENGINE: Mutex<()> = Mutex::new(());

fn one_engine() -> MutexGuard<'static, ()> {
    ONE_ENGINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

both_admissions!(
    engine_processes_never_outlive_batchlab,
    batch_faults_around_the_real_engine,
    engine_processes_killed_mid_generate,
    the_in_process_engine_times_every_request_and_counts_vllms_tokens,
);

/// `scenarios/vllm-cpu.toml` in multiprocess mode with one warmup request, `admission`, and `extra`.
fn spawn(admission: Admission, extra: &[&str], output: &Path) -> Run {
    let mut args = vec!["--set", "engine.vllm.in_process=false", "--set", "warmup.requests=1"];
    args.extend_from_slice(extra);
    spawn_scenario(admission, "scenarios/vllm-cpu.toml", &args, output)
}

fn spawn_scenario(admission: Admission, scenario: &str, extra: &[&str], output: &Path) -> Run {
    let mut args: Vec<String> = vec!["run".into(), scenario.into(), "--output".into(), output.display().to_string()];
    for e in admission::sets(admission).iter().chain(extra) {
        args.push((*e).into());
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(&args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("VLLM_ENABLE_V1_MULTIPROCESSING")
        .env_remove("OMP_NUM_THREADS")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawning batchlab");
    let (tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Run { child, lines, stderr: Vec::new() }
}

impl Run {
    /// Waits for a stderr line containing `needle`.
    fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + START_LIMIT;
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_secs(1)) {
                let hit = line.contains(needle);
                self.stderr.push(line);
                if hit {
                    return;
                }
            }
        }
        panic!("no `{needle}` within {START_LIMIT:?}; stderr tail:\n{}", self.tail());
    }

    /// [`wait_for`](Self::wait_for), unless a line read already contains `needle`.
    fn seen_or_wait_for(&mut self, needle: &str) {
        if !self.stderr.iter().any(|line| line.contains(needle)) {
            self.wait_for(needle);
        }
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        // An error means the child is already gone; `finish` reports its status.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig);
    }

    fn finish(&mut self) -> ExitStatus {
        self.finish_within(START_LIMIT)
    }

    fn finish_within(&mut self, limit: Duration) -> ExitStatus {
        // Waits on batchlab's exit itself (its pidfd), reading stderr lines as they come.
        let exited = batchlab::sys::wait_for_any_exit(&[self.child.id() as i32], limit);
        while let Ok(line) = self.lines.try_recv() {
            self.stderr.push(line);
        }
        assert!(exited, "batchlab did not exit within {limit:?}; stderr tail:\n{}", self.tail());
        let status = self.child.wait().expect("wait");
        // The last lines, until the pipe closes (bounded: a leftover process may hold it open).
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.stderr.push(line);
        }
        status
    }

    fn tail(&self) -> String {
        self.stderr[self.stderr.len().saturating_sub(30)..].join("\n")
    }

    /// Live (non-zombie) processes left in batchlab's process group.
    fn leftovers(&self) -> Vec<String> {
        let group = self.child.id() as i32;
        let mut left = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            let Some(close) = stat.rfind(')') else { continue };
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            // fields: state ppid pgrp ...
            if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(group) && fields[0] != "Z" {
                left.push(stat[..close + 1].to_string());
            }
        }
        left
    }
}

impl Drop for Run {
    /// A failed assertion must not leave a wedged batchlab and its engine behind.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

fn output_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-vllm-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn ready() -> bool {
    python_env::ready(true)
}

fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).expect("report.json")).expect("json")
}

/// `scenarios/vllm-chat.toml` end to end: the ShareGPT sample's conversations through the tiny
/// model's chat template in vLLM. Every request's `prompt_tokens` in requests.jsonl is exactly what
/// Hugging Face's `apply_chat_template` gives for its conversation: the engine's count, template
/// included.
#[test]
fn chat_scenario_reports_the_engines_templated_prompt_counts() {
    use batchlab::engine::Prompt;
    use batchlab::loadgen::Workload;
    use batchlab::scenario::{Overrides, load_file};

    if !ready() {
        return;
    }
    let _one = one_engine();
    let dir = output_dir("chat");
    let mut run = spawn_scenario(Admission::Batch, "scenarios/vllm-chat.toml", &[], &dir);
    let status = run.finish();
    assert!(status.success(), "{status}; stderr tail:\n{}", run.tail());
    let r = report(&dir);
    assert_eq!(r["benchmarks"][0]["counts"]["completed"], 60, "{}", r["benchmarks"][0]["counts"]);
    assert_eq!((r["dataset"]["entries"].as_u64(), r["dataset"]["prompts"].as_u64()), (Some(30), Some(30)));

    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/vllm-chat.toml");
    let plan = load_file(&scenario, &Overrides::default()).expect("scenario");
    let workload = Workload::from_plan(plan.workload()).expect("workload");
    let cases: Vec<_> = (0..30)
        .map(|k| match workload.request(k).prompt {
            Prompt::Chat(c) => (c.messages, None),
            other => panic!("conversation {k} is not a chat prompt: {other:?}"),
        })
        .collect();
    let expected = hf_chat::chat_lengths(&batchlab_home().join("tiny-llama"), &cases);
    let rows = std::fs::read_to_string(dir.join("requests.jsonl")).expect("requests.jsonl");
    let mut checked = 0;
    for row in rows.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a json row")) {
        let id = row["id"].as_u64().expect("id");
        let (templated, raw) = expected[(id % 30) as usize];
        assert_eq!(row["prompt_tokens"].as_u64(), Some(templated as u64), "request {id}: {row}");
        assert!(templated > raw, "request {id}: the template's own tokens are counted");
        checked += 1;
    }
    assert_eq!(checked, 60, "every request has a row");
    let (t, raw) = expected[0];
    eprintln!("CHAT: conversation 0: {t} prompt tokens through the template, {raw} for its contents alone");
}

/// One test, cases in sequence: one engine at a time on a 2-core machine.
fn engine_processes_never_outlive_batchlab(admission: Admission) {
    if !ready() {
        return;
    }
    let _one = one_engine();

    // A normal run to completion.
    let dir = output_dir(&format!("normal-{}", admission.name()));
    let mut run = spawn(admission, &["--set", "stop.max_requests=8", "--set", "expect.completed=8"], &dir);
    let status = run.finish();
    assert_eq!(status.code(), Some(0), "stderr tail:\n{}", run.tail());
    assert_eq!(run.leftovers(), Vec::<String>::new(), "after a normal exit");
    assert_eq!(report(&dir)["benchmarks"][0]["counts"]["completed"], 8);

    // One Ctrl-C while measuring: drain, write a report marked incomplete, exit 130.
    let dir = output_dir(&format!("ctrl-c-{}", admission.name()));
    let mut run = spawn(admission, &["--set", "stop.max_requests=100000"], &dir);
    run.wait_for("measuring");
    run.signal(nix::sys::signal::Signal::SIGINT);
    let status = run.finish();
    assert_eq!(status.code(), Some(130), "stderr tail:\n{}", run.tail());
    assert_eq!(run.leftovers(), Vec::<String>::new(), "after one Ctrl-C");
    let r = report(&dir);
    assert_eq!(r["incomplete"], true);
    assert_eq!(r["benchmarks"][0]["counts"]["lost"], 0);

    // Two Ctrl-C: leave at once, still without leftovers.
    let dir = output_dir(&format!("ctrl-c-twice-{}", admission.name()));
    let mut run = spawn(admission, &["--set", "stop.max_requests=100000"], &dir);
    run.wait_for("measuring");
    run.signal(nix::sys::signal::Signal::SIGINT);
    // The second Ctrl-C once the first was handled (two at once may arrive as one signal).
    run.wait_for("interrupted: no new requests");
    run.signal(nix::sys::signal::Signal::SIGINT);
    let status = run.finish();
    assert_eq!(status.code(), Some(130), "stderr tail:\n{}", run.tail());
    assert_eq!(run.leftovers(), Vec::<String>::new(), "after two Ctrl-C");

    // The engine fails while starting (an argument vLLM rejects once its processes exist).
    let dir = output_dir(&format!("start-error-{}", admission.name()));
    let mut run = spawn(admission, &["--set", "engine.vllm.max_model_len=100000000"], &dir);
    let status = run.finish();
    assert_eq!(status.code(), Some(1), "stderr tail:\n{}", run.tail());
    assert_eq!(run.leftovers(), Vec::<String>::new(), "after a failed start");
}

/// The error counts of the first benchmark, by kind.
fn errors_of(r: &serde_json::Value, kind: &str) -> u64 {
    r["benchmarks"][0]["counts"]["errors_by_kind"][kind].as_u64().unwrap_or(0)
}

/// `scenarios/vllm-faults.toml`'s batch faults, injected around the real engine, with the
/// EngineCore kill postponed past the end of the run: every expectation but the kill's holds.
/// The faults count the engine's calls: batches of 8, or, with continuous admission, hand-overs
/// of one request.
fn batch_faults_around_the_real_engine(admission: Admission) {
    if !ready() {
        return;
    }
    let _one = one_engine();
    let dir = output_dir(&format!("batch-faults-{}", admission.name()));
    let later = ["--set", "faults.kill_engine={ after_batches = 1000000 }", "--set", "expect.errors_engine_died=0"];
    let mut run = spawn_scenario(admission, "scenarios/vllm-faults.toml", &later, &dir);
    let status = run.finish();
    assert_eq!(status.code(), Some(0), "stderr tail:\n{}", run.tail());
    assert_eq!(run.leftovers(), Vec::<String>::new());
    let r = report(&dir);
    let counts = &r["benchmarks"][0]["counts"];
    assert_eq!(counts["lost"], 0);
    assert_eq!(counts["submitted"], 160);
    // The 8 warmup requests are the first calls, the 160 measured ones the next: every third call
    // fails, every fifth (unless it failed: fail_batch comes first) comes back one output short.
    let per_call = match admission {
        Admission::Batch => 8,
        Admission::Continuous => 1,
    };
    let measured = (8 / per_call + 1)..=((8 + 160) / per_call);
    let failed = measured.clone().filter(|k| k % 3 == 0).count() as u64;
    let short = measured.filter(|k| k % 5 == 0 && k % 3 != 0).count() as u64;
    if admission == Admission::Batch {
        // Calls 3, 6, ..., 21 fail, 5, 10, 20 (not 15) come back short.
        assert_eq!((failed, short), (7, 3));
    }
    assert_eq!(errors_of(&r, "engine_error"), failed * per_call, "{counts}");
    assert_eq!(errors_of(&r, "output_count_mismatch"), short * per_call, "{counts}");
    assert_eq!(counts["completed"], 160 - (failed + short) * per_call, "{counts}");
}

/// The whole scenario: the EngineCore is SIGKILLed mid-generate. batchlab fails the in-flight
/// batch and every queued request as `engine_died`, writes an incomplete report and exits 1,
/// with no request lost and no process left, within 10 s of the kill. Then the same with a worker
/// killed instead. Needs batchlab's own process watch (vLLM itself would block in `LLM.generate` for ever).
/// With continuous admission the faults count hand-overs of one request: the kill comes after 13
/// batches' worth of them (104), so that, as with batches, requests completed and short outputs
/// came back before it.
fn engine_processes_killed_mid_generate(admission: Admission) {
    if !ready() {
        return;
    }
    let _one = one_engine();
    let after = match admission {
        Admission::Batch => 13,
        Admission::Continuous => 13 * 8,
    };
    let kill_engine = format!("faults.kill_engine={{ after_batches = {after} }}");
    let kill_worker = format!("faults.kill_worker={{ after_batches = {after} }}");
    let engine_killed = ["--set", kill_engine.as_str()];
    let worker_instead = ["--set", "faults.kill_engine={ after_batches = 1000000 }", "--set", kill_worker.as_str()];
    for (case, extra) in [("kill-engine", &engine_killed[..]), ("kill-worker", &worker_instead[..])] {
        let dir = output_dir(&format!("{case}-{}", admission.name()));
        let mut run = spawn_scenario(admission, "scenarios/vllm-faults.toml", extra, &dir);
        run.wait_for("measuring");
        // 13 batches of the tiny model and then the kill; a hang is what this must rule out. With
        // continuous admission the 13 calls are hand-overs of one request: the kill may come
        // before measuring does.
        run.seen_or_wait_for("injected fault: sent SIGKILL");
        let killed = Instant::now();
        let status = run.finish_within(Duration::from_secs(10));
        eprintln!("{case}: exited {:.2?} after the kill", killed.elapsed());
        assert_eq!(status.code(), Some(1), "{case}: stderr tail:\n{}", run.tail());
        let process = if case == "kill-engine" { "VLLM::EngineCore" } else { "VLLM::Worker" };
        assert!(
            run.stderr.iter().any(|l| l.contains("engine died") && l.contains(process)),
            "{case}: the death names {process}; stderr tail:\n{}",
            run.tail()
        );
        assert!(run.stderr.iter().any(|l| l.contains("engine.log")), "{case}: the log's tail is shown");
        assert_eq!(run.leftovers(), Vec::<String>::new(), "{case}: processes left");
        let r = report(&dir);
        assert_eq!(r["incomplete"], true, "{case}");
        let counts = &r["benchmarks"][0]["counts"];
        assert_eq!(counts["lost"], 0, "{case}: {counts}");
        assert!(errors_of(&r, "engine_died") > 0, "{case}: {counts}");
        let answered =
            ["completed", "errors", "cancelled"].iter().map(|k| counts[k].as_u64().unwrap_or(0)).sum::<u64>();
        assert_eq!(Some(answered), counts["submitted"].as_u64(), "{case}: {counts}");
        let expectations = r["expectations"].as_array().expect("expectations");
        let failed: Vec<_> = expectations.iter().filter(|e| e["passed"] != true).collect();
        assert!(failed.is_empty(), "{case}: {failed:?}");
    }
}

/// Lines of vLLM's own output (its log format, Python warnings, C++ warnings), which belong in
/// engine.log and never on batchlab's stderr.
fn engine_noise(line: &str) -> bool {
    ["INFO", "WARNING", "Warning", "(EngineCore", "(Worker", "[W ", "tcmalloc", "NUMA"].iter().any(|n| line.contains(n))
}

/// The engine's output goes to `<output>/engine.log`, piped and under a pseudo-terminal: stderr
/// (and, under the pty, the terminal) holds batchlab's lines only, and `-v` streams the engine's.
#[test]
fn the_engine_is_quiet_and_its_log_kept() {
    if !ready() {
        return;
    }
    let _one = one_engine();
    let small = ["--set", "stop.max_requests=32", "--set", "warmup.requests=1", "--set", "expect.completed=32"];

    // Piped.
    let dir = output_dir("quiet-piped");
    let out = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", "scenarios/vllm-cpu.toml", "--output"])
        .arg(&dir)
        .args(small)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("batchlab");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr:\n{stderr}");
    let noise: Vec<_> = stderr.lines().filter(|l| engine_noise(l)).collect();
    assert!(noise.is_empty(), "engine output on stderr: {noise:?}");
    assert!(!stderr.contains('\u{1b}'), "escape codes in piped output:\n{stderr}");
    let log = std::fs::read_to_string(dir.join("engine.log")).expect("engine.log");
    assert!(log.contains("INFO") && log.contains("vllm"), "vLLM's start-up lines are in engine.log:\n{log}");

    // Under a pseudo-terminal (`script` gives the run one and copies it to its stdout).
    let dir = output_dir("quiet-pty");
    let command = format!(
        "{} run scenarios/vllm-cpu.toml --output {} {}",
        env!("CARGO_BIN_EXE_batchlab"),
        dir.display(),
        small.join(" ")
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux)");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "under a pty:\n{screen}");
    let noise: Vec<_> = screen.lines().filter(|l| engine_noise(l)).collect();
    assert!(noise.is_empty(), "engine output on the terminal: {noise:?}");
    assert!(screen.contains("throughput"), "the display and the table are on the terminal:\n{screen}");
    let log = std::fs::read_to_string(dir.join("engine.log")).expect("engine.log");
    assert!(log.contains("INFO") && log.contains("vllm"), "vLLM's start-up lines are in engine.log:\n{log}");

    // `-v`: the engine's output is streamed, and no engine.log is written.
    let dir = output_dir("verbose");
    let out = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", "scenarios/vllm-cpu.toml", "-v", "--output"])
        .arg(&dir)
        .args(small)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("batchlab");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr:\n{stderr}");
    assert!(stderr.lines().any(engine_noise), "-v streams vLLM's lines:\n{stderr}");
    assert!(!dir.join("engine.log").exists());
}

/// vLLM's own counters, read from the Prometheus files its in-process engine kept in `dir`
/// (`PROMETHEUS_MULTIPROC_DIR`): the tokens its scheduler generated, the requests it finished and
/// the prompt tokens it read. Counted by vLLM step by step, independently of the outputs batchlab
/// reads and counts.
fn vllm_counters(dir: &Path) -> (u64, u64, u64) {
    let script = "import sys\n\
        from prometheus_client import CollectorRegistry, multiprocess\n\
        r = CollectorRegistry()\n\
        multiprocess.MultiProcessCollector(r, path=sys.argv[1])\n\
        total = {}\n\
        for m in r.collect():\n\
        \x20   for s in m.samples:\n\
        \x20       total[s.name] = total.get(s.name, 0) + s.value\n\
        names = ['vllm:generation_tokens_total', 'vllm:request_success_total', 'vllm:prompt_tokens_total']\n\
        print(*(int(total.get(n, -1)) for n in names))\n";
    let out = Command::new(default_venv().join("bin/python"))
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("the venv's python");
    assert!(out.status.success(), "reading vLLM's counters: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<i64> = text.split_whitespace().map(|n| n.parse().expect("a count")).collect();
    assert!(
        numbers.len() == 3 && numbers.iter().all(|&n| n >= 0),
        "vLLM kept no counters in {}: {text}",
        dir.display()
    );
    (numbers[0] as u64, numbers[1] as u64, numbers[2] as u64)
}

/// The in-process engine end to end through the CLI: every request has its TTFT and inter-token
/// times, and batchlab's token counts are vLLM's own. vLLM counts, besides these requests, the
/// request `VllmEngine.start` sends to warm the engine up: 3 prompt tokens, 1 generated.
fn the_in_process_engine_times_every_request_and_counts_vllms_tokens(admission: Admission) {
    if !ready() {
        return;
    }
    let _one = one_engine();
    let dir = output_dir(&format!("in-process-{}", admission.name()));
    let metrics = dir.join("prometheus");
    std::fs::create_dir_all(&metrics).expect("the metrics dir");
    let args = [
        "run",
        "scenarios/vllm-cpu.toml",
        "--output",
        dir.to_str().expect("utf-8 path"),
        "--set",
        "engine.vllm.in_process=true",
        "--set",
        "batching.batch_size=8",
        "--set",
        "workload.prompt_tokens=32",
        "--set",
        "workload.output_tokens=16",
        "--set",
        "warmup.requests=4",
        "--set",
        "stop.max_requests=24",
        "--set",
        "expect.completed=24",
        "--set",
        "output.requests_jsonl=true",
    ];
    // The admission's own `--set`s last: continuous admission hands over one request at a time.
    let args: Vec<&str> = args.into_iter().chain(admission::sets(admission)).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PROMETHEUS_MULTIPROC_DIR", &metrics)
        .env_remove("VLLM_ENABLE_V1_MULTIPROCESSING")
        .output()
        .expect("batchlab");
    assert!(out.status.success(), "stderr:\n{}", String::from_utf8_lossy(&out.stderr));

    let rows: Vec<RequestRecord> = read_records(&dir.join("requests.jsonl"))
        .and_then(|records| records.collect())
        .unwrap_or_else(|e| panic!("{e}"));
    let completed: Vec<(&RequestRecord, &MetricsMs)> = rows
        .iter()
        .filter(|r| r.outcome == RequestOutcome::Completed)
        .map(|r| (r, r.metrics.as_ref().expect("a completed request's metrics")))
        .collect();
    assert_eq!(completed.len(), rows.len(), "every request completes: {rows:?}");
    assert_eq!(completed.iter().filter(|(r, _)| r.phase == Phase::Measure).count(), 24);
    let tokens = |(r, m): &(&RequestRecord, &MetricsMs)| {
        u64::from(m.output_tokens.unwrap_or_else(|| panic!("no output_tokens: {r:?}")))
    };
    for c in &completed {
        let (r, m) = c;
        assert_eq!(tokens(c), 16, "ignore_eos: every request generates output_tokens: {r:?}");
        for (field, value) in
            [("ttft_ms", m.ttft_ms), ("tpot_ms", m.tpot_ms), ("latency_per_token_ms", m.latency_per_token_ms)]
        {
            assert!(value.is_some_and(|v| v > 0.0), "{field} missing or not positive: {r:?}");
        }
        assert!(m.ttft_ms.is_some_and(|ttft| ttft <= m.latency_ms), "TTFT after the latency: {r:?}");
        assert!(m.anomalies.is_empty(), "{r:?}");
        // Per-token times only with continuous admission: offline vLLM times the first and last.
        let itl_max = m.itl_max_ms.filter(|&v| v > 0.0);
        assert_eq!(itl_max.is_some(), admission == Admission::Continuous, "{admission:?}: itl_max_ms of {r:?}");
    }

    // batchlab's totals: the report's measured ones, and every completed request's.
    let report = report(&dir);
    let benchmark = &report["benchmarks"][0];
    let itl = &benchmark["distributions"]["itl"];
    let batching = &benchmark["batching"];
    match admission {
        Admission::Batch => {
            assert_eq!(itl["count"], 0, "offline vLLM gives no per-token times: {itl}");
            assert_eq!(batching["steps"], 0, "{batching}");
        }
        Admission::Continuous => {
            // Every gap between two tokens of a measured request: 15 each.
            assert_eq!(itl["count"].as_u64(), Some(24 * 15), "itl is present: {itl}");
            assert!(itl["p50"].as_f64().is_some_and(|p50| p50 > 0.0), "{itl}");
            // The batches are vLLM's steps, each what it served.
            let steps = batching["steps"].as_u64().unwrap_or(0);
            assert!(steps > 0 && batching["batches"].as_u64() == Some(steps), "{batching}");
            let (prefill, decode) = (batching["prefill_mean"].as_f64(), batching["decode_mean"].as_f64());
            let mean = batching["batch_size_mean"].as_f64().expect("a mean step size");
            assert!(
                prefill.zip(decode).is_some_and(|(p, d)| p > 0.0 && d > 0.0 && (p + d - mean).abs() < 1e-9),
                "{batching}"
            );
        }
    }
    let measured: u64 = completed.iter().filter(|(r, _)| r.phase == Phase::Measure).map(tokens).sum();
    assert_eq!(report["benchmarks"][0]["tokens"]["output"].as_u64(), Some(measured), "report vs requests.jsonl");
    let all: u64 = completed.iter().map(tokens).sum();
    let prompts: u64 = completed.iter().map(|(_, m)| u64::from(m.prompt_tokens.expect("prompt_tokens"))).sum();

    // vLLM's own counts: the same, plus its one-token warm-up request.
    let (vllm_tokens, vllm_requests, vllm_prompts) = vllm_counters(&metrics);
    assert_eq!(vllm_requests, completed.len() as u64 + 1, "requests vLLM finished vs batchlab's completed + warm-up");
    assert_eq!(vllm_tokens, all + 1, "tokens vLLM generated vs batchlab's output tokens + the warm-up's one");
    assert_eq!(vllm_prompts, prompts + 3, "prompt tokens vLLM read vs batchlab's + the warm-up's three");
}

/// The prefix-cache hit rate vLLM achieved, from its own `num_cached_tokens`, next to the rate the
/// workload was designed for (docs/scenarios.md, "Shared prefixes"): two groups sharing a prefix
/// of 4 full KV blocks of 32 tokens (130 tokens: the 2 past the last full block never hit), prompts
/// of 160 to 200 tokens, no warmup, so the first two requests miss and the other 46 hit 128
/// tokens each. vLLM caches a block's hash when it allocates it, so requests of a group that run
/// in the same step as its first request hit too, and nothing is evicted from 1 GiB of KV cache:
/// the achieved rate is the designed one. The tolerance, 0.01 absolute (about 1.5 % of the rate), is
/// there only for a block vLLM would fail to reuse; a hit rate counted over the wrong tokens or
/// blocks (all 130, or none) is off by more than 0.03.
#[test]
fn the_prefix_hit_rate_is_reported_next_to_the_designed_one() {
    if !ready() {
        return;
    }
    let _one = one_engine();
    let dir = output_dir("prefix");
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("prefix.toml");
    std::fs::write(
        &scenario,
        r#"
name = "vllm-prefix"
seed = 14
[engine]
kind = "vllm"
[engine.vllm]
model = "tiny-llama"
max_model_len = 512
[engine.vllm.engine_args]
enable_prefix_caching = true
block_size = 32
[batching]
batch_size = 8
[workload]
prompt_tokens = { dist = "uniform", min = 160, max = 200 }
output_tokens = 4
vocab_size = 4000
prefix_groups = 2
prefix_tokens = 130
[profile]
kind = "throughput"
max_concurrency = 16
[stop]
max_requests = 48
[expect]
completed = "== 48"
"#,
    )
    .unwrap();
    let mut run = spawn_scenario(Admission::Batch, scenario.to_str().unwrap(), &[], &dir.join("out"));
    let status = run.finish();
    assert_eq!(status.code(), Some(0), "stderr tail:\n{}", run.tail());
    let r = report(&dir.join("out"));
    let b = &r["benchmarks"][0];
    eprintln!("prefix cache: {} and {}", b["prefix_cache_tokens"], r["environment"]["engine_config"]);
    assert_eq!(r["environment"]["engine_config"]["block_size"], 32, "the block size the design counts in");
    assert_eq!(r["environment"]["engine_config"]["prefix_caching"], true);
    let tokens = &b["prefix_cache_tokens"];
    let prompt = tokens["designed_prompt"].as_u64().unwrap();
    assert!((48 * 160..=48 * 200).contains(&prompt), "{tokens}");
    assert_eq!(tokens["designed_cached"], 46 * 128, "{tokens}");
    assert_eq!(tokens["prompt"], prompt, "every request reported its cached tokens: {tokens}");
    let designed = b["prefix_cache_designed_hit_rate"].as_f64().unwrap();
    let achieved = b["prefix_cache_hit_rate"].as_f64().expect("vLLM reports num_cached_tokens");
    assert!((designed - 46.0 * 128.0 / prompt as f64).abs() < 1e-12);
    assert!((achieved - designed).abs() <= 0.01, "achieved {achieved}, designed {designed}: {tokens}");
}
