//! A frozen engine ends the run: vLLM's EngineCore (multiprocess) is SIGSTOPped mid-run, so its
//! `LLM.generate` waits for ever without a death to see. batchlab's stall watch
//! (`batching.stall_timeout`, 30 s by default for a real engine) finds that neither output nor the
//! engine's CPU time moves, fails the run with `engine_stalled`, writes its report and exits 1,
//! within a minute of the stop.
//!
//! Both admission modes (`engine.vllm.admission`), one after the other; and continuous admission
//! once more under a `[faults]` key that never fires: the fault layer wraps the concurrent face,
//! and the stall watch must come through it (issue 36).
//!
//! Run with `just test-vllm`. Without the venv or the model it says SKIPPED and checks nothing,
//! except under `CI=true`, where that is a failure.
#![cfg(feature = "vllm")]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use batchlab::engine::python::{batchlab_home, default_venv};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// Long enough for a multiprocess engine start on a loaded 2-core machine.
const START_LIMIT: Duration = Duration::from_secs(300);

/// What the issue asks: a stopped EngineCore is noticed within a minute, not ten.
const NOTICED_WITHIN: Duration = Duration::from_secs(60);

fn ready() -> bool {
    for needed in [default_venv().join("bin/python"), batchlab_home().join("tiny-llama/config.json")] {
        if !needed.exists() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{} is missing and CI=true: run `just setup-vllm`",
                needed.display()
            );
            eprintln!("SKIPPED: {} is missing; run `just setup-vllm` (or `just test-vllm`)", needed.display());
            return false;
        }
    }
    true
}

/// Processes of process group `group` whose argv[0] starts with `prefix`, with their state.
fn processes_named(group: i32, prefix: &str) -> Vec<(i32, char)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(close) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // fields: state ppid pgrp ...
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) != Some(group) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv0 = String::from_utf8_lossy(cmdline.split(|&b| b == 0).next().unwrap_or_default()).into_owned();
        if argv0.starts_with(prefix) {
            found.push((pid, fields[0].chars().next().unwrap_or('?')));
        }
    }
    found
}

/// Ends the whole process group however the test ends: nothing stopped or running is left.
struct Group(i32);

impl Drop for Group {
    fn drop(&mut self) {
        let group = Pid::from_raw(self.0);
        let _ = killpg(group, Signal::SIGCONT);
        let _ = killpg(group, Signal::SIGKILL);
    }
}

#[macro_use]
#[path = "common/admission.rs"]
mod admission;

use batchlab::engine::python::vllm::Admission;

// The continuous one: the stepping thread is stuck in a step; the stall watch judges the oldest
// request in vLLM.
both_admissions!(a_stopped_engine_core_ends_the_run_with_a_report_within_a_minute);

fn a_stopped_engine_core_ends_the_run_with_a_report_within_a_minute(admission: Admission) {
    stopped_engine_core_ends_the_run(admission, &[]);
}

/// Issue 36: with any `[faults]` key the fault layer wraps continuous admission's concurrent face;
/// its `runs_here` once stayed behind, and with it the stall watch of several in flight. The key
/// here never fires (a failure every millionth batch), so the run is the plain one, wrapped.
#[test]
fn a_stopped_engine_core_under_faults_ends_a_continuous_run_within_a_minute() {
    stopped_engine_core_ends_the_run(Admission::Continuous, &["--set", "faults.fail_batch={ every = 1000000 }"]);
}

/// One engine at a time on a 2-core machine (and a stall judged on a loaded machine is no test).
static ONE_ENGINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs vLLM's tiny scenario with `admission` and the `extra` sets, SIGSTOPs its EngineCore once
/// it measures, and checks that the stall watch ends the run with a report within a minute.
fn stopped_engine_core_ends_the_run(admission: Admission, extra: &[&str]) {
    if !ready() {
        return;
    }
    let _one = ONE_ENGINE.lock().unwrap_or_else(|p| p.into_inner());
    let faulty = if extra.is_empty() { "" } else { "-faults" };
    let name = format!("batchlab-vllm-stall-{}-{}{faulty}", std::process::id(), admission.name());
    let dir = std::env::temp_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", "scenarios/vllm-cpu.toml", "--output"])
        .arg(&dir)
        .args(["--set", "engine.vllm.in_process=false", "--set", "warmup.requests=1"])
        .args(["--set", "stop.max_requests=100000", "--set", "expect.completed=\">= 0\""])
        .args(admission::sets(admission))
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("VLLM_ENABLE_V1_MULTIPROCESSING")
        .env_remove("BATCHLAB_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawning batchlab");
    let group = Group(child.id() as i32);
    let (tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + START_LIMIT;
    while !seen.iter().any(|l: &String| l.contains("measuring")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(e) => panic!("no `measuring` within {START_LIMIT:?} ({e}); stderr:\n{}", seen.join("\n")),
        }
    }
    let cores = processes_named(group.0, "VLLM::EngineCore");
    assert_eq!(cores.len(), 1, "one EngineCore in batchlab's group: {cores:?}");
    let core = cores[0].0;
    kill(Pid::from_raw(core), Signal::SIGSTOP).expect("SIGSTOP the EngineCore");
    let stopped = Instant::now();

    let exited = batchlab::sys::wait_for_any_exit(&[child.id() as i32], NOTICED_WITHIN + Duration::from_secs(30));
    let took = stopped.elapsed();
    // The rest of stderr, until the pipe closes (bounded: a leftover process may hold it open).
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
        seen.push(line);
    }
    let tail = seen[seen.len().saturating_sub(30)..].join("\n");
    assert!(exited, "batchlab still runs {took:?} after the EngineCore was stopped; stderr tail:\n{tail}");
    let status = child.wait().expect("wait");
    eprintln!("STALL: batchlab exited {took:.2?} after the EngineCore was stopped ({status})");
    assert!(took < NOTICED_WITHIN, "the stall took {took:?} to end the run; stderr tail:\n{tail}");
    assert_eq!(status.code(), Some(1), "stderr tail:\n{tail}");
    assert!(seen.iter().any(|l| l.contains("engine stalled")), "stderr names the stall:\n{tail}");

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).expect("report.json")).expect("json");
    assert_eq!(report["incomplete"], true);
    let counts = &report["benchmarks"][0]["counts"];
    assert_eq!(counts["lost"], 0, "{counts}");
    assert!(counts["errors_by_kind"]["engine_stalled"].as_u64() > Some(0), "{counts}");
    let left: Vec<_> = processes_named(group.0, "").into_iter().filter(|&(_, state)| state != 'Z').collect();
    assert!(left.is_empty(), "processes left in batchlab's group: {left:?}");
}
