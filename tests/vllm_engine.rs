//! The real vLLM engine against the tiny random-weight model from `just setup-vllm`, in both
//! admission modes (`engine.vllm.admission`): each test runs once per mode (`name::batch`,
//! `name::continuous`). With continuous admission a batch goes to the engine's concurrent face,
//! as the batcher hands it over, and every output carries its per-token times.
//!
//! Run with `just test-vllm`. Without the venv or the model every test fails, saying what is
//! missing, unless `BATCHLAB_SKIP_PYTHON=1` asks to skip them (never under `CI=true`;
//! tests/common/python_env.rs).
#![cfg(feature = "vllm")]

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use batchlab::engine::chat::{ChatPrompt, ChatTemplate, Message, Template, TemplateOrigin};
use batchlab::engine::python::vllm::{Admission, VllmConfig};
use batchlab::engine::python::{PythonEngine, batchlab_home};
use batchlab::engine::{Concurrent, Engine, EngineError, EngineOutput, EngineRequest, FinishReason, Prompt, Started};
use batchlab::time::{MonotonicClock, Timestamp};

#[path = "common/python_env.rs"]
mod python_env;

#[path = "common/hf_chat.rs"]
mod hf_chat;

#[macro_use]
#[path = "common/admission.rs"]
mod admission;

/// One engine at a time: a 2-core machine, and one Python per process.
static ONE_ENGINE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Set in the re-executed test process that runs the multiprocess engine, to its admission.
const CHILD_ENV: &str = "BATCHLAB_VLLM_MULTIPROCESS_CHILD";

both_admissions!(
    in_process_engine_generates_token_and_text_prompts,
    chat_prompts_are_templated_in_the_engine_and_counted_by_it,
    a_bad_engine_arg_is_a_start_error_with_the_python_message,
    multiprocess_engine_leaves_no_child_processes,
);

/// `batch` through the engine as the batcher gives it: one generate (batch admission), or one
/// hand-over to the concurrent face, waiting for its `done` (continuous admission).
fn generate(
    engine: &mut PythonEngine,
    concurrent: Option<&Concurrent>,
    batch: &[EngineRequest],
) -> Result<Vec<EngineOutput>, EngineError> {
    let Some(Concurrent { face, .. }) = concurrent else { return engine.generate(batch) };
    let (tx, rx) = std::sync::mpsc::channel();
    face.generate(
        batch.to_vec(),
        Box::new(move |result| {
            let _ = tx.send(result);
        }),
    );
    rx.recv_timeout(std::time::Duration::from_secs(300)).expect("the hand-over answered within 5 minutes")
}

/// The tiny model's plan; `None` only when the venv or model is missing and the developer asked
/// to skip (tests/common/python_env.rs decides; otherwise it fails the test).
fn tiny_plan(in_process: bool, admission: Admission) -> Option<VllmConfig> {
    if !python_env::ready(true) {
        return None;
    }
    let model = batchlab_home().join("tiny-llama");
    Some(VllmConfig {
        model,
        dtype: "float32".into(),
        max_model_len: Some(512),
        max_num_seqs: Some(64),
        max_num_batched_tokens: None,
        enforce_eager: true,
        seed: 0,
        kv_cache_gib: 1.0,
        in_process,
        omp_num_threads: None,
        disable_log_stats: false,
        engine_args: serde_json::Map::new(),
        admission,
        profile: None,
    })
}

fn token_request(id: u64, prompt_len: u32, max_tokens: u32) -> EngineRequest {
    // Distinct, in-vocabulary prompts (the tiny model has a few thousand tokens).
    let prompt = (0..prompt_len).map(|i| 10 + (id as u32 * 37 + i * 11) % 1000).collect();
    EngineRequest::tokens(prompt, max_tokens).with_id(id)
}

fn secs(t: Timestamp) -> f64 {
    t.as_secs_f64()
}

