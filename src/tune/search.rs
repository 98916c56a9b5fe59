//! The search of `batchlab tune` (batch size, batch timeout, and the load: the throughput
//! profile's `max_concurrency` or the constant profile's rate), its bounds ([`Space::for_plan`])
//! and its recommendation.
//!
//! # The search
//! 1. **Coarse grid**: a log-spaced grid over the space (4 values per dimension between its
//!    bounds, always including the scenario's own settings' neighbourhood via the bounds).
//! 2. **Refinement**: a pattern search from the best points found so far. Each dimension's step
//!    starts at the grid's spacing (a factor in log space); every round tries, around the current
//!    best few points, each dimension one step up and one step down (values the grid never had),
//!    keeps any improvement, and halves the log-step when a round improves nothing. It stops when
//!    the budget of points is spent or the steps are below one unit of each dimension.
//!
//! Points already evaluated are never run twice, so the budget counts distinct runs.
//!
//! # On several threads
//! The runs of each phase are independent of each other (the grid's points, one refinement
//! round's, the recommendation's seed runs and its stress runs): each phase first lists them,
//! exactly as the serial search would try them (the budget and the already-evaluated points
//! applied), then runs them on a pool of threads ([`super::parallel`]) and takes the results in
//! that order. The result is the same, to the byte, for any number of threads
//! ([`search_with_threads`]; [`search`] uses every CPU the process may use).
//!
//! # The recommendation: only what the data supports
//! Not simply the highest score, which picks by accident among settings the data cannot tell
//! apart (`recommend` has the rule, docs/tuning.md the why):
//! - the **noise** is the best point's relative spread over [`NOISE_SEEDS`] seeds;
//! - the **plateau** is the points within [`tie_band`] of the best that also tie with it over the
//!   same seeds ([`paired_tie`]: a paired 95 % interval, or [`PLATEAU`], 2 %);
//! - each is run again at [`STRESS`] (1.5×) its load, and those within 2 % of the best there are
//!   **tied** (said in the report and the CLI);
//! - the recommendation is the [`simpler`] tied point: the smallest batch, then the longest
//!   timeout.
//!
//! The result is within the tie band of every point evaluated, grid points included.

use crate::loadgen::ProfileSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use super::memo::{Memo, RunKey, Variant};
use super::parallel::{available_threads, in_order, try_in_order};
use super::ties::relative_sd;
pub use super::ties::{NOISE_SEEDS, PLATEAU, paired_tie, simpler, tie_band};
use super::{LoadKnob, Objective, Point, SearchRuns, Space, TuneError, TuneResult};
use crate::engine::sim::{Profile, SimConfig, TimeMode};
use crate::metrics::result::BenchmarkResult;
use crate::run::{RunOptions, preflight, run_plan_benchmarks};
use crate::scenario::plan::{EnginePlan, Plan};
use crate::scenario::{Set, keys};

/// The plan the search runs: the scenario itself when its engine is the simulator in virtual
/// time; a real-engine scenario with a calibration `profile` runs on a simulator built from it
/// (seeded with the scenario's seed, its generate timeout kept). Either way without `[matrix]`
/// and `[expect]`.
pub fn search_plan(plan: &Plan, profile: Option<&Path>) -> Result<Plan, TuneError> {
    let mut sets = Vec::new();
    match (plan.engine(), profile) {
        (EnginePlan::Sim(_), None) => sets.push(keys::SIM_TIME.to("virtual")),
        (_, Some(path)) => {
            let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
            sets.push(keys::ENGINE.table([
                keys::ENGINE_KIND.to("sim"),
                keys::SIM_TIME.to("virtual"),
                keys::SIM_SEED.to(plan.seed()),
                keys::SIM_PROFILE.to(path.to_string_lossy()),
            ]));
            if let Some(timeout) = plan.batching().generate_timeout() {
                sets.push(keys::GENERATE_TIMEOUT.to(timeout));
            }
        }
        (_, None) => {
            return Err(TuneError::Unsupported(
                "tune searches in the simulator: this scenario's engine is not `sim`; give a calibration \
                 profile (`--profile profile.toml`, written by `batchlab calibrate`)"
                    .into(),
            ));
        }
    }
    sets.push(keys::EXPECT.table([]));
    plan.with_changes(&[keys::MATRIX.path()], &sets).map_err(|e| {
        // The lowering read the profile (once: every point's plan takes it from there); a bad
        // one is told as one.
        if let Some(path) = profile
            && let Err(bad) = Profile::load(path)
        {
            return TuneError::Profile(format!("{}: {bad}", path.display()));
        }
        TuneError::Scenario(e)
    })
}

