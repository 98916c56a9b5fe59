//! `batchlab::tune`: the search on the simulator in virtual time.

use std::path::Path;
use std::time::Duration;

use batchlab::report::Report;
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::Plan;
use batchlab::scenario::{Overrides, keys, parse_str};
use batchlab::tune::{ConfirmRun, Confirmation, Searched, TuneOptions, TuneSteps};
use batchlab::tune::{
    LoadKnob, NOISE_SEEDS, Objective, PLATEAU, Point, STRESS, Space, paired_tie, search, search_counting_runs,
    search_plan, search_with_threads, simpler, stressed as stressed_plan, tie_band, with_point,
};

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
fn the_result_is_within_the_plateau_of_every_point_and_its_snippet_is_a_valid_batching_section() {
    let base = plan(SCENARIO);
    let sim = search_plan(&base, None).expect("a sim scenario");
    let result = search(&sim, &Objective::Goodput, 100, Space::for_plan(&sim)).expect("search");
    assert!(result.points.len() <= 100);
    assert!(result.points.iter().any(|p| p.grid) && result.points.iter().any(|p| !p.grid), "grid, then refinement");
    let best = result.best_point().expect("a feasible point");
    let top = result.points.iter().filter_map(|p| p.score).fold(f64::MIN, f64::max);
    let band = tie_band(result.noise.expect("a noise"));
    assert!(band >= PLATEAU);
    assert!(best.score.unwrap() >= top * (1.0 - band), "{best:?} is more than the tie band below {top}");
    assert!(best.plateau);
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
    assert_eq!(tuned.batching().batch_size(), best.batch_size as usize);
    assert_eq!(tuned.batching().batch_timeout(), best.batch_timeout);
    // And the recommendation is at least as good as the scenario's own settings.
    let own = search(
        &sim,
        &Objective::Goodput,
        1,
        Space { batch_size: (32, 32), batch_timeout_us: (10_000, 10_000), ..Space::for_plan(&sim) },
    )
    .expect("one point");
    assert!(own.points[0].score.unwrap_or(0.0) <= best.score.unwrap() / (1.0 - band));
}

/// The search runs each phase's points on several threads, and its answer is the serial one to
/// the byte, for every seed: the points and their order, the plateau, the stress runs, the
/// recommendation and the noise. The searches cover every phase: a grid, and refinement rounds,
/// that the budget cuts short, plateaus of ties with their seed and stress runs.
#[test]
fn the_search_on_several_threads_gives_the_serial_result_to_the_byte() {
    let threads = |n| std::num::NonZeroUsize::new(n).unwrap();
    let throughput =
        SCENARIO.replace("kind = \"constant\"\nrates = [200.0]", "kind = \"throughput\"\nmax_concurrency = 64");
    let searches: [(&str, &str, usize, bool); 4] = [
        ("a grid the budget cuts short", SCENARIO, 5, false),
        ("constant rate, load searched", SCENARIO, 37, false),
        ("closed loop at its own load (ties)", &throughput, 30, true),
        ("constant rate at its own load", SCENARIO, 25, true),
    ];
    let (mut plateaus, mut stressed) = (0, 0);
    for seed in [5, 6, 7] {
        for (what, text, budget, own_load) in searches {
            let text = text.replace("seed = 5", &format!("seed = {seed}"));
            let sim = search_plan(&plan(&text), None).unwrap();
            let space = if own_load { Space::for_plan(&sim).at_own_load(&sim) } else { Space::for_plan(&sim) };
            let serial = search_with_threads(&sim, &Objective::Goodput, budget, space.clone(), threads(1)).unwrap();
            assert_eq!(serial.points.len(), budget, "{what}, seed {seed}: the budget is spent");
            let json = serde_json::to_string(&serial).unwrap();
            for n in [2, 5] {
                let parallel =
                    search_with_threads(&sim, &Objective::Goodput, budget, space.clone(), threads(n)).unwrap();
                assert_eq!(parallel, serial, "{what}, seed {seed}, {n} threads");
                assert_eq!(serde_json::to_string(&parallel).unwrap(), json, "{what}, seed {seed}, {n} threads");
            }
            plateaus += usize::from(serial.points.iter().filter(|p| p.plateau).count() >= 2);
            stressed += usize::from(serial.points.iter().any(|p| p.stress_score.is_some()));
        }
    }
    // The recommendation's parallel phases ran: plateaus of several points, and their stress runs.
    assert!(plateaus >= 3 && stressed >= 3, "{plateaus} plateaus, {stressed} with stress runs");
}