/// Everything an output of an EOS-ignoring request must satisfy, with stats inside `window`;
/// with continuous admission, a time for every token.
fn check_output(req: &EngineRequest, out: &EngineOutput, window: (Timestamp, Timestamp), admission: Admission) {
    let what = format!("request {} -> {out:?}", req.id);
    assert_eq!(out.request_id, Some(req.id), "the vLLM engine answers with our ids (vLLM's own are positional)");
    if let Prompt::Tokens(ids) = &req.prompt {
        assert_eq!(out.prompt_tokens, Some(ids.len() as u32), "{what}");
    } else {
        assert!(out.prompt_tokens.is_some_and(|n| n > 0), "{what}");
    }
    assert_eq!(out.output_tokens, Some(req.max_tokens), "{what}");
    assert_eq!(out.output_token_ids.as_ref().map(Vec::len), Some(req.max_tokens as usize), "{what}");
    assert_eq!(out.finish_reason, FinishReason::Length, "{what}");
    assert!(out.text.is_some(), "{what}");

    let s = &out.stats;
    let (Some(queued), Some(scheduled), Some(first), Some(last)) =
        (s.queued_ts, s.scheduled_ts, s.first_token_ts, s.last_token_ts)
    else {
        panic!("missing stats: {what}");
    };
    let (start, end) = (secs(window.0), secs(window.1));
    assert!(start <= queued && queued <= scheduled, "{what}: not {start} <= queued <= scheduled");
    assert!(scheduled <= first && first <= last, "{what}: not scheduled <= first <= last");
    assert!(last <= end, "{what}: last token after generate returned ({end})");
    let wall_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let arrival = s.arrival_wall.expect("arrival time");
    assert!((wall_now - 600.0..=wall_now).contains(&arrival), "{what}: arrival {arrival} vs now {wall_now}");
    match admission {
        Admission::Batch => assert_eq!(s.token_ts, None, "{what}: offline vLLM times no token but the first and last"),
        Admission::Continuous => {
            let ts = s.token_ts.as_ref().unwrap_or_else(|| panic!("{what}: no per-token times"));
            assert_eq!(ts.len(), req.max_tokens as usize, "{what}: one time per token");
            assert_eq!((ts.first(), ts.last()), (Some(&first), Some(&last)), "{what}: vLLM's own first and last");
            assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{what}: token times in order");
        }
    }
}

fn in_process_engine_generates_token_and_text_prompts(admission: Admission) {
    let _one = ONE_ENGINE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(plan) = tiny_plan(true, admission) else { return };
    let mut engine = plan.engine();
    let started = std::time::Instant::now();
    let Started { info, concurrent } = engine.start().expect("start");
    eprintln!("started {} {} in {:.1?}", info.name, info.version, started.elapsed());
    assert_eq!(info.name, "vllm");
    assert_eq!(info.processes, Some(vec![]), "in-process vLLM runs no process of its own");

    let mut batch: Vec<EngineRequest> = (0..6).map(|id| token_request(id, 16 + id as u32 * 5, 12)).collect();
    batch.push(EngineRequest::new(Prompt::Text("the quick brown fox jumps over the lazy dog".into()), 8).with_id(6));
    let before = MonotonicClock::read();
    let outputs = generate(&mut engine, concurrent.as_ref(), &batch).expect("generate");
    let after = MonotonicClock::read();
    assert_eq!(outputs.len(), batch.len());
    for (req, out) in batch.iter().zip(&outputs) {
        check_output(req, out, (before, after), admission);
    }

    // Seeded sampling is reproducible; different seeds give different tokens.
    let sampled = |seed| {
        let mut r = token_request(9, 20, 16);
        (r.temperature, r.seed) = (1.0, Some(seed));
        r
    };
    let outputs =
        generate(&mut engine, concurrent.as_ref(), &[sampled(1), sampled(1), sampled(2)]).expect("sampled generate");
    let ids: Vec<_> = outputs.iter().map(|o| o.output_token_ids.clone().unwrap()).collect();
    assert_eq!(ids[0], ids[1], "same seed, same tokens");
    assert_ne!(ids[0], ids[2], "another seed, other tokens");

    // An EOS-respecting request stops at max_tokens or earlier, never before min_tokens.
    let mut eos = token_request(10, 12, 6);
    (eos.ignore_eos, eos.min_tokens) = (false, 3);
    let out = &generate(&mut engine, concurrent.as_ref(), std::slice::from_ref(&eos)).expect("eos generate")[0];
    let n = out.output_tokens.unwrap();
    assert!((3..=6).contains(&n), "{out:?}");
    assert!(matches!(out.finish_reason, FinishReason::Length | FinishReason::Stop), "{out:?}");

    // Throughput, printed for the record (not asserted: the machine is shared).
    let batch: Vec<_> = (0..64).map(|id| token_request(100 + id, 128, 64)).collect();
    let t = std::time::Instant::now();
    let outputs = generate(&mut engine, concurrent.as_ref(), &batch).expect("throughput generate");
    let elapsed = t.elapsed().as_secs_f64();
    let tokens: u32 = outputs.iter().filter_map(EngineOutput::generated_tokens).sum();
    assert_eq!(tokens, 64 * 64);
    eprintln!(
        "THROUGHPUT ({admission:?}): 64 prompts x 128 tokens -> {tokens} output tokens in {elapsed:.2}s = {:.0} tok/s",
        f64::from(tokens) / elapsed
    );

    engine.shutdown().expect("shutdown");
    assert!(engine.generate(&batch).is_err(), "generate after shutdown fails");
    assert_eq!(child_processes(), vec![], "no child process outlives the engine");
}