/// `plan` with one point's settings.
pub fn with_point(plan: &Plan, batch_size: u32, batch_timeout: Duration, load: Option<f64>) -> Result<Plan, TuneError> {
    #[cfg(test)]
    POINT_PLANS.with(|n| n.set(n.get() + 1));
    Ok(plan.with_sets(&point_sets(plan.profile(), batch_size, batch_timeout, load))?)
}

// How many point plans this thread built: a test's count of the plans the memo spared.
#[cfg(test)]
thread_local! {
    static POINT_PLANS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn score(objective: &Objective, b: &BenchmarkResult) -> Option<f64> {
    match objective {
        Objective::Goodput => b.slo.as_ref()?.goodput_output_tokens_per_s,
        Objective::ThroughputUnder { max_latency_p99 } => {
            let p99 = b.metric("latency_p99_ms")?;
            (p99 <= max_latency_p99.as_secs_f64() * 1e3).then_some(b.output_tokens_per_s?)
        }
    }
}

/// Log-spaced values between `lo` and `hi` (inclusive), `n` of them.
fn log_grid(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if n <= 1 || hi <= lo {
        return vec![lo];
    }
    let (a, b) = (lo.ln(), hi.ln());
    (0..n).map(|i| (a + (b - a) * i as f64 / (n - 1) as f64).exp()).collect()
}

/// A point in the search's log space: (batch size, timeout µs, load).
type Key = (u32, u64, u64);

/// A point the search will run: its settings (clamped to the space) and its key.
#[derive(Clone, Copy)]
struct Candidate {
    key: Key,
    batch_size: u32,
    batch_timeout: Duration,
    load: Option<f64>,
}

struct Search<'a> {
    plan: &'a Plan,
    objective: &'a Objective,
    space: &'a Space,
    budget: usize,
    threads: NonZeroUsize,
    points: Vec<Point>,
    seen: BTreeMap<Key, usize>,
    /// Every run made, for the runs provably the same as one of them ([`super::memo`]).
    memo: Memo,
}

