//! `engine.openai.threads`: the HTTP client's runtime has that many tokio workers, by default
//! the CPUs batchlab may use (its affinity mask, which `BATCHLAB_CPUS` sets); `batchlab check`
//! prints the value it resolves to and refuses 0 at its line.

use std::process::Command;

use batchlab::engine::Engine;
use batchlab::engine::openai::{OpenAiConfig, OpenAiEngine};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

/// The threads of this process named `batchlab-http` (the client runtime's workers).
fn client_workers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "batchlab-http")
        .count()
}

/// The only test of this file that starts engines, so no other test's workers are counted.
#[test]
fn the_client_runs_on_the_configured_workers_and_by_default_on_every_usable_cpu() {
    let server = Server::start(None, &[]);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // One more than the CPUs: never tokio's own default, whatever the machine.
    for (threads, expected) in [(Some(cpus as u32 + 1), cpus + 1), (None, cpus), (Some(1), 1)] {
        let mut config = OpenAiConfig::new(&server.url, MODEL);
        config.threads = threads;
        let mut engine = OpenAiEngine::new(config);
        assert_eq!(client_workers(), 0, "no client runtime before start");
        engine.start().expect("the engine starts against batchlab serve");
        assert_eq!(client_workers(), expected, "threads = {threads:?} on {cpus} CPUs");
        engine.shutdown().unwrap();
        drop(engine);
        // The runtime's threads are gone once it has shut down.
        let gone = std::time::Instant::now();
        while client_workers() > 0 {
            assert!(gone.elapsed() < std::time::Duration::from_secs(10), "the client's workers outlived shutdown");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

const SCENARIO: &str =
    "[engine]\nkind = \"openai\"\n\n[engine.openai]\nurls = [\"http://127.0.0.1:9\"]\nmodel = \"m\"\n";

/// `batchlab check FILE` with `text` in FILE and `BATCHLAB_CPUS` set to `cpus` (or left alone).
fn check(name: &str, scenario: &str, cpus: Option<&str>) -> (bool, String, String) {
    let dir = std::env::temp_dir().join(format!("batchlab-client-threads-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.toml");
    std::fs::write(&file, scenario).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_batchlab"));
    cmd.arg("check").arg(&file).env_remove("BATCHLAB_LOG").env_remove("BATCHLAB_CPUS");
    if let Some(cpus) = cpus {
        cmd.env("BATCHLAB_CPUS", cpus);
    }
    let out = cmd.output().expect("batchlab runs");
    let _ = std::fs::remove_dir_all(&dir);
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn check_prints_the_resolved_threads_and_refuses_zero_at_its_line() {
    // Unset: the CPUs batchlab may use, which BATCHLAB_CPUS narrows to one.
    let (ok, out, err) = check("one-cpu", SCENARIO, Some("0"));
    assert!(ok, "{err}");
    let line = |out: &str| out.lines().find(|l| l.starts_with("threads =")).map(str::to_owned);
    assert_eq!(line(&out).as_deref(), Some("threads = 1 # the default: the CPUs batchlab may use"), "{out}");
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (ok, out, err) = check("all-cpus", SCENARIO, None);
    assert!(ok, "{err}");
    assert_eq!(line(&out), Some(format!("threads = {all} # the default: the CPUs batchlab may use")), "{out}");
    // Set: printed as it is, with no comment, whatever the machine.
    let (ok, out, err) = check("set", &format!("{SCENARIO}threads = 7\n"), Some("0"));
    assert!(ok, "{err}");
    assert_eq!(line(&out).as_deref(), Some("threads = 7"), "{out}");
    // 0 threads: refused at its line (7) and column.
    let (ok, _, err) = check("zero", &format!("{SCENARIO}threads = 0\n"), None);
    assert!(!ok);
    assert!(err.contains("`engine.openai.threads` must be between 1 and"), "{err}");
    assert!(err.contains("s.toml:7:11"), "{err}");
}