/// Chat prompts are templated by the tiny model's own template (or a custom one) in the engine,
/// and the prompt token counts vLLM reports are exactly what Hugging Face's `apply_chat_template`
/// gives: the template's tokens included, never a client-side estimate.
fn chat_prompts_are_templated_in_the_engine_and_counted_by_it(admission: Admission) {
    let _one = ONE_ENGINE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(plan) = tiny_plan(true, admission) else { return };
    let model = plan.model.clone();
    let mut engine = plan.engine();
    let concurrent = engine.start().expect("start").concurrent;
    let conversations = vec![
        vec![Message::new("user", "Hi there")],
        vec![Message::new("system", "Be brief."), Message::new("user", "What is continuous batching?")],
        vec![
            Message::new("system", "You are a patient tutor."),
            Message::new("user", "What is a derivative?"),
            Message::new("assistant", "The slope of a function at a point."),
            Message::new("user", "And of x squared?"),
        ],
    ];
    let source = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant]";
    let custom = ChatTemplate::new(source, TemplateOrigin::Inline).unwrap();
    let mut batch = Vec::new();
    let mut cases = Vec::new();
    for (template, text) in [(Template::Model, None), (Template::Custom(custom), Some(source.to_owned()))] {
        for messages in &conversations {
            let prompt = Prompt::Chat(ChatPrompt { messages: messages.clone(), template: template.clone() });
            batch.push(EngineRequest::new(prompt, 4).with_id(batch.len() as u64));
            cases.push((messages.clone(), text.clone()));
        }
    }
    let outputs = generate(&mut engine, concurrent.as_ref(), &batch).expect("generate");
    engine.shutdown().expect("shutdown");
    let expected = hf_chat::chat_lengths(&model, &cases);
    for ((req, out), (templated, raw)) in batch.iter().zip(&outputs).zip(expected) {
        eprintln!(
            "CHAT: request {}: engine {:?} prompt tokens, apply_chat_template {templated}, contents alone {raw}",
            req.id, out.prompt_tokens
        );
        assert_eq!(out.prompt_tokens, Some(templated as u32), "request {}: {out:?}", req.id);
        assert!(templated > raw, "request {}: the template adds its own tokens ({templated} vs {raw})", req.id);
        assert_eq!(out.output_tokens, Some(req.max_tokens));
    }
    // The two templates differ, and so do their counts.
    let n = conversations.len();
    assert_ne!(
        outputs[..n].iter().map(|o| o.prompt_tokens).collect::<Vec<_>>(),
        outputs[n..].iter().map(|o| o.prompt_tokens).collect::<Vec<_>>()
    );
}