impl Search<'_> {
    fn clamp(&self, bs: f64, to_us: f64, load: f64) -> (u32, u64, Option<f64>) {
        let s = self.space;
        let bs = (bs.round() as u32).clamp(s.batch_size.0, s.batch_size.1);
        let to = (to_us.round() as u64).clamp(s.batch_timeout_us.0, s.batch_timeout_us.1);
        // Timeouts on a 100 µs raster, so neighbouring refinements do not rerun the same point.
        let to = (to.div_ceil(100) * 100).max(100);
        let load = match s.load {
            LoadKnob::None => None,
            LoadKnob::MaxConcurrency => Some(load.round().clamp(s.load_range.0, s.load_range.1)),
            LoadKnob::Rate => {
                Some((load * 1000.0).round().clamp(s.load_range.0 * 1000.0, s.load_range.1 * 1000.0) / 1000.0)
            }
        };
        (bs, to, load)
    }

    fn candidate(&self, bs: f64, to_us: f64, load: f64) -> Candidate {
        let (batch_size, to, load) = self.clamp(bs, to_us, load);
        let key = (batch_size, to, load.map_or(0, |l| (l * 1000.0) as u64));
        Candidate { key, batch_size, batch_timeout: Duration::from_micros(to), load }
    }

    /// Runs each of `wanted` (settings before clamping) that was not run before, once, in
    /// parallel, and adds them to the points in `wanted`'s order, as one at a time would: up to
    /// the budget. Returns `false` when the budget left some out.
    fn eval_all(&mut self, wanted: &[(f64, f64, f64)], grid: bool) -> Result<bool, TuneError> {
        let mut fresh: Vec<Candidate> = Vec::new();
        let mut fresh_keys = BTreeSet::new();
        let mut within_budget = true;
        for &(bs, to_us, load) in wanted {
            let c = self.candidate(bs, to_us, load);
            if self.seen.contains_key(&c.key) || fresh_keys.contains(&c.key) {
                continue;
            }
            if self.points.len() + fresh.len() >= self.budget {
                within_budget = false;
                break;
            }
            fresh_keys.insert(c.key);
            fresh.push(c);
        }
        self.leaders_first(
            &fresh,
            |c| (RunKey::of(Variant::Scenario, c.batch_timeout, c.load), c.batch_size),
            |c| {
                let _ = self.run_point(c, grid);
            },
        );
        let points = try_in_order(self.threads, &fresh, |c| self.run_point(c, grid))?;
        for (c, point) in fresh.iter().zip(points) {
            self.points.push(point);
            self.seen.insert(c.key, self.points.len() - 1);
        }
        Ok(within_budget)
    }

    /// One point's run.
    fn run_point(&self, c: &Candidate, grid: bool) -> Result<Point, TuneError> {
        let mut point = Point {
            batch_size: c.batch_size,
            batch_timeout: c.batch_timeout,
            load: c.load,
            throughput: None,
            goodput: None,
            latency_p99_ms: None,
            score: None,
            grid,
            front: false,
            plateau: false,
            stress_score: None,
            tied: false,
        };
        let key = RunKey::of(Variant::Scenario, c.batch_timeout, c.load);
        // The memo first: a point it answers needs no plan.
        let benchmark = self.memo.get_or_run(key, c.batch_size as usize, || {
            let plan = with_point(self.plan, c.batch_size, c.batch_timeout, c.load)?;
            first_benchmark(&plan).map_err(|source| TuneError::Run { point: point.label(self.space.load), source })
        })?;
        if let Some(b) = &benchmark {
            point.throughput = b.output_tokens_per_s;
            point.goodput = b.slo.as_ref().and_then(|s| s.goodput_output_tokens_per_s);
            point.latency_p99_ms = b.metric("latency_p99_ms");
            point.score = score(self.objective, b);
        }
        Ok(point)
    }

    /// Before a phase's runs (`run` each of `items`, in parallel, in order): runs first, in
    /// parallel, the item of the largest batch size among those that differ only in it (`group`
    /// gives an item's run and batch size), so that the phase's other runs can be taken from it
    /// where they are provably the same ([`Memo`]). The phase's answer is the same either way;
    /// a failure here is left for the phase's own run of the item to meet, in its order.
    fn leaders_first<T: Sync>(&self, items: &[T], group: impl Fn(&T) -> (RunKey, u32), run: impl Fn(&T) + Sync) {
        // Per group: its run, its largest batch size, that item's index, and how many items.
        let mut groups: Vec<(RunKey, u32, usize, usize)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let (key, batch_size) = group(item);
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => {
                    g.3 += 1;
                    if batch_size > g.1 {
                        (g.1, g.2) = (batch_size, i);
                    }
                }
                None => groups.push((key, batch_size, i, 1)),
            }
        }
        // A group of one gains nothing from going first.
        let first: Vec<usize> = groups.iter().filter(|g| g.3 > 1).map(|g| g.2).collect();
        let _ = in_order(self.threads, &first, |&i| {
            run(&items[i]);
            Ok::<(), ()>(())
        });
    }

    fn best(&self, k: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.points.len()).filter(|&i| self.points[i].score.is_some()).collect();
        idx.sort_by(|&a, &b| {
            let (pa, pb) = (&self.points[a], &self.points[b]);
            pb.score.unwrap_or(f64::MIN).total_cmp(&pa.score.unwrap_or(f64::MIN)).then(a.cmp(&b))
        });
        idx.truncate(k);
        idx
    }
}

/// The load factor of the headroom check: plateau points are run again at this multiple of their
/// load (rate, concurrency) and the one that keeps the highest score there is recommended.
pub const STRESS: f64 = 1.5;