/// Runs the search takes from a run it made (the same timeout, load and seed, a batch size that
/// run never reached) give each point exactly what a run of its own gives: every point of a
/// search at a light load, where most batch sizes are never reached, run again on its own.
#[test]
fn a_point_taken_from_a_run_proven_the_same_is_what_its_own_run_gives() {
    let text = SCENARIO.replace("rates = [200.0]", "rates = [100.0]");
    let sim = search_plan(&plan(&text), None).unwrap();
    let space = Space::for_plan(&sim).at_own_load(&sim);
    let (result, runs) =
        search_counting_runs(&sim, &Objective::Goodput, 30, space, std::num::NonZeroUsize::new(2).unwrap()).unwrap();
    assert!(runs.reused >= 10 && runs.simulated >= 5, "{runs:?}");
    for p in &result.points {
        let own = run_blocking(&with_point(&sim, p.batch_size, p.batch_timeout, p.load).unwrap(), RunOptions::quiet())
            .expect("run");
        let b = &own.report.benchmarks[0];
        assert_eq!(p.throughput, b.output_tokens_per_s, "{p:?}");
        assert_eq!(p.goodput, b.slo.as_ref().and_then(|s| s.goodput_output_tokens_per_s), "{p:?}");
        assert_eq!(p.latency_p99_ms, b.metric("latency_p99_ms"), "{p:?}");
    }
}

/// Far below capacity, many settings meet the SLO and tie on goodput (the offered load): the
/// recommendation is a plateau point whose goodput at 1.5x the load is within the tie band of the
/// most any plateau point keeps there, and that score is what a run of it at 1.5x gives.
#[test]
fn on_a_plateau_the_recommendation_is_the_one_with_the_most_headroom() {
    let text = SCENARIO.replace("rates = [200.0]", "rates = [300.0]").replace("ttft_ms = 60", "ttft_ms = 100");
    let sim = search_plan(&plan(&text), None).unwrap();
    let space = Space { load: LoadKnob::None, ..Space::for_plan(&sim) };
    let result = search(&sim, &Objective::Goodput, 60, space).expect("search");
    let plateau: Vec<&Point> = result.points.iter().filter(|p| p.plateau).collect();
    assert!(plateau.len() >= 2, "a plateau: {plateau:?}");
    let best = result.best_point().unwrap();
    let stressed: Vec<&Point> = plateau.iter().copied().filter(|p| p.stress_score.is_some()).collect();
    assert!(!stressed.is_empty());
    for p in &stressed {
        let (v, b) = (p.stress_score.unwrap_or(0.0), best.stress_score.unwrap_or(0.0));
        assert!(v * (1.0 - PLATEAU) <= b, "{p:?} has more headroom than {best:?}, beyond 2 %");
    }
    // The recorded headroom is a real run at 1.5x the load.
    let at = with_point(&sim, best.batch_size, best.batch_timeout, best.load).unwrap();
    let run = run_blocking(&stressed_plan(&at, STRESS).unwrap().unwrap(), RunOptions::quiet()).unwrap();
    let goodput = run.report.benchmarks[0].slo.as_ref().and_then(|s| s.goodput_output_tokens_per_s);
    assert_eq!(goodput, best.stress_score);
    // And the headroom differs across the plateau: the tie-break decided something.
    assert!(stressed.iter().any(|p| p.stress_score < best.stress_score), "{stressed:?}");
}

