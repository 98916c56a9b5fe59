//! `batchlab::tune`: the search on the simulator in virtual time.

use std::path::Path;
use std::time::Duration;

use batchlab::scenario::{Overrides, parse_str};
use batchlab::tune::{Objective, Space, search, search_plan};

const SCENARIO: &str = r#"
name = "tune"
seed = 5
[engine]
kind = "sim"
[engine.sim]
time = "virtual"
[batching]
batch_size = 32
batch_timeout = "10ms"
[workload]
prompt_tokens = { dist = "uniform", min = 32, max = 256 }
output_tokens = 32
[profile]
kind = "constant"
rates = [200.0]
[stop]
max_requests = 160
[slo]
ttft_ms = 60
"#;

fn plan(text: &str) -> batchlab::scenario::Plan {
    parse_str(text, "tune.toml", Path::new("."), &Overrides::default()).expect("valid scenario")
}

#[test]
fn the_result_beats_every_grid_point_and_its_snippet_is_a_valid_batching_section() {
    let base = plan(SCENARIO);
    let sim = search_plan(&base, None).expect("a sim scenario");
    let result = search(&sim, &Objective::Goodput, 100, Space::for_plan(&sim)).expect("search");
    assert!(result.points.len() <= 100);
    assert!(result.points.iter().any(|p| p.grid) && result.points.iter().any(|p| !p.grid), "grid, then refinement");
    let best = result.best_point().expect("a feasible point");
    for p in &result.points {
        assert!(p.score.unwrap_or(f64::MIN) <= best.score.unwrap(), "{p:?} beats the best {best:?}");
    }
    // No point is run twice.
    for (i, a) in result.points.iter().enumerate() {
        for b in &result.points[..i] {
            assert!((a.batch_size, a.batch_timeout, a.load) != (b.batch_size, b.batch_timeout, b.load), "{a:?} twice");
        }
    }
    // The snippet replaces the scenario's [batching] and parses to the best point's settings.
    let snippet = result.snippet().expect("snippet");
    let start = SCENARIO.find("[batching]").unwrap();
    let end = SCENARIO.find("[workload]").unwrap();
    let tuned = format!("{}{snippet}{}", &SCENARIO[..start], &SCENARIO[end..]);
    let tuned = plan(&tuned);
    assert_eq!(tuned.batching.batch_size(), best.batch_size as usize);
    assert_eq!(tuned.batching.batch_timeout(), best.batch_timeout);
    // And the recommendation is at least as good as the scenario's own settings.
    let own = search(
        &sim,
        &Objective::Goodput,
        1,
        Space { batch_size: (32, 32), batch_timeout_us: (10_000, 10_000), ..Space::for_plan(&sim) },
    )
    .expect("one point");
    assert!(own.points[0].score.unwrap_or(0.0) <= best.score.unwrap());
}

#[test]
fn without_an_slo_it_maximizes_throughput_under_the_latency_bound() {
    let text = SCENARIO.replace("[slo]\nttft_ms = 60\n", "");
    let sim = search_plan(&plan(&text), None).unwrap();
    let bound = Duration::from_millis(150);
    let objective = Objective::ThroughputUnder { max_latency_p99: bound };
    let result = search(&sim, &objective, 40, Space::for_plan(&sim)).expect("search");
    let best = result.best_point().expect("feasible");
    assert!(best.latency_p99_ms.unwrap() <= 150.0);
    for p in result.points.iter().filter(|p| p.latency_p99_ms.is_some_and(|l| l <= 150.0)) {
        assert!(p.throughput.unwrap() <= best.throughput.unwrap());
    }
    // Goodput needs an SLO.
    assert!(search(&sim, &Objective::Goodput, 10, Space::for_plan(&sim)).is_err());
}

#[test]
fn a_real_engine_scenario_needs_a_profile() {
    let text = SCENARIO.replace(
        "kind = \"sim\"\n[engine.sim]\ntime = \"virtual\"",
        "kind = \"vllm\"\n[engine.vllm]\nmodel = \"/nonexistent\"",
    );
    let err = search_plan(&plan(&text), None).unwrap_err().to_string();
    assert!(err.contains("--profile"), "{err}");
    let with_profile = search_plan(&plan(&text), Some(Path::new("scenarios/profiles/example.toml"))).expect("profile");
    assert!(matches!(with_profile.engine, batchlab::scenario::plan::EnginePlan::Sim(_)));
}