/// Most plateau points the headroom check runs (the best by score).
const MAX_STRESSED: usize = 24;

/// `plan` with its load (rates, concurrency) multiplied by `factor`; `None` for a profile
/// without one (synchronous, trace, sweep).
pub fn stressed(plan: &Plan, factor: f64) -> Result<Option<Plan>, TuneError> {
    let scale = |c: u32| u64::from(((f64::from(c) * factor).ceil() as u32).max(1));
    let set = match plan.profile() {
        ProfileSpec::Throughput { max_concurrency } => keys::MAX_CONCURRENCY.to(scale(*max_concurrency)),
        ProfileSpec::Concurrent { levels, .. } => keys::LEVELS.to(levels.iter().map(|c| scale(*c)).collect()),
        ProfileSpec::Constant { rates, .. } => keys::RATES.to(rates.iter().map(|r| r * factor).collect()),
        ProfileSpec::Poisson { rate, .. } | ProfileSpec::Gamma { rate, .. } => keys::RATE.to(rate * factor),
        ProfileSpec::Synchronous | ProfileSpec::Trace { .. } | ProfileSpec::Sweep { .. } => return Ok(None),
    };
    Ok(Some(plan.with_sets(&[set])?))
}

/// The first benchmark of `plan`'s run (the search's plans have one): the middle level, the
/// plan's own engine and its results in memory, no report (the search's plan was checked once,
/// by [`preflight`], before the first point).
fn first_benchmark(plan: &Plan) -> Result<Option<BenchmarkResult>, crate::run::RunError> {
    Ok(run_plan_benchmarks(plan, RunOptions::quiet())?.benchmarks.into_iter().next())
}

/// The scores of points `of` over [`NOISE_SEEDS`] seeds each, run in parallel: the scenario's
/// seed (the run the search made) and the next ones (the workload's draws, the arrivals and the
/// simulator's own randomness all change with it). A seed that misses the objective counts as no
/// score at all: that is noise too.
fn seed_scores(s: &Search<'_>, of: &[usize]) -> Result<Vec<Vec<f64>>, TuneError> {
    let runs: Vec<(usize, u64)> = of.iter().flat_map(|&i| (1..NOISE_SEEDS).map(move |k| (i, k))).collect();
    let group = |&(i, k): &(usize, u64)| {
        let p = &s.points[i];
        (RunKey::of(Variant::Seed(k), p.batch_timeout, p.load), p.batch_size)
    };
    s.leaders_first(&runs, group, |&(i, k)| _ = seed_score(s, i, k));
    let mut more = try_in_order(s.threads, &runs, |&(i, k)| seed_score(s, i, k))?.into_iter();
    Ok(of
        .iter()
        .map(|&i| {
            let first = s.points[i].score.unwrap_or(0.0);
            std::iter::once(first).chain(more.by_ref().take(NOISE_SEEDS as usize - 1)).collect()
        })
        .collect())
}

/// Point `i`'s score with the scenario's seed `+ k`.
fn seed_score(s: &Search<'_>, i: usize, k: u64) -> Result<f64, TuneError> {
    let p = &s.points[i];
    let key = RunKey::of(Variant::Seed(k), p.batch_timeout, p.load);
    let benchmark = s.memo.get_or_run(key, p.batch_size as usize, || {
        let at = with_point(s.plan, p.batch_size, p.batch_timeout, p.load)?;
        let seed = s.plan.seed().wrapping_add(k) & (i64::MAX as u64);
        let plan = at.with_sets(&[keys::SEED.to(seed), keys::SIM_SEED.to(seed)])?;
        first_benchmark(&plan)
            .map_err(|source| TuneError::Run { point: format!("{} (seed +{k})", p.label(s.space.load)), source })
    })?;
    Ok(benchmark.as_ref().and_then(|b| score(s.objective, b)).unwrap_or(0.0))
}

/// Why the stress runs stopped before the last plateau point.
enum StressStop {
    /// The profile has no load to raise.
    NoLoad,
    Failed(TuneError),
}

