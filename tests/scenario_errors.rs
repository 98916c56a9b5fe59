//! What users see when a scenario is wrong: one snapshot of the rendered report per kind of
//! mistake. Review changes with `cargo insta review`; the text is part of the interface.

use std::path::Path;

use batchlab::loadgen::Workload;
use batchlab::scenario::{Overrides, load_file, parse_str};

/// Renders the error for `source` (with `--set`s) as the user would see it.
fn report(source: &str, sets: &[&str]) -> String {
    let overrides = Overrides { sets: sets.iter().map(|s| (*s).to_owned()).collect(), seed: None };
    match parse_str(source, "scenarios/bad.toml", Path::new("scenarios"), &overrides) {
        Ok(plan) => panic!("expected an error, got {plan:#?}"),
        // Workload and template files are named by absolute path.
        Err(e) => e.to_string().replace(env!("CARGO_MANIFEST_DIR"), "[repo]"),
    }
}

macro_rules! check {
    ($name:ident, $source:expr) => {
        check!($name, $source, &[]);
    };
    ($name:ident, $source:expr, $sets:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(report($source, $sets));
        }
    };
}

check!(typo_key, "[batching]\nbatch_sise = 32\n");
check!(wrong_type, "[batching]\nbatch_size = \"32\"\nbatch_timeout = 10\n");
check!(out_of_range, "[engine.sim]\neos_probability = 1.5\nmax_num_seqs = 0\n[stop]\nmax_requests = 0\n");
check!(
    contradictory,
    "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"m\"\n[faults]\nkill_engine = { after_batches = 3 }\n\
     [warmup]\nrequests = 10\nduration = \"5s\"\n[workload]\nprompt_tokens = { dist = \"uniform\", min = 256, max = 64 }\n"
);
check!(syntax_error, "[batching]\nbatch_size = = 3\n");
check!(missing_workload_file, "[workload]\nsource = \"file\"\npath = \"nope.jsonl\"\n");
check!(bad_set, "[batching]\nbatch_size = 8\n", &["batching.batch_sise=64", "batching.batch_timeout=10", "profile"]);
check!(
    many_problems,
    "name = \"\"\n[engine]\nkind = \"simm\"\n[profile]\nkind = \"constant\"\nrates = []\n[expect]\nttft_p99 = \"<= 50\"\ncompleted = \"=> 3\"\n"
);

// Arrivals and shared prefixes (issue 14).
check!(gamma_burstiness_zero, "[profile]\nkind = \"gamma\"\nrate = 10\nburstiness = 0\n");
check!(gamma_burstiness_negative_and_rate_missing, "[profile]\nkind = \"gamma\"\nburstiness = -0.5\n");
check!(gamma_not_finite, "[profile]\nkind = \"gamma\"\nrate = inf\nburstiness = nan\n");
check!(
    rampup_longer_than_the_run,
    "[profile]\nkind = \"poisson\"\nrate = 10\nrampup = \"30s\"\n[stop]\nmax_duration = \"20s\"\n"
);
check!(
    rampup_outlasts_max_requests,
    "[profile]\nkind = \"constant\"\nrates = [1, 100]\nrampup = \"1m\"\n[stop]\nmax_requests = 500\n"
);
check!(rampup_zero, "[profile]\nkind = \"gamma\"\nrate = 1\nrampup = \"0s\"\n");
check!(
    rampup_on_throughput,
    "[profile]\nkind = \"gamma\"\nrate = 1\nrampup = \"5s\"\n",
    &["profile.kind=\"throughput\""]
);
check!(trace_with_a_synthetic_workload, "[profile]\nkind = \"trace\"\n");
check!(
    trace_without_timestamps,
    "[workload]\nsource = \"file\"\npath = \"../tests/fixtures/trace-no-timestamps.jsonl\"\n[profile]\nkind = \"trace\"\n"
);
check!(
    trace_out_of_order,
    "[workload]\nsource = \"file\"\npath = \"../tests/fixtures/trace-unordered.jsonl\"\n[profile]\nkind = \"trace\"\ntime_scale = 0\n"
);
check!(
    trace_negative_and_not_a_number,
    "[workload]\nsource = \"file\"\npath = \"../tests/fixtures/trace-bad-values.jsonl\"\n[profile]\nkind = \"trace\"\n"
);
check!(
    prefix_not_shorter_than_the_prompt,
    "[workload]\nprompt_tokens = { dist = \"uniform\", min = 64, max = 512 }\nprefix_groups = 2\nprefix_tokens = 64\n"
);
check!(prefix_tokens_without_groups, "[workload]\nprefix_tokens = 16\n");
check!(prefix_groups_without_tokens_and_too_many, "[workload]\nprefix_groups = 10001\n");
check!(
    trace_with_skipped_or_filtered_lines,
    "[workload]\nsource = \"file\"\npath = \"data/trace-sample.jsonl\"\nskip_bad_lines = true\nmin_prompt_tokens = 4\n\
     [profile]\nkind = \"trace\"\n"
);
check!(prefix_groups_with_chat_prompts, "[workload]\nchat = true\nprefix_groups = 2\nprefix_tokens = 16\n");
check!(prefix_groups_on_a_file, "[workload]\nsource = \"file\"\npath = \"../Cargo.toml\"\nprefix_groups = 2\n");