/// Points the data cannot tell apart are said to tie, and the simplest of them is recommended:
/// in a closed loop of 64 clients, a batch of 64 fills at once, so its timeout never fires and
/// every timeout ties (issue 22: 128 / 10 ms beat the recommended 128 / 500 µs on vLLM).
#[test]
fn ties_within_noise_are_marked_and_the_simplest_is_recommended() {
    let text = SCENARIO.replace("kind = \"constant\"\nrates = [200.0]", "kind = \"throughput\"\nmax_concurrency = 64");
    let sim = search_plan(&plan(&text), None).unwrap();
    let space = Space::for_plan(&sim).at_own_load(&sim);
    let result = search(&sim, &Objective::Goodput, 40, space).expect("search");
    let best = result.best_point().expect("a feasible point");
    let tied: Vec<&Point> = result.points.iter().filter(|p| p.tied).collect();
    assert!(best.tied && best.plateau, "{best:?}");
    assert!(tied.len() >= 2, "timeouts that never fire tie: {:?}", result.points);
    for p in &tied {
        assert!(p.plateau);
        assert_ne!(simpler(p, best), std::cmp::Ordering::Less, "{p:?} is simpler than the recommended {best:?}");
    }
    // Of the tied timeouts of its batch size, the longest is the one recommended, though a shorter
    // one scored a few tenths of a percent more.
    let same: Vec<&&Point> = tied.iter().filter(|p| p.batch_size == best.batch_size).collect();
    assert!(same.len() >= 2, "{tied:?}");
    assert!(same.iter().all(|p| p.batch_timeout <= best.batch_timeout), "{same:?}");
    assert!(same.iter().any(|p| p.score > best.score), "the tie rule decided something: {same:?}");
    // A point off the plateau is never tied; a plateau point not tied lost at 1.5x by more than 2 %.
    let best_stress = tied.iter().filter_map(|p| p.stress_score).fold(f64::MIN, f64::max);
    for p in result.points.iter().filter(|p| !p.tied) {
        if let (true, Some(v)) = (p.plateau, p.stress_score) {
            assert!(v < best_stress * (1.0 - PLATEAU), "{p:?} is within 2 % of {best_stress}");
        }
    }
}

/// The noise is the relative standard deviation of the best point's score over runs with
/// NOISE_SEEDS seeds: the search's own run and the next seeds' runs, measured again here.
#[test]
fn the_noise_is_the_spread_of_the_best_point_over_seeds() {
    let sim = search_plan(&plan(SCENARIO), None).unwrap();
    let result = search(&sim, &Objective::Goodput, 30, Space::for_plan(&sim)).expect("search");
    let high = result.points.iter().filter_map(|p| p.score).fold(f64::MIN, f64::max);
    let top = result.points.iter().find(|p| p.score == Some(high)).unwrap();
    let at = with_point(&sim, top.batch_size, top.batch_timeout, top.load).unwrap();
    let scores: Vec<f64> = (0..NOISE_SEEDS)
        .map(|k| {
            let seed = sim.seed() + k;
            let p = at.with_sets(&[keys::SEED.to(seed), keys::SIM_SEED.to(seed)]).unwrap();
            let run = run_blocking(&p, RunOptions::quiet()).unwrap();
            run.report.benchmarks[0].slo.as_ref().and_then(|s| s.goodput_output_tokens_per_s).unwrap_or(0.0)
        })
        .collect();
    assert_eq!(scores[0], top.score.unwrap(), "the first seed is the search's own run");
    let mean = scores.iter().sum::<f64>() / scores.len() as f64;
    let sd = (scores.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (scores.len() - 1) as f64).sqrt();
    let noise = result.noise.unwrap();
    assert!((noise - sd / mean).abs() < 1e-12, "{noise} against {}", sd / mean);
    assert!(noise > 0.0, "seeds change the workload's draws: {scores:?}");
    assert_eq!(tie_band(noise), (1.96 * 2f64.sqrt() * noise).max(PLATEAU));
}