/// Point `i`'s score at [`STRESS`] times its load; `None` when it misses the objective there.
fn stress_score(s: &Search<'_>, i: usize) -> Result<Option<f64>, StressStop> {
    let p = &s.points[i];
    let key = RunKey::of(Variant::Stress, p.batch_timeout, p.load);
    let benchmark = s.memo.get_or_run(key, p.batch_size as usize, || {
        let at = with_point(s.plan, p.batch_size, p.batch_timeout, p.load).map_err(StressStop::Failed)?;
        let Some(plan) = stressed(&at, STRESS).map_err(StressStop::Failed)? else { return Err(StressStop::NoLoad) };
        first_benchmark(&plan).map_err(|source| {
            StressStop::Failed(TuneError::Run { point: format!("{} (load x{STRESS})", p.label(s.space.load)), source })
        })
    })?;
    Ok(benchmark.as_ref().and_then(|b| score(s.objective, b)))
}

/// The recommendation and the noise (the best point's relative spread over seeds). The points
/// within [`tie_band`] of the highest score are run over the same seeds as the best; those that
/// tie with it there ([`paired_tie`]) are the plateau. Each is run again at [`STRESS`] times its
/// load; those within [`PLATEAU`] of the best score there still tie (`tied`), and the
/// recommendation is the [`simpler`] of them. The data cannot tell tied points apart, so the tie
/// goes to the simpler setting, not to whichever happened to be a little ahead. Without a load to
/// raise, the plateau ties.
fn recommend(s: &mut Search<'_>) -> Result<(Option<usize>, Option<f64>), TuneError> {
    let ranked = s.best(usize::MAX);
    let Some(&first) = ranked.first() else { return Ok((None, None)) };
    let Some(top) = s.points[first].score else { return Ok((None, None)) };
    let best_scores = seed_scores(s, &[first])?.swap_remove(0);
    let noise = relative_sd(&best_scores);
    let band = tie_band(noise);
    let near: Vec<usize> = ranked
        .iter()
        .copied()
        .skip(1)
        .take(MAX_STRESSED - 1)
        .take_while(|&i| s.points[i].score.is_some_and(|v| v >= top - top.abs() * band))
        .collect();
    let mut plateau = vec![first];
    for (i, scores) in near.iter().zip(seed_scores(s, &near)?) {
        if paired_tie(&scores, &best_scores) {
            plateau.push(*i);
        }
    }
    for &i in &plateau {
        s.points[i].plateau = true;
    }
    let within = |v: f64, of: f64| v >= of - of.abs() * PLATEAU;
    // Each is stressed on its own, even one that ran like another at the scenario's load: a
    // timeout that never fired there may fire at the higher load.
    let candidates: Vec<usize> = plateau.iter().copied().take(MAX_STRESSED).collect();
    let mut tied = candidates.clone();
    if candidates.len() >= 2 {
        let group = |&i: &usize| {
            let p = &s.points[i];
            (RunKey::of(Variant::Stress, p.batch_timeout, p.load), p.batch_size)
        };
        s.leaders_first(&candidates, group, |&i| _ = stress_score(s, i));
        let (scores, stop) = in_order(s.threads, &candidates, |&i| stress_score(s, i));
        for (&i, score) in candidates.iter().zip(scores) {
            s.points[i].stress_score = score;
        }
        let stressable = match stop {
            None => true,
            Some(StressStop::NoLoad) => false,
            Some(StressStop::Failed(e)) => return Err(e),
        };
        if stressable {
            let best_stress = candidates.iter().filter_map(|&i| s.points[i].stress_score).fold(f64::MIN, f64::max);
            tied = if best_stress == f64::MIN {
                // Nothing meets the objective at the higher load: the plateau's top stands alone.
                vec![candidates[0]]
            } else {
                candidates
                    .iter()
                    .copied()
                    .filter(|&i| s.points[i].stress_score.is_some_and(|v| within(v, best_stress)))
                    .collect()
            };
        }
    }
    for &i in &tied {
        s.points[i].tied = true;
    }
    let best = tied.iter().copied().min_by(|&a, &b| simpler(&s.points[a], &s.points[b]).then(a.cmp(&b)));
    Ok((best, Some(noise)))
}