fn a_bad_engine_arg_is_a_start_error_with_the_python_message(admission: Admission) {
    let _one = ONE_ENGINE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut plan) = tiny_plan(true, admission) else { return };
    plan.engine_args.insert("no_such_engine_arg".into(), 1.into());
    let err = plan.engine().start().expect_err("an unknown kwarg fails").to_string();
    assert!(err.contains("no_such_engine_arg"), "{err}");
}

/// Processes whose parent is this process, with their state letter.
fn child_processes() -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may contain spaces and parentheses.
        let Some(after_comm) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(me) {
            children.push((pid, format!("{} {}", fields[0], &stat[..stat.rfind(')').unwrap() + 1])));
        }
    }
    children
}

fn multiprocess_engine_leaves_no_child_processes(admission: Admission) {
    if std::env::var_os(CHILD_ENV).is_some() {
        return multiprocess_child(admission);
    }
    let _one = ONE_ENGINE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if tiny_plan(false, admission).is_none() {
        return;
    }
    // A fresh process: one interpreter per process, and no other test's children to count.
    let exe: PathBuf = std::env::current_exe().unwrap();
    let test = format!("multiprocess_engine_leaves_no_child_processes::{}", admission.name());
    let out = Command::new(exe)
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        // An in-process engine that ran in this process set these in its environment; in the child
        // they would override the plan (the environment wins) and keep vLLM in-process.
        .env_remove("VLLM_ENABLE_V1_MULTIPROCESSING")
        .env_remove("OMP_NUM_THREADS")
        .output()
        .expect("re-running the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {}\nstdout:\n{stdout}\nstderr (tail):\n{}", out.status, tail(&stderr));
    assert!(stdout.contains("CHILDREN-AFTER-SHUTDOWN: 0"), "stdout:\n{stdout}\nstderr (tail):\n{}", tail(&stderr));
    // The harness prints `test name ... ` before the test's own output, on the same line.
    for line in stdout.lines().filter_map(|l| l.find("MULTIPROCESS").map(|i| &l[i..])) {
        eprintln!("{line}");
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Runs in the re-executed process: starts vLLM in multiprocess mode, checks it has children, and
/// that none are left after shutdown.
fn multiprocess_child(admission: Admission) {
    let plan = tiny_plan(false, admission).expect("the parent checked the venv and model");
    assert!(child_processes().is_empty(), "children before start: {:?}", child_processes());
    let mut engine = plan.engine();
    let started = std::time::Instant::now();
    let Started { info, concurrent } = engine.start().expect("start");
    println!("MULTIPROCESS: engine started in {:.1?}", started.elapsed());
    let during: HashSet<_> = child_processes().into_iter().collect();
    assert!(!during.is_empty(), "multiprocess mode runs the engine core in a child process");
    // The engine names its own processes (docs/engines.md): the EngineCore child among them, and
    // only processes vLLM titled `VLLM::…` (not the resource tracker).
    let named = info.processes.expect("VllmEngine names its processes");
    let core = during.iter().find(|(_, stat)| stat.contains("(VLLM::EngineCor")).expect("an EngineCore child");
    assert!(named.contains(&core.0), "{named:?} lacks the EngineCore {core:?}");
    for pid in &named {
        let argv0 = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(argv0.starts_with(b"VLLM::"), "pid {pid} is not vLLM's: {}", String::from_utf8_lossy(&argv0));
    }
    println!("named engine processes: {named:?}");
    let batch: Vec<_> = (0..4).map(|id| token_request(id, 16, 8)).collect();
    let before = MonotonicClock::read();
    let outputs = generate(&mut engine, concurrent.as_ref(), &batch).expect("generate");
    let after = MonotonicClock::read();
    for (req, out) in batch.iter().zip(&outputs) {
        check_output(req, out, (before, after), admission);
    }
    engine.shutdown().expect("shutdown");
    let left = child_processes();
    println!("children during run: {during:?}");
    println!("children left: {left:?}");
    println!("CHILDREN-AFTER-SHUTDOWN: {}", left.len());
}
