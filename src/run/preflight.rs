//! What a run rejects before its engine starts, checked without starting anything: the plan's
//! engine's own checks, a batching that engine cannot take, and the whole workload. `batchlab
//! check` calls [`preflight`]; so does [`run_blocking`](super::run_blocking), before the engine
//! starts. A caller's own engine (`run_with`) is not the plan's, so none of this binds it: its
//! batcher refuses what it cannot take when it starts.

use super::RunError;
use crate::batcher::ConfigError;
use crate::engine::EngineError;
use crate::engine::python::vllm::Admission;
use crate::loadgen::Workload;
use crate::scenario::plan::EnginePlan;
use crate::scenario::plan::Plan;

/// The built-in engines, by [`EnginePlan::kind`], that run one generate at a time: they have no
/// concurrent face (`Started::concurrent`), so `batching.max_in_flight` above 1 cannot run on them.
/// An engine kind not listed here (an HTTP engine) is left to its start to judge.
const ONE_GENERATE_AT_A_TIME: &[&str] = &["sim", "vllm", "python"];

/// Everything a run would reject before its engine starts, checked without starting anything:
/// the engine plan's own checks ([`EnginePlan::check`]: the build has the engine, a vLLM model
/// directory exists), a `batching.max_in_flight` above 1 for an engine that runs one generate at
/// a time (named with the key's place), and the whole workload, built exactly as the run builds
/// it (a JSONL file is read and every line checked). A `[matrix]` plan's combinations are each
/// checked too. Returns the workload.
pub fn preflight(plan: &Plan) -> Result<Workload, RunError> {
    // The batching first: it is wrong whichever build reads the scenario, and has a place.
    let combinations = plan.matrix().into_iter().flat_map(|m| m.combinations());
    for p in std::iter::once(plan).chain(combinations.clone().map(|c| c.plan())) {
        check_in_flight(p)?;
        check_admission(p)?;
    }
    plan.engine().check()?;
    let workload = Workload::from_plan(plan.workload())?;
    check_chat_prompts(plan, &workload)?;
    for c in combinations {
        Workload::from_plan(c.plan().workload())?;
    }
    Ok(workload)
}

/// vLLM with `engine.vllm.admission = "continuous"`: it takes each request as the batcher hands it
/// over, through its concurrent face.
fn admits_continuously(plan: &Plan) -> bool {
    matches!(plan.engine(), EnginePlan::Vllm(c) if c.admission == Admission::Continuous)
}

/// Continuous admission hands each request to vLLM as it arrives: the batcher must neither wait
/// for a batch (`batch_size = 1`) nor hold requests back while one runs (`max_in_flight` above
/// 1: how many vLLM holds at once, its own scheduler choosing what runs in each step).
fn check_admission(plan: &Plan) -> Result<(), RunError> {
    if !admits_continuously(plan) {
        return Ok(());
    }
    let batching = plan.batching();
    let (key, problem) = if batching.max_in_flight() == 1 {
        (
            "batching.max_in_flight",
            "batching.max_in_flight = 1 would hand vLLM one request at a time: set it to how many requests \
             vLLM may hold at once (e.g. 256)",
        )
    } else if batching.batch_size() > 1 {
        (
            "batching.batch_size",
            "a batching.batch_size above 1 would hold requests back until a batch fills: set it to 1",
        )
    } else {
        return Ok(());
    };
    let message = format!("engine.vllm.admission = \"continuous\" hands each request to vLLM as it arrives; {problem}");
    let message = match plan.place(key) {
        Some(place) => format!("{place}: {message}"),
        None => message,
    };
    Err(RunError::Engine(EngineError::Unsupported(message)))
}

/// Several batches in flight need an engine that runs several generates at once.
fn check_in_flight(plan: &Plan) -> Result<(), RunError> {
    let max_in_flight = plan.batching().max_in_flight();
    let kind = plan.engine().kind();
    if max_in_flight == 1 || !ONE_GENERATE_AT_A_TIME.contains(&kind) {
        return Ok(());
    }
    if admits_continuously(plan) {
        return Ok(());
    }
    let refusal = ConfigError::NotConcurrent { max_in_flight, engine: format!("engine.kind = \"{kind}\"") };
    let message = match plan.place("batching.max_in_flight") {
        Some(place) => format!("{place}: {refusal}"),
        None => refusal.to_string(),
    };
    Err(RunError::Engine(EngineError::Unsupported(message)))
}