/// Searches `plan`'s batching settings (see the module docs), its runs on every CPU the process
/// may use ([`search_with_threads`] with [`available_threads`]). `plan` must run on the
/// simulator ([`search_plan`]); its profile must be one benchmark. `budget` counts distinct runs.
pub fn search(plan: &Plan, objective: &Objective, budget: usize, space: Space) -> Result<TuneResult, TuneError> {
    search_with_threads(plan, objective, budget, space, available_threads())
}

/// [`search`] with its independent runs on `threads` threads (1: one after the other). The
/// result is the same for any number: the points, their order, the recommendation; a failure
/// is the one the serial search meets first.
pub fn search_with_threads(
    plan: &Plan,
    objective: &Objective,
    budget: usize,
    space: Space,
    threads: NonZeroUsize,
) -> Result<TuneResult, TuneError> {
    search_counting_runs(plan, objective, budget, space, threads).map(|(result, _)| result)
}

/// [`search_with_threads`], and how many runs it made on the simulator and how many it took
/// from a run proven the same (which may differ with the threads; the result does not).
pub fn search_counting_runs(
    plan: &Plan,
    objective: &Objective,
    budget: usize,
    space: Space,
    threads: NonZeroUsize,
) -> Result<(TuneResult, SearchRuns), TuneError> {
    if !matches!(plan.engine(), EnginePlan::Sim(SimConfig { time: TimeMode::Virtual, .. })) {
        return Err(TuneError::Unsupported("tune runs its points on the simulator in virtual time".into()));
    }
    if matches!(objective, Objective::Goodput) && !plan.slo().is_set() {
        return Err(TuneError::Unsupported(
            "no [slo] to compute goodput against: add one (or `--slo`), or name a latency bound (`--max-latency-p99 500ms`)".into(),
        ));
    }
    // Once, for every point: the points change only the batch size, the timeout, the load and
    // the seeds, none of which preflight judges.
    preflight(plan).map_err(TuneError::Preflight)?;
    let budget = budget.max(1);
    let mut s = Search {
        plan,
        objective,
        space: &space,
        budget,
        threads,
        points: Vec::new(),
        seen: BTreeMap::new(),
        memo: Memo::default(),
    };
    let dims = if space.load == LoadKnob::None { 2 } else { 3 };
    // 1. Coarse grid: as many log-spaced values per dimension as half the budget allows (≥ 2).
    let per_dim = ((budget as f64 / 2.0).powf(1.0 / dims as f64).floor() as usize).clamp(2, 6);
    let bs_grid = log_grid(f64::from(space.batch_size.0), f64::from(space.batch_size.1), per_dim);
    let to_grid = log_grid(space.batch_timeout_us.0 as f64, space.batch_timeout_us.1 as f64, per_dim);
    let load_grid = if dims == 3 { log_grid(space.load_range.0, space.load_range.1, per_dim) } else { vec![0.0] };
    let mut grid = Vec::new();
    for &l in &load_grid {
        for &b in &bs_grid {
            grid.extend(to_grid.iter().map(|&t| (b, t, l)));
        }
    }
    s.eval_all(&grid, true)?;
    // 2. Refinement: a pattern search around the best few, in log steps that halve.
    let ratio = |lo: f64, hi: f64| if hi > lo { (hi / lo).ln() / (per_dim - 1) as f64 } else { 0.0 };
    let mut steps = [
        ratio(f64::from(space.batch_size.0), f64::from(space.batch_size.1)),
        ratio(space.batch_timeout_us.0 as f64, space.batch_timeout_us.1 as f64),
        if dims == 3 { ratio(space.load_range.0, space.load_range.1) } else { 0.0 },
    ];
    while s.points.len() < budget && steps.iter().any(|&st| st > 0.02) {
        let before = s.best(1).first().and_then(|&i| s.points[i].score);
        let mut round = Vec::new();
        for i in s.best(3) {
            let p = &s.points[i];
            let base = [f64::from(p.batch_size), p.batch_timeout.as_micros() as f64, p.load.unwrap_or(0.0)];
            for (d, &step) in steps.iter().enumerate() {
                if step <= 0.02 {
                    continue;
                }
                for dir in [1.0, -1.0] {
                    let mut v = base;
                    v[d] *= (dir * step).exp();
                    round.push((v[0], v[1], v[2]));
                }
            }
        }
        if !s.eval_all(&round, false)? {
            break;
        }
        let after = s.best(1).first().and_then(|&i| s.points[i].score);
        if after <= before {
            for st in &mut steps {
                *st /= 2.0;
            }
        }
        if s.best(1).is_empty() {
            break;
        }
    }
    let (best, noise) = recommend(&mut s)?;
    let runs = s.memo.counts();
    let mut points = s.points;
    let pts: Vec<(Option<f64>, Option<f64>)> = points.iter().map(Point::result).collect();
    for (p, on) in points.iter_mut().zip(crate::metrics::pareto::front(&pts)) {
        p.front = on;
    }
    Ok((TuneResult { points, best, space, noise }, runs))
}