/// The paired check: over the same seeds, a point ties with the best when their mean difference
/// is within a 95 % paired t interval, or within 2 %; the workload's draws, shared by both runs
/// of a seed, cancel.
#[test]
fn a_tie_is_judged_on_the_difference_over_the_same_seeds() {
    let best = [1000.0, 1300.0, 800.0, 1100.0, 900.0];
    // 5 % below in every seed: the seeds vary by ±20 %, the difference does not: not a tie.
    let below: Vec<f64> = best.iter().map(|v| v * 0.95).collect();
    assert!(!paired_tie(&below, &best));
    // 1 % below: within 2 %.
    let close: Vec<f64> = best.iter().map(|v| v * 0.99).collect();
    assert!(paired_tie(&close, &best));
    // 5 % below on average, but the difference itself swings by ±15 %: the data cannot tell.
    let noisy = [1000.0 * 0.80, 1300.0 * 1.10, 800.0 * 0.90, 1100.0 * 1.05, 900.0 * 0.90];
    assert!(paired_tie(&noisy, &best));
    // Above the best always ties (the best by one seed is not the best by every seed).
    assert!(paired_tie(&best.map(|v| v * 1.1), &best));
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
    // The recommendation is on the plateau: within the tie band of the highest throughput under the bound.
    let top = result
        .points
        .iter()
        .filter(|p| p.latency_p99_ms.is_some_and(|l| l <= 150.0))
        .filter_map(|p| p.throughput)
        .fold(f64::NEG_INFINITY, f64::max);
    let band = tie_band(result.noise.unwrap());
    assert!(best.throughput.unwrap() >= top * (1.0 - band), "{best:?} against {top}");
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
    assert!(matches!(with_profile.engine(), batchlab::scenario::plan::EnginePlan::Sim(_)));
}

#[path = "common/cli.rs"]
mod cli_common;

/// A caller of `tune` on a simulator scenario: it shows nothing, and is never asked to confirm.
struct SimOnly;

impl TuneSteps for SimOnly {
    fn searched(&mut self, _: &Searched<'_>) {}

    fn confirm(&mut self, _: &Plan, _: usize, _: &Path, _: ConfirmRun) -> Option<Report> {
        panic!("a simulator scenario is not confirmed")
    }

    fn confirmed(&mut self, _: &[Confirmation]) {
        panic!("a simulator scenario is not confirmed")
    }
}

/// The CLI prints the snippet and writes report.json (with the search in `tune`, and the
/// recommendation run once as its benchmark) and report.html with the tuning section.
#[test]
fn the_cli_writes_the_search_into_report_json_and_report_html() {
    let dir = cli_common::temp_dir("tune-cli");
    let scenario = dir.join("tune.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let out = dir.join("out");
    let run = cli_common::batchlab(&[
        "tune",
        scenario.to_str().unwrap(),
        "--keep-load",
        "--budget",
        "30",
        "--output",
        out.to_str().unwrap(),
    ]);
    let stdout = cli_common::text(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", cli_common::text(&run.stderr));
    assert!(stdout.contains("[batching]\nbatch_size = "), "{stdout}");
    let report = batchlab::report::read_report(&out).expect("report.json");
    let tune = report.tune.as_ref().expect("the tune section");
    assert_eq!(tune.result.points.len(), 30);
    let best = tune.result.best_point().expect("a recommendation");
    assert!(stdout.contains(&format!("batch_size = {}\n", best.batch_size)), "{stdout}");
    assert!(tune.confirmed.is_empty(), "a sim scenario is not confirmed");
    // The report's one benchmark is the recommendation, run again: it gives the predicted goodput.
    assert_eq!(report.benchmarks.len(), 1);
    let goodput = report.benchmarks[0].slo.as_ref().and_then(|s| s.goodput_output_tokens_per_s);
    assert_eq!(goodput, best.score);
    assert_eq!(
        report.scenario.pointer("/batching/batch_size").and_then(|v| v.as_u64()),
        Some(u64::from(best.batch_size))
    );
    // The library's workflow, on the same inputs, recommends what the CLI printed and records
    // the same search.
    let options = TuneOptions {
        max_latency_p99: None,
        keep_load: true,
        budget: 30,
        threads: None,
        profile: None,
        confirm: 3,
        output: Some(dir.join("library")),
    };
    let tuned = batchlab::tune::tune(&plan(SCENARIO), &options, &mut SimOnly).expect("tune");
    let snippet = tuned.tune.result.snippet().expect("a recommendation");
    assert!(stdout.contains(&format!("recommended (best {}):\n\n{snippet}", tuned.objective)), "{stdout}");
    assert_eq!(tuned.tune.result, tune.result);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let section = &html[html.find("id=\"tuning\"").expect("a tuning section")..];
    let section = &section[..section.find("</section>").unwrap_or(section.len())];
    assert!(section.contains("<svg") && section.contains("recommended"), "{section}");
    assert!(section.contains(&format!("batch_size = {}", best.batch_size)), "the snippet");
}
