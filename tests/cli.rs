//! The `batchlab` binary as a user runs it: help texts, exit codes, error reports, output files.

use std::path::Path;
use std::process::{Command, Output};

#[path = "common/cli.rs"]
mod cli_common;
use cli_common::{batchlab, temp_dir, text};

#[test]
fn help_texts() {
    let top = batchlab(&["--help"]);
    assert!(top.status.success());
    insta::assert_snapshot!("help", text(&top.stdout));
    let run = batchlab(&["run", "--help"]);
    assert!(run.status.success());
    insta::assert_snapshot!("run_help", text(&run.stdout));
    // `--engine-kind` lists every kind `engine.kind` takes.
    let help = text(&run.stdout);
    let line = help.lines().find(|l| l.contains("--engine-kind")).expect("--engine-kind");
    for kind in batchlab::scenario::ENGINE_KINDS {
        assert!(line.contains(&format!("`{kind}`")), "{kind} missing: {line}");
    }
    assert!(line.contains("`openai`"), "{line}");
}

#[test]
fn run_writes_reports_and_exits_zero() {
    let out = temp_dir("ok");
    let o = batchlab(&[
        "run",
        "scenarios/throughput.toml",
        "--quiet",
        "--requests-jsonl",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("throughput"), "{}", text(&o.stdout));
    for f in ["report.json", "report.csv", "report.html", "requests.jsonl"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["benchmarks"][0]["counts"]["completed"], 256);
    // Virtual time: the machine's speed changes nothing, so it is not probed.
    assert!(report["environment"]["machine"].is_null(), "{}", report["environment"]);
    // Warmup requests are in requests.jsonl too, marked as such.
    let lines = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 256 + 16);
    assert_eq!(lines.lines().filter(|l| l.contains("\"phase\":\"warmup\"")).count(), 16);
}