/// The search's bounds: policy, so here, on the data type the report carries.
impl Space {
    /// The default bounds for `plan`: batch size 1…512, timeout 0.5 ms…200 ms, and the load from
    /// 1/8 to 4× the scenario's own value.
    pub fn for_plan(plan: &Plan) -> Space {
        let (load, load_range) = match &plan.profile() {
            ProfileSpec::Throughput { max_concurrency } => {
                let c = f64::from(*max_concurrency);
                (LoadKnob::MaxConcurrency, ((c / 8.0).max(1.0).round(), (c * 4.0).round()))
            }
            ProfileSpec::Constant { rates, .. } if rates.len() == 1 => {
                (LoadKnob::Rate, (rates[0] / 8.0, rates[0] * 4.0))
            }
            _ => (LoadKnob::None, (0.0, 0.0)),
        };
        Space { batch_size: (1, 512), batch_timeout_us: (500, 200_000), load, load_range }
    }

    /// The space at `plan`'s own load (`tune --keep-load`): no load dimension, and batch sizes
    /// only up to the most requests the profile keeps in flight, when it bounds them (a batch
    /// can never be larger, so larger sizes are the same point).
    pub fn at_own_load(self, plan: &Plan) -> Space {
        let in_flight = match &plan.profile() {
            ProfileSpec::Throughput { max_concurrency } => Some(*max_concurrency),
            ProfileSpec::Concurrent { levels, .. } => levels.iter().copied().max(),
            ProfileSpec::Constant { max_concurrency, .. }
            | ProfileSpec::Poisson { max_concurrency, .. }
            | ProfileSpec::Gamma { max_concurrency, .. }
            | ProfileSpec::Trace { max_concurrency, .. } => *max_concurrency,
            ProfileSpec::Synchronous => Some(1),
            ProfileSpec::Sweep { .. } => None,
        };
        let hi = in_flight.map_or(self.batch_size.1, |n| self.batch_size.1.min(n.max(self.batch_size.0)));
        Space { batch_size: (self.batch_size.0, hi), load: LoadKnob::None, load_range: (0.0, 0.0), ..self }
    }
}