/// The completions API takes no conversations: a file workload with `messages` is refused at
/// `workload.path`'s place, naming the first such entry (the synthetic `chat = true` and the
/// ShareGPT format are refused when the scenario is read).
fn check_chat_prompts(plan: &Plan, workload: &Workload) -> Result<(), RunError> {
    let EnginePlan::OpenAi(c) = plan.engine() else { return Ok(()) };
    let api = match c.api {
        crate::engine::openai::Api::Completions => "completions",
        crate::engine::openai::Api::Embeddings => "embeddings",
        crate::engine::openai::Api::Chat => return Ok(()),
    };
    let Some(entry) = workload.first_chat_entry() else { return Ok(()) };
    let refusal = format!(
        "the workload file's entry {} is a conversation (`messages`), but `engine.openai.api` is \"{api}\", \
         which takes text or token ids only: set `engine.openai.api = \"chat\"` (with `batching.batch_size = 1`), \
         or `workload.request_format = \"plain\"` to send each conversation as text",
        entry + 1
    );
    let message = match plan.place("workload.path") {
        Some(place) => format!("{place}: {refusal}"),
        None => refusal,
    };
    Err(RunError::Engine(EngineError::Unsupported(message)))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::{Overrides, parse_str};

    fn refusal(text: &str, sets: &[&str]) -> Option<String> {
        let overrides = Overrides { sets: sets.iter().map(|s| s.to_string()).collect(), seed: None };
        let plan = parse_str(text, "x.toml", Path::new("."), &overrides).expect("a valid scenario");
        preflight(&plan).err().map(|e| e.to_string())
    }

    const HEAD: &str = "[profile]\nkind = \"throughput\"\n[stop]\nmax_requests = 8\n";

    #[test]
    fn several_in_flight_on_an_engine_that_runs_one_generate_is_refused_at_its_place() {
        let engine = "[engine]\nkind = \"sim\"\n";
        let refused = refusal(&format!("{HEAD}{engine}[batching]\nmax_in_flight = 4\n"), &[]);
        assert_eq!(
            refused.as_deref(),
            Some(
                "x.toml:8:17: batching.max_in_flight = 4 needs an engine that runs several generates at once \
                 (an HTTP engine); engine.kind = \"sim\" runs one at a time"
            )
        );
        let set = refusal(&format!("{HEAD}{engine}"), &["batching.max_in_flight=2"]).expect("refused");
        assert!(set.starts_with("--set batching.max_in_flight=2: batching.max_in_flight = 2 needs"), "{set}");
        let axis = format!("{HEAD}{engine}[matrix]\n\"batching.max_in_flight\" = [1, 3]\n");
        let matrix = refusal(&axis, &[]).expect("a combination is refused");
        // The place is the axis value itself.
        assert!(matrix.starts_with("x.toml:8:32: batching.max_in_flight = 3 needs"), "{matrix}");
        assert_eq!(
            refusal(&format!("{HEAD}{engine}[batching]\nmax_in_flight = 1\n"), &[]),
            None,
            "1 is today's batcher"
        );
        // Every engine kind that runs one generate at a time, whichever build reads the scenario.
        let engines = [
            "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"/no/such/model\"\n",
            "[engine]\nkind = \"python\"\n[engine.python]\nclass = \"my_engine:Engine\"\n",
        ];
        for (engine, kind) in engines.iter().zip(["vllm", "python"]) {
            let refused = refusal(&format!("{HEAD}{engine}"), &["batching.max_in_flight=2"]).expect("refused");
            assert!(refused.ends_with(&format!("engine.kind = \"{kind}\" runs one at a time")), "{refused}");
        }
    }

    #[test]
    fn continuous_vllm_takes_several_in_flight_and_needs_them_one_request_each() {
        let engine =
            "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"/no/such/model\"\nadmission = \"continuous\"\n";
        let text = format!("{HEAD}{engine}[batching]\nbatch_size = 1\nmax_in_flight = 64\n");
        let accepted = refusal(&text, &[]).expect("the model is missing");
        assert!(accepted.contains("/no/such/model"), "past the batching checks to the model's: {accepted}");
        let one = refusal(&format!("{HEAD}{engine}[batching]\nbatch_size = 1\n"), &[]).expect("refused");
        assert!(
            one.starts_with("engine.vllm.admission = \"continuous\" hands") && one.contains("max_in_flight = 1"),
            "{one}"
        );
        let batched =
            refusal(&format!("{HEAD}{engine}[batching]\nbatch_size = 8\nmax_in_flight = 64\n"), &[]).expect("refused");
        assert!(batched.starts_with("x.toml:11:14: engine.vllm.admission"), "named at batch_size: {batched}");
    }
}