#[test]
fn failed_expectation_lists_measured_and_expected_and_exits_3() {
    let out = temp_dir("expect");
    let o = batchlab(&[
        "run",
        "scenarios/throughput.toml",
        "--quiet",
        "--output",
        out.to_str().unwrap(),
        "--set",
        "expect.ttft_p99_ms=\"<= 1\"",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("ttft_p99_ms <= 1"), "{err}");
    assert!(err.contains("measured"), "{err}");
}

#[test]
fn scenario_with_a_typo_points_at_the_line_and_exits_2() {
    let dir = temp_dir("typo");
    let file = dir.join("typo.toml");
    std::fs::write(&file, "[batching]\nbatch_sise = 8\n").unwrap();
    let o = batchlab(&["run", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr).replace(dir.to_str().unwrap(), "[dir]");
    insta::assert_snapshot!("typo_error", err);
}

#[test]
fn check_prints_the_resolved_scenario() {
    let o = batchlab(&["check", "scenarios/throughput.toml", "--set", "batching.batch_size=64"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let printed = text(&o.stdout);
    assert!(printed.contains("batch_size = 64"), "{printed}");
    assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/throughput.toml").exists());
}

/// Runs `file` with its plain progress piped, sends one SIGINT once the measured phase is under
/// way, and checks batchlab exits 130 (waiting on its exit, up to a backstop far below any hang
/// under test). Returns the rest of its stderr.
fn interrupt_mid_run(file: &Path, dir: &Path) -> Vec<String> {
    signal_mid_run(file, dir, nix::sys::signal::Signal::SIGINT, 130)
}

/// [`interrupt_mid_run`] with `signal`, expecting exit code `code`.
fn signal_mid_run(file: &Path, dir: &Path, signal: nix::sys::signal::Signal, code: i32) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", file.to_str().unwrap(), "--output", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // The plain progress line of the measured phase: the run is under way.
    let seen = lines.by_ref().map_while(Result::ok).any(|l| l.contains("measuring"));
    assert!(seen, "no progress line");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let exited = batchlab::sys::wait_for_any_exit(&[child.id() as i32], std::time::Duration::from_secs(120));
    if !exited {
        let _ = child.kill();
    }
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(exited, "no exit after the signal: {rest:?}");
    assert_eq!(status.code(), Some(code), "{rest:?}");
    rest
}

#[test]
fn ctrl_c_drains_and_writes_an_incomplete_report() {
    let dir = temp_dir("ctrl-c");
    let file = dir.join("long.toml");
    // Real time, endless: only the interrupt ends it.
    std::fs::write(
        &file,
        "[engine.sim]\ntime = \"real\"\ndecode_step = \"1ms\"\n[batching]\nbatch_size = 4\n\
         [workload]\nprompt_tokens = 8\noutput_tokens = 8\n[profile]\nkind = \"throughput\"\nmax_concurrency = 16\n\
         [stop]\nmax_requests = 100000000\n",
    )
    .unwrap();
    let rest = interrupt_mid_run(&file, &dir);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["incomplete"], true, "{rest:?}");
    let counts = &report["benchmarks"][0]["counts"];
    assert_eq!(counts["lost"], 0);
    // Depending on when the signal lands, queued requests were cancelled and running ones drained.
    let n = |k: &str| counts[k].as_u64().unwrap();
    assert!(n("submitted") > 0, "{counts}");
    assert_eq!(n("completed") + n("cancelled") + n("errors"), n("submitted"), "{counts}");
}

/// The first Ctrl-C finishes the run even while a generate is wedged: after a short grace the
/// running batch is abandoned (`aborted`), the report is written, and batchlab exits 130.
#[test]
fn ctrl_c_abandons_a_wedged_generate_and_still_reports() {
    let dir = temp_dir("ctrl-c-wedged");
    let file = dir.join("wedged.toml");
    // Real time, and the first generate hangs for an hour, with no generate_timeout to end it.
    std::fs::write(
        &file,
        "[engine.sim]\ntime = \"real\"\n[batching]\nbatch_size = 4\n\
         [workload]\nprompt_tokens = 8\noutput_tokens = 8\n[profile]\nkind = \"throughput\"\nmax_concurrency = 16\n\
         [stop]\nmax_requests = 1000\n[faults]\nhang = { every = 1 }\nhang_for = \"1h\"\n",
    )
    .unwrap();
    // The hang lasts an hour: exiting at all (within interrupt_mid_run's backstop) is the point.
    let rest = interrupt_mid_run(&file, &dir);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["incomplete"], true, "{rest:?}");
    let counts = &report["benchmarks"][0]["counts"];
    let n = |k: &str| counts[k].as_u64().unwrap_or(0);
    assert_eq!(n("lost"), 0, "{counts}");
    // Under load the interrupt can land before the first batch is dispatched: then everything is
    // cancelled. Otherwise the wedged batch is abandoned (`aborted`) and the rest cancelled.
    let aborted = counts["errors_by_kind"]["aborted"].as_u64().unwrap_or(0);
    assert_eq!(aborted + n("cancelled"), n("submitted"), "the wedged batch is abandoned, the rest cancelled: {counts}");
    assert_eq!(n("completed") + n("cancelled") + n("errors"), n("submitted"), "{counts}");
}

#[test]
fn engine_kind_is_the_resolved_one() {
    // The justfile picks the vLLM build by this, with the run's own arguments: `--set` counts.
    let dir = temp_dir("kind");
    let file = dir.join("empty.toml");
    std::fs::write(&file, "").unwrap();
    let file = file.to_str().unwrap();
    let kind = |args: &[&str]| {
        let o = batchlab(args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    assert_eq!(kind(&["check", "--engine-kind", file]), "sim\n");
    let vllm = ["--set", "engine.kind=vllm", "--set", "engine.vllm.model=models/x"];
    assert_eq!(kind(&[&["check", "--engine-kind", file], &vllm[..]].concat()), "vllm\n");
    let run_args = ["--quiet", "--output", "/nonexistent/never-written"];
    assert_eq!(kind(&[&["run", "--engine-kind", file], &vllm[..], &run_args[..]].concat()), "vllm\n");
    assert_eq!(kind(&["check", "--engine-kind", "scenarios/vllm-cpu.toml"]), "vllm\n");
}

#[test]
fn progress_piped_is_plain_lines_without_escape_codes() {
    let out = temp_dir("plain-progress");
    let o = batchlab(&["run", "scenarios/sweep.toml", "--output", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
    assert!(err.contains("] loading engine\n"), "{err}");
    // One finished line per benchmark (2 + 3 in this sweep), each with its own count.
    let done: Vec<_> = err.lines().filter(|l| l.contains("] done ")).collect();
    assert_eq!(done.len(), 5, "{err}");
    assert!(done.iter().all(|l| l.contains(" 64/64 requests")), "{err}");
    assert!(err.contains("] stopping engine\n"), "{err}");
    assert!(!text(&o.stdout).contains('\x1b'));
}

/// `batchlab` with `args`, run in `dir`, with `env` set.
fn batchlab_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(args)
        .current_dir(dir)
        .env_remove("BATCHLAB_LOG")
        .env_remove("RUST_BACKTRACE")
        .envs(env.iter().copied())
        .output()
        .expect("running batchlab")
}

const SMALL_RUN: &str = "[workload]\nprompt_tokens = 4\noutput_tokens = 4\n[stop]\nmax_requests = 16\n";

#[test]
fn broken_or_empty_jsonl_fails_check_and_run_with_exit_2_naming_the_line() {
    let dir = temp_dir("jsonl");
    let scenario = "[workload]\nsource = \"file\"\npath = \"prompts.jsonl\"\n[stop]\nmax_requests = 4\n";
    std::fs::write(dir.join("s.toml"), scenario).unwrap();
    for (prompts, needle) in [
        ("{\"prompt\": \"fine\"}\n{\"prompt\": 3}\n", "prompts.jsonl:2: expected `prompt` to be a string"),
        ("\n\n", "has no prompts"),
    ] {
        std::fs::write(dir.join("prompts.jsonl"), prompts).unwrap();
        for command in ["check", "run"] {
            let o = batchlab_in(&dir, &[command, "s.toml", "--quiet"][..if command == "run" { 3 } else { 2 }], &[]);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{command}: {err}");
            assert!(err.contains(needle), "{command}: {err}");
            assert!(o.stdout.is_empty(), "{command} printed: {}", text(&o.stdout));
        }
    }
}

/// Chat and dataset mistakes fail `check` (and so `run`) with exit 2, naming the file and line: a
/// bad ShareGPT conversation, a broken chat template, and only bad lines when they are skipped.
#[test]
fn bad_datasets_and_chat_templates_fail_check_with_exit_2_naming_the_line() {
    let dir = temp_dir("chat-datasets");
    std::fs::write(dir.join("chat.jinja"), "{% for m in messages %}\n{{ m.content }\n{% endfor %}\n").unwrap();
    std::fs::write(
        dir.join("convos.json"),
        "[\n  {\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]},\n  {\"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]}\n]\n",
    )
    .unwrap();
    std::fs::write(dir.join("bad.jsonl"), "nope\n{\"messages\": 3}\n").unwrap();
    let file = "[workload]\nsource = \"file\"\n[stop]\nmax_requests = 4\n";
    for (extra, needle) in [
        ("path = \"convos.json\"\nformat = \"sharegpt\"\n", "convos.json:3: `conversations` has no \"human\" turn"),
        (
            "path = \"convos.json\"\nformat = \"sharegpt\"\nrequest_format = \"chat.jinja\"\n",
            "chat.jinja:2: syntax error",
        ),
        (
            "path = \"bad.jsonl\"\nskip_bad_lines = true\n",
            "has no prompts left: of its 2 entries, 2 were bad lines (skipped)",
        ),
    ] {
        std::fs::write(dir.join("s.toml"), file.replace("[stop]", &format!("{extra}[stop]"))).unwrap();
        let o = batchlab_in(&dir, &["check", "s.toml"], &[]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra}: {err}");
        assert!(err.contains(needle), "{extra}: {err}");
    }
}

#[test]
fn missing_vllm_model_fails_check() {
    let dir = temp_dir("model");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home_env = [("BATCHLAB_HOME", home.to_str().unwrap())];
    std::fs::write(dir.join("v.toml"), "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"/nonexistent/model\"\n")
        .unwrap();
    let o = batchlab_in(&dir, &["check", "v.toml"], &home_env);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no model at /nonexistent/model") && err.contains("never downloads"), "{err}");
    // A hub id is explained: it resolves under $BATCHLAB_HOME, and nothing downloads it.
    std::fs::write(dir.join("hub.toml"), "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"org/model\"\n").unwrap();
    let o = batchlab_in(&dir, &["check", "hub.toml"], &home_env);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("`org/model` looks like a Hugging Face model id"), "{err}");
    // --engine-kind reads the plan only: the justfile asks it before any model exists.
    let o = batchlab_in(&dir, &["check", "--engine-kind", "hub.toml"], &home_env);
    assert_eq!(text(&o.stdout), "vllm\n", "{}", text(&o.stderr));
}

#[test]
fn unwritable_output_fails_at_once_naming_the_path_once() {
    let dir = temp_dir("unwritable");
    std::fs::write(dir.join("s.toml"), SMALL_RUN).unwrap();
    std::fs::write(dir.join("file"), "not a directory").unwrap();
    let o = batchlab_in(&dir, &["run", "s.toml", "--output", "file/out"], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("file/out").count(), 1, "{err}");
    assert!(!err.contains("loading engine"), "the run started: {err}");
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
}

#[test]
fn a_report_that_cannot_be_written_still_prints_the_table() {
    let dir = temp_dir("unwritable-at-end");
    std::fs::write(dir.join("s.toml"), SMALL_RUN).unwrap();
    // The directory is writable, but report.json cannot be renamed over a directory.
    std::fs::create_dir_all(dir.join("out/report.json")).unwrap();
    let o = batchlab_in(&dir, &["run", "s.toml", "--quiet", "--output", "out"], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(text(&o.stdout).contains("throughput"), "no table: {}", text(&o.stdout));
    assert_eq!(err.matches("out/report.json").count(), 1, "{err}");
    let os_error = err.lines().find(|l| l.contains("out/report.json")).unwrap().rsplit(": ").next().unwrap().to_owned();
    assert_eq!(err.matches(&os_error).count(), 1, "the OS error is repeated: {err}");
    assert!(dir.join("out/report.csv").is_file(), "the CSV is still written");
}

#[test]
fn failed_engine_start_writes_an_incomplete_report_with_the_error() {
    let dir = temp_dir("start-fails");
    std::fs::write(dir.join("s.toml"), SMALL_RUN).unwrap();
    let o =
        batchlab_in(&dir, &["run", "s.toml", "--quiet", "--output", "out", "--set", "faults.start_fails=true"], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/report.json")).unwrap()).unwrap();
    assert_eq!(report["incomplete"], true);
    assert!(report["error"].as_str().is_some_and(|e| e.contains("failed to start")), "{report}");
    assert_eq!(report["benchmarks"], serde_json::json!([]));
    assert!(err.contains("error: engine failed to start"), "{err}");
}

#[test]
fn injected_engine_panics_stay_one_line_whatever_rust_backtrace_says() {
    let dir = temp_dir("panics");
    std::fs::write(dir.join("s.toml"), format!("{SMALL_RUN}[faults]\npanic = {{ every = 1 }}\n")).unwrap();
    for backtrace in ["0", "1", "full"] {
        // Every batch panics, so nothing completes: allowed here (else exit 3).
        let args = ["run", "s.toml", "--quiet", "--output", "out", "--set", "expect.completed=>=0"];
        let o = batchlab_in(&dir, &args, &[("RUST_BACKTRACE", backtrace)]);
        let err = text(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("engine panic: injected panic"), "RUST_BACKTRACE={backtrace}: {err}");
        assert!(!err.contains("stack backtrace") && !err.contains("panicked at"), "RUST_BACKTRACE={backtrace}: {err}");
    }
}

#[test]
fn sigterm_drains_reports_and_exits_143() {
    let dir = temp_dir("sigterm");
    let file = dir.join("long.toml");
    std::fs::write(
        &file,
        "[engine.sim]\ntime = \"real\"\ndecode_step = \"1ms\"\n[batching]\nbatch_size = 4\n\
         [workload]\nprompt_tokens = 8\noutput_tokens = 8\n[stop]\nmax_requests = 100000000\n",
    )
    .unwrap();
    let rest = signal_mid_run(&file, &dir, nix::sys::signal::Signal::SIGTERM, 143);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["incomplete"], true, "{rest:?}");
}

/// A real-time run records the machine-speed probe at its start and end, with the load average
/// and the steal share in between.
#[test]
fn a_real_time_run_reports_the_machine_probe() {
    let dir = temp_dir("machine");
    std::fs::write(dir.join("s.toml"), SMALL_RUN).unwrap();
    let o =
        batchlab_in(&dir, &["run", "s.toml", "--quiet", "--output", "out", "--set", "engine.sim.time=\"real\""], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("out/report.json")).unwrap()).unwrap();
    let machine = &report["environment"]["machine"];
    for field in ["probe_start_ms", "probe_end_ms"] {
        let ms = machine[field].as_f64().unwrap_or_else(|| panic!("{field} in {machine}"));
        // The probe is some tens of ms of one core: far above zero, far below a second.
        assert!(ms > 0.05 && ms < 1000.0, "{field} = {ms}");
    }
    for field in ["load_start", "load_end"] {
        assert!(machine[field].as_f64().is_some_and(|l| l >= 0.0), "{field} in {machine}");
    }
    // A run this short may see no tick pass: null, or a share.
    let steal = &machine["steal_share"];
    assert!(steal.is_null() || steal.as_f64().is_some_and(|s| (0.0..=1.0).contains(&s)), "{machine}");
    let read = batchlab::report::read_report(&dir.join("out")).expect("the report reads back");
    assert!(read.environment.machine.and_then(|m| m.speed_ms()).is_some(), "{machine}");
    assert_eq!(read.environment.machine_drift(&read.environment), Some(0.0));
}

/// `BATCHLAB_CPUS` pins the run where asked (a benchmark's client on one core); without it the
/// mask is the cgroup's, whatever the process inherited.
#[test]
fn batchlab_cpus_pins_the_run_and_the_report_says_so() {
    let cpus = batchlab::sys::current_affinity();
    let Some(&last) = cpus.last() else { panic!("no CPU in this process's mask") };
    let dir = temp_dir("cpus");
    std::fs::write(dir.join("s.toml"), SMALL_RUN).unwrap();
    let affinity = |env: &[(&str, &str)], out: &str| {
        let o = batchlab_in(&dir, &["run", "s.toml", "--quiet", "--output", out], env);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(out).join("report.json")).unwrap()).unwrap();
        report["environment"]["cpu_affinity"].as_str().expect("the mask in the report").to_owned()
    };
    assert_eq!(affinity(&[("BATCHLAB_CPUS", &last.to_string())], "pinned"), last.to_string());
    let widened = affinity(&[], "default");
    assert_eq!(widened, batchlab::sys::format_cpu_list(&cpus), "the cgroup's cpuset, as this test runs in");
    // A list that does not parse is warned about and the cpuset applies.
    let o = batchlab_in(&dir, &["run", "s.toml", "--quiet", "--output", "bad"], &[("BATCHLAB_CPUS", "0-x")]);
    assert!(o.status.success());
    assert!(text(&o.stderr).contains("BATCHLAB_CPUS=\"0-x\": bad CPU list at column 3"), "{}", text(&o.stderr));
}

#[test]
fn warmup_requests_0_means_no_warmup() {
    let out = temp_dir("nowarmup");
    let args = ["scenarios/throughput.toml", "--set", "warmup.requests=0"];
    let check = batchlab(&[&["check"], &args[..]].concat());
    assert!(check.status.success(), "{}", text(&check.stderr));
    assert!(!text(&check.stdout).contains("[warmup]"), "{}", text(&check.stdout));
    let o =
        batchlab(&[&["run"], &args[..], &["--quiet", "--requests-jsonl", "--output", out.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["benchmarks"][0]["counts"]["completed"], 256);
    let lines = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 256, "the 16 warmup requests are gone");
    assert!(!lines.contains("\"phase\":\"warmup\""));
    // The same for a cooldown, and in real time with continuous admission.
    let o = batchlab(&[
        "run",
        "scenarios/throughput.toml",
        "--set",
        "warmup.requests=0",
        "--set",
        "cooldown.requests=0",
        "--set",
        "engine.sim.time=real",
        "--set",
        "engine.sim.decode_step=10us",
        "--set",
        "stop.max_requests=64",
        "--set",
        "expect.completed=64",
        "--quiet",
        "--output",
        temp_dir("nowarmup-real").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}