/// One point's settings as sets: the batch size, the batch timeout, and the load where the
/// profile has the knob (a throughput profile's `max_concurrency`, a constant one's rate).
pub(crate) fn point_sets(
    profile: &ProfileSpec,
    batch_size: u32,
    batch_timeout: Duration,
    load: Option<f64>,
) -> Vec<Set> {
    let mut sets = vec![keys::BATCH_SIZE.to(u64::from(batch_size)), keys::BATCH_TIMEOUT.to(batch_timeout)];
    match (profile, load) {
        (ProfileSpec::Throughput { .. }, Some(c)) => {
            sets.push(keys::MAX_CONCURRENCY.to(u64::from(c.round().max(1.0) as u32)))
        }
        (ProfileSpec::Constant { .. }, Some(r)) => sets.push(keys::RATES.to(vec![r])),
        _ => {}
    }
    sets
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::files::disk_reads;
    use crate::scenario::{Overrides, load_file};

    /// A tune of scenarios/slo.toml on a calibration profile reads the profile from disk once:
    /// the search plan's lowering reads it, and every point's plan (seeds and stress runs too) is
    /// lowered again from what that lowering kept. The file is gone before the search starts, so
    /// no reader at all touches it there.
    #[test]
    fn a_tune_reads_its_profile_once() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = std::env::temp_dir().join(format!("batchlab-tune-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let profile = dir.join("profile.toml");
        std::fs::copy(root.join("scenarios/profiles/example.toml"), &profile).unwrap();
        let plan = load_file(&root.join("scenarios/slo.toml"), &Overrides::default()).unwrap();
        let sim = search_plan(&plan, Some(&profile)).unwrap();
        assert_eq!(disk_reads(&profile), 1, "the search plan's lowering read profile.toml");
        std::fs::remove_dir_all(&dir).unwrap();
        let threads = NonZeroUsize::new(2).unwrap();
        let (result, runs) =
            search_counting_runs(&sim, &Objective::Goodput, 6, Space::for_plan(&sim), threads).unwrap();
        assert_eq!(result.points.len(), 6, "the budget is spent");
        assert!(runs.simulated > 6, "seed runs too: {runs:?}");
        assert_eq!(disk_reads(&profile), 1, "profile.toml is read once");
    }

    /// The memo is asked before a point's plan is built: on one thread, the search builds one
    /// plan per run it makes, and none for the runs the memo answers.
    #[test]
    fn a_point_the_memo_answers_builds_no_plan() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let plan = load_file(&root.join("scenarios/slo.toml"), &Overrides::default()).unwrap();
        let sim = search_plan(&plan, None).unwrap();
        let built = || POINT_PLANS.with(std::cell::Cell::get);
        let before = built();
        let one = NonZeroUsize::MIN;
        let (_, runs) = search_counting_runs(&sim, &Objective::Goodput, 6, Space::for_plan(&sim), one).unwrap();
        assert!(runs.reused > 0, "the memo answered some runs: {runs:?}");
        assert_eq!(built() - before, runs.simulated, "a plan for each run made, none for a run taken: {runs:?}");
    }

    /// The search's plan is checked once, before its first point (its points run on the middle
    /// level, which checks nothing): a plan every run would refuse (two generates in flight on
    /// the simulator) is refused with the run's reason, not searched into points without a score.
    #[test]
    fn a_plan_a_run_refuses_is_refused_before_the_first_point() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let overrides = Overrides { sets: vec!["batching.max_in_flight=2".into()], seed: None };
        let plan = load_file(&root.join("scenarios/slo.toml"), &overrides).unwrap();
        let sim = search_plan(&plan, None).unwrap();
        let one = NonZeroUsize::MIN;
        let refused = search_counting_runs(&sim, &Objective::Goodput, 4, Space::for_plan(&sim), one).unwrap_err();
        assert!(matches!(refused, TuneError::Preflight(_)), "{refused}");
        assert!(refused.to_string().contains("batching.max_in_flight = 2 needs an engine"), "{refused}");
    }
}

#[cfg(test)]
mod point_tests {
    use super::*;
    use crate::scenario::{Overrides, load_file};

    /// A point's plan is the plan the same settings given as `--set`s make (the text the
    /// workflows wrote before the sets were typed), a constant rate and a concurrency alike.
    #[test]
    fn a_point_is_its_sets() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (file, load, set) in
            [("slo.toml", 2.0, "profile.rates=[2]"), ("throughput.toml", 7.4, "profile.max_concurrency=7")]
        {
            let plan = load_file(&root.join("scenarios").join(file), &Overrides::default()).unwrap();
            let point = with_point(&plan, 8, Duration::from_micros(2500), Some(load)).unwrap();
            let sets = ["batching.batch_size=8", "batching.batch_timeout=2500us", set];
            let overrides = Overrides { sets: sets.iter().map(|s| (*s).to_owned()).collect(), seed: None };
            let written = load_file(&root.join("scenarios").join(file), &overrides).unwrap();
            assert_eq!(point, written, "{file}");
            assert_eq!(to_toml_text(&point), to_toml_text(&written), "{file}");
        }
    }

    fn to_toml_text(plan: &Plan) -> String {
        crate::scenario::to_toml(plan)
    }
}