// Chat prompts and datasets: the rules between keys, and templates checked at load time.
check!(
    broken_inline_template,
    "[workload]\nchat = true\nrequest_format = \"{% for m in messages %}{{ m.content }}\"\n"
);
check!(broken_template_file, "[workload]\nchat = true\nrequest_format = \"../tests/fixtures/broken_chat.jinja\"\n");
check!(missing_template_file, "[workload]\nchat = true\nrequest_format = \"templates/chatml.jinja\"\n");
check!(
    chat_rules,
    "[workload]\nsystem_prompt = \"Be brief.\"\nrequest_format = 3\n[profile]\nkind = \"synchronous\"\n"
);
check!(
    dataset_rules,
    "[workload]\nsource = \"file\"\npath = \"data/sharegpt-sample.json\"\nformat = \"text\"\n\
     columns = { prompt = \"q\", promt = \"x\" }\nreply_max_tokens = true\ntruncate = true\n"
);
check!(
    dataset_limits,
    "[workload]\nsource = \"file\"\npath = \"data/sharegpt-sample.json\"\nformat = \"csv\"\n\
     min_prompt_tokens = 100\nmax_prompt_tokens = 10\ncolumns = { conversations = \"\" }\n"
);

/// Renders the error of loading the workload of `source` (which must parse), with the checkout's
/// path replaced: bad entries of a dataset are found when the workload is read, before any run.
fn workload_report(source: &str) -> String {
    let plan = parse_str(source, "scenarios/bad.toml", Path::new("scenarios"), &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}"));
    match Workload::from_plan(plan.workload()) {
        Ok(_) => panic!("expected a workload error"),
        Err(e) => e.to_string().replace(env!("CARGO_MANIFEST_DIR"), "[repo]"),
    }
}

macro_rules! check_workload {
    ($name:ident, $source:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(workload_report($source));
        }
    };
}

check_workload!(
    bad_sharegpt_entries,
    "[workload]\nsource = \"file\"\npath = \"../tests/fixtures/bad-sharegpt.json\"\nformat = \"sharegpt\"\n"
);
check_workload!(bad_jsonl_lines, "[workload]\nsource = \"file\"\npath = \"../tests/fixtures/bad-prompts.jsonl\"\n");
check_workload!(
    broken_sharegpt_json,
    "[workload]\nsource = \"file\"\npath = \"../tests/fixtures/broken-sharegpt.json\"\nformat = \"sharegpt\"\n"
);
check_workload!(
    no_prompts_left,
    "[workload]\nsource = \"file\"\npath = \"data/sharegpt-sample.json\"\nformat = \"sharegpt\"\nmin_prompt_tokens = 1000\n"
);

#[test]
fn missing_scenario_file() {
    let e = load_file(Path::new("scenarios/does-not-exist.toml"), &Overrides::default()).unwrap_err();
    insta::assert_snapshot!(e.to_string());
}

// Hardening (issue 15): every bad input refused at once, with its place.
check!(infinite_rate, "[profile]\nkind = \"poisson\"\nrate = inf\n");
check!(non_finite_rates, "[profile]\nkind = \"constant\"\nrates = [1.0, inf, nan]\n");
check!(
    non_finite_floats,
    "[engine.sim]\neos_probability = nan\n[faults]\nslow = { every = 2 }\nslow_factor = inf\n[stop]\nmax_error_rate = -inf\n"
);
check!(infinite_rate_set, "[profile]\nkind = \"poisson\"\nrate = 1.0\n", &["profile.rate=inf"]);
check!(escape_sequence_in_a_line, "[batching]\nbatch_size = \u{1b}[2J8\n");
check!(escape_sequence_in_a_key, "[batching]\n\"\\u001b[2Jbatch\" = 8\n");
check!(duplicate_benchmark_names, "[profile]\nkind = \"constant\"\nrates = [1, 1]\n");
// A `[matrix]` value listed twice names two benchmarks alike (issue 22): the file's place, or the `--set`.
check!(
    matrix_repeated_value,
    "[matrix]\n\"batching.batch_size\" = [8, 32, 8]\n\"batching.batch_timeout\" = [\"1ms\", \"2ms\"]\n"
);
check!(matrix_repeated_value_set, "[matrix]\n\"batching.batch_size\" = [8, 32]\n", &["batching.batch_size=[16, 16]"]);
check!(
    matrix_combination_with_repeated_steps,
    "[profile]\nkind = \"constant\"\nrates = [1]\n[matrix]\n\"profile.rates\" = [[1, 2], [3, 3]]\n"
);
check!(duplicate_concurrency_levels, "[profile]\nkind = \"concurrent\"\nlevels = [4, 8, 4]\n");
check!(name_escapes_results, "name = \"../../escape\"\n");
check!(name_is_absolute, "name = \"/tmp/x\"\n");
check!(name_is_dot_dot, "name = \"..\"\n");
check!(name_is_blank, "name = \"  \"\n");
check!(many_problems_are_capped, &(0..25).map(|i| format!("key_{i} = {i}\n")).collect::<String>());
check!(six_problems_one_line_each, &(0..6).map(|i| format!("key_{i} = {i}\n")).collect::<String>());
check!(
    long_line_is_windowed,
    &format!("[profile]\nkind = \"constant\"\nrates = [{}-1, {}]\n", "1, ".repeat(60), "2, ".repeat(60))
);
check!(scenario_over_one_mib, &format!("# {}\n", "x".repeat(batchlab::scenario::MAX_SCENARIO_BYTES)));

#[test]
fn scenario_file_over_one_mib_is_refused_unread() {
    let dir = std::env::temp_dir().join(format!("batchlab-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("big.toml");
    std::fs::write(&file, "x = 1\n".repeat(400_000)).unwrap();
    let e = load_file(&file, &Overrides::default()).unwrap_err();
    assert_eq!(e.problems.len(), 1, "{e}");
    let message = e.to_string().replace(dir.to_str().unwrap(), "[dir]");
    insta::assert_snapshot!(message);
    std::fs::remove_dir_all(&dir).unwrap();
}

// vLLM's admission mode (issue 25): a value that is neither "batch" nor "continuous", at its line.
check!(vllm_admission_unknown, "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"m\"\nadmission = \"streaming\"\n");
