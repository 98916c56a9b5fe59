//! What users see when a scenario is wrong: one snapshot of the rendered report per kind of
//! mistake. Review changes with `cargo insta review`; the text is part of the interface.

use std::path::Path;

use batchlab::scenario::{Overrides, load_file, parse_str};

/// Renders the error for `source` (with `--set`s) as the user would see it.
fn report(source: &str, sets: &[&str]) -> String {
    let overrides = Overrides { sets: sets.iter().map(|s| (*s).to_owned()).collect(), seed: None };
    match parse_str(source, "scenarios/bad.toml", Path::new("scenarios"), &overrides) {
        Ok(plan) => panic!("expected an error, got {plan:#?}"),
        Err(e) => e.to_string(),
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

#[test]
fn missing_scenario_file() {
    let e = load_file(Path::new("scenarios/does-not-exist.toml"), &Overrides::default()).unwrap_err();
    insta::assert_snapshot!(e.to_string());
}
