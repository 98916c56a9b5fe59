//! Profiles become benchmark steps.
//!
//! Most profiles are a fixed list of steps. A sweep is not: its constant-rate steps lie between
//! the request rates measured in its first two steps (synchronous, then throughput), so it cannot
//! be expanded up front. [`StepPlanner`] hands the runner one step at a time and takes the rate it
//! measured in the previous one; [`expand`] says what is known before anything runs.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// How requests are offered. Each variant expands into one or more benchmarks.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProfileSpec {
    /// One request at a time.
    Synchronous,
    /// One benchmark per level, each keeping exactly that many requests in flight.
    Concurrent {
        /// Requests in flight, one benchmark per entry.
        levels: Vec<u32>,
        /// Streams open one by one over this long; see [`Step::rampup`].
        rampup: Option<Duration>,
    },
    /// As fast as possible, with at most `max_concurrency` in flight.
    Throughput {
        /// Most requests in flight.
        max_concurrency: u32,
    },
    /// One benchmark per rate (requests/s), evenly spaced arrivals.
    Constant {
        /// Arrival rates in requests/s, one benchmark per entry.
        rates: Vec<f64>,
        /// Most requests in flight; `None` is unbounded.
        max_concurrency: Option<u32>,
        /// The rate rises linearly from 0 over this long; see [`Step::rampup`].
        rampup: Option<Duration>,
    },
    /// Poisson arrivals at `rate` requests/s.
    Poisson {
        /// Mean arrival rate in requests/s.
        rate: f64,
        /// Seed of the arrival draws; defaults to one derived from the run seed.
        seed: u64,
        /// Most requests in flight; `None` is unbounded.
        max_concurrency: Option<u32>,
        /// The rate rises linearly from 0 over this long; see [`Step::rampup`].
        rampup: Option<Duration>,
    },
    /// Gamma-distributed gaps at mean rate `rate`, as vLLM's `bench serve --burstiness`: shape
    /// `burstiness` (k), scale `1 / (rate · k)`; k = 1 is Poisson, the gaps' CV is `1/√k`.
    Gamma {
        /// Mean arrival rate in requests/s.
        rate: f64,
        /// The gamma shape k, above 0: below 1 burstier than Poisson, above 1 more regular.
        burstiness: f64,
        /// Seed of the arrival draws; defaults to one derived from the run seed.
        seed: u64,
        /// Most requests in flight; `None` is unbounded.
        max_concurrency: Option<u32>,
        /// The rate rises linearly from 0 over this long; see [`Step::rampup`].
        rampup: Option<Duration>,
    },
    /// The workload file's lines at their recorded `timestamp`s, relative to the first line,
    /// divided by `time_scale`; once.
    Trace {
        /// Replay speed: 2.0 replays twice as fast (gaps halved), 0.5 at half speed.
        time_scale: f64,
        /// The recorded times, read from the workload file when the scenario is loaded.
        arrivals: TraceArrivals,
        /// Most requests in flight; `None` is unbounded.
        max_concurrency: Option<u32>,
    },
    /// Synchronous, then throughput, then `rates` constant rates evenly spaced between the two
    /// measured request rates.
    Sweep {
        /// How many constant-rate steps between the two measured rates.
        rates: u32,
        /// Most requests in flight in the throughput and constant steps.
        max_concurrency: u32,
    },
}

/// How one benchmark offers requests. See [`crate::loadgen::Scheduler`] for the exact semantics.
// Externally tagged: serde cannot put a `kind` tag inside `Concurrent`'s bare integer.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// One request at a time.
    Synchronous,
    /// Exactly this many in flight.
    Concurrent(u32),
    /// As many as possible, at most `max_concurrency` in flight.
    Throughput {
        /// Most requests in flight.
        max_concurrency: u32,
    },
    /// Arrivals every `1 / rate` seconds.
    Constant {
        /// Arrival rate in requests/s.
        rate: f64,
        /// Most requests in flight; `None` is unbounded.
        max_concurrency: Option<u32>,
    },
    /// Poisson arrivals at `rate` per second, from `seed`.
    Poisson {
        /// Mean arrival rate in requests/s.
        rate: f64,
        /// Seed of the arrival draws; defaults to one derived from the run seed.
        seed: u64,
        /// Most requests in flight; `None` is unbounded.
        max_concurrency: Option<u32>,
    },
    /// Gamma gaps of shape `burstiness` and mean `1 / rate`, from `seed`.
    Gamma {
        /// Mean arrival rate in requests/s.
        rate: f64,
        /// The gamma shape k; the gaps' coefficient of variation is `1/√k`.
        burstiness: f64,
        /// Seed of the arrival draws.
        seed: u64,
        /// Most requests in flight; `None` is unbounded.
        max_concurrency: Option<u32>,
    },
    /// Arrival `i` at `arrivals[i] / time_scale` after the start; none after the last.
    Trace {
        /// Replay speed: 2.0 halves every gap.
        time_scale: f64,
        /// Recorded offsets from the first line, seconds.
        arrivals: TraceArrivals,
        /// Most requests in flight; `None` is unbounded.
        max_concurrency: Option<u32>,
    },
}

/// A trace's recorded arrival times: seconds after its first line, finite, non-decreasing, the
/// first 0. Shared, not copied, between the plan and its steps; serialized as its length only.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceArrivals(Arc<[f64]>);

impl TraceArrivals {
    /// From recorded timestamps (any origin), as offsets from the first. `None` unless every
    /// timestamp is finite and none is before the one before it.
    pub fn from_timestamps(timestamps: &[f64]) -> Option<TraceArrivals> {
        let first = *timestamps.first()?;
        let ordered = timestamps.windows(2).all(|w| w[0] <= w[1]);
        if !ordered || !timestamps.iter().all(|t| t.is_finite()) {
            return None;
        }
        Some(TraceArrivals(timestamps.iter().map(|t| t - first).collect()))
    }

    /// Seconds after the first arrival, in order.
    pub fn offsets(&self) -> &[f64] {
        &self.0
    }

    /// How many arrivals.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (never, for a loaded trace).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Default for TraceArrivals {
    fn default() -> Self {
        TraceArrivals(Arc::from(Vec::new()))
    }
}

impl Serialize for TraceArrivals {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0.len() as u64)
    }
}

/// One benchmark: a name for reports and how it offers requests.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// `synchronous`, `concurrent@4`, `throughput`, `constant@10.00/s`, `poisson@0.001/s`,
    /// `gamma@50.00/s`, `trace@2.00x`.
    pub name: String,
    /// How the benchmark offers requests.
    pub kind: StepKind,
    /// A ramp-up at the start of the step (constant, poisson, gamma, concurrent; `None` for the
    /// others). For a rate: the intensity rises linearly, `λ(t) = rate · t / T` for `t < T`, then
    /// stays at `rate`; arrivals are the unramped schedule put through the inverse of the
    /// cumulative intensity, so the ramp is exact for every kind (an inhomogeneous Poisson process
    /// for poisson). For `concurrent(n)`: stream `j` (0-based) opens at `T · j / n`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rampup: Option<Duration>,
}

/// The fewest significant digits a rate is named with.
const RATE_DIGITS: usize = 3;

/// A rate as benchmark names show it: two decimals, more where needed for `digits` significant
/// digits, trailing zeros past the second decimal dropped: `10.00`, `2.50`, `0.333`, `0.001`.
pub fn format_rate(rate: f64, digits: usize) -> String {
    let magnitude = if rate.is_finite() && rate > 0.0 { rate.log10().floor() as i64 } else { 0 };
    let decimals = (digits as i64 - 1 - magnitude).clamp(2, 20) as usize;
    let mut text = format!("{rate:.decimals$}");
    if let Some(point) = text.find('.') {
        let keep = point + 3;
        while text.len() > keep && text.ends_with('0') {
            text.pop();
        }
    }
    text
}

/// Labels for a list of rates: [`format_rate`] with the fewest significant digits of 3, 6, 9 or
/// 17 that gives different rates different labels. Equal rates get equal labels.
pub fn rate_labels(rates: &[f64]) -> Vec<String> {
    let mut labels = Vec::new();
    // A few steps, not every count: 17 significant digits tell any two different `f64`s apart.
    for digits in [RATE_DIGITS, 6, 9, 17] {
        labels = rates.iter().map(|&r| format_rate(r, digits)).collect();
        let mut rate_of = std::collections::HashMap::new();
        let distinct = labels.iter().zip(rates).all(|(label, rate)| *rate_of.entry(label).or_insert(rate) == rate);
        if distinct {
            break;
        }
    }
    labels
}

impl Step {
    /// A step named after its kind, e.g. `constant@10.00/s`, without ramp-up; its rate (or a
    /// trace's time scale) to [`RATE_DIGITS`] significant digits.
    pub fn new(kind: StepKind) -> Step {
        let label = |rate: f64| format_rate(rate, RATE_DIGITS);
        Step::labelled(kind, label)
    }

    /// A step named after its kind, its rate (if any) written by `label`.
    fn labelled(kind: StepKind, label: impl FnOnce(f64) -> String) -> Step {
        let name = match &kind {
            StepKind::Synchronous => "synchronous".to_owned(),
            StepKind::Concurrent(n) => format!("concurrent@{n}"),
            StepKind::Throughput { .. } => "throughput".to_owned(),
            StepKind::Constant { rate, .. } => format!("constant@{}/s", label(*rate)),
            StepKind::Poisson { rate, .. } => format!("poisson@{}/s", label(*rate)),
            StepKind::Gamma { rate, .. } => format!("gamma@{}/s", label(*rate)),
            StepKind::Trace { time_scale, .. } => format!("trace@{}x", label(*time_scale)),
        };
        Step { name, kind, rampup: None }
    }

    /// The same step with a ramp-up of `rampup` (`None`: none).
    pub fn with_rampup(mut self, rampup: Option<Duration>) -> Step {
        self.rampup = rampup;
        self
    }

    /// Steps for `kinds`, the rates of their names told apart ([`rate_labels`]).
    fn all_named(kinds: Vec<StepKind>) -> Vec<Step> {
        let rates: Vec<f64> = kinds
            .iter()
            .map(|k| match k {
                StepKind::Constant { rate, .. } | StepKind::Poisson { rate, .. } | StepKind::Gamma { rate, .. } => {
                    *rate
                }
                StepKind::Trace { time_scale, .. } => *time_scale,
                _ => 0.0,
            })
            .collect();
        let labels = rate_labels(&rates);
        kinds.into_iter().zip(labels).map(|(kind, label)| Step::labelled(kind, |_| label)).collect()
    }
}

/// The first name that two steps share, if any: benchmark names key the report, the CSV and the
/// expectations, so a profile whose steps repeat a name (`rates = [1, 1]`) is refused.
pub fn duplicate_name(steps: &[Step]) -> Option<&str> {
    let mut seen = std::collections::HashSet::new();
    steps.iter().map(|s| s.name.as_str()).find(|name| !seen.insert(*name))
}

/// What a profile expands to before anything is measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expansion {
    /// All steps, in order.
    Fixed(Vec<Step>),
    /// Synchronous, throughput at `max_concurrency`, then `rates` constant steps (capped at
    /// `max_concurrency`) at [`sweep_rates`] of the two measured rates. Fewer when the
    /// measurements leave no room between them.
    Sweep {
        /// How many constant-rate steps between the two measured rates.
        rates: u32,
        /// Most requests in flight in the throughput and constant steps.
        max_concurrency: u32,
    },
}

/// The steps of a profile; see [`Expansion`].
pub fn expand(profile: &ProfileSpec) -> Expansion {
    let (steps, rampup) = match profile {
        ProfileSpec::Synchronous => (vec![StepKind::Synchronous], None),
        ProfileSpec::Concurrent { levels, rampup } => {
            (levels.iter().map(|&n| StepKind::Concurrent(n)).collect(), *rampup)
        }
        ProfileSpec::Throughput { max_concurrency } => {
            (vec![StepKind::Throughput { max_concurrency: *max_concurrency }], None)
        }
        ProfileSpec::Constant { rates, max_concurrency, rampup } => (
            rates.iter().map(|&rate| StepKind::Constant { rate, max_concurrency: *max_concurrency }).collect(),
            *rampup,
        ),
        ProfileSpec::Poisson { rate, seed, max_concurrency, rampup } => {
            (vec![StepKind::Poisson { rate: *rate, seed: *seed, max_concurrency: *max_concurrency }], *rampup)
        }
        ProfileSpec::Gamma { rate, burstiness, seed, max_concurrency, rampup } => (
            vec![StepKind::Gamma {
                rate: *rate,
                burstiness: *burstiness,
                seed: *seed,
                max_concurrency: *max_concurrency,
            }],
            *rampup,
        ),
        ProfileSpec::Trace { time_scale, arrivals, max_concurrency } => (
            vec![StepKind::Trace {
                time_scale: *time_scale,
                arrivals: arrivals.clone(),
                max_concurrency: *max_concurrency,
            }],
            None,
        ),
        ProfileSpec::Sweep { rates, max_concurrency } => {
            return Expansion::Sweep { rates: *rates, max_concurrency: *max_concurrency };
        }
    };
    Expansion::Fixed(Step::all_named(steps).into_iter().map(|step| step.with_rampup(rampup)).collect())
}

/// `n` request rates evenly spaced strictly between two measured rates:
/// `lo + (hi - lo) * i / (n + 1)` for `i = 1..=n`.
///
/// Measurements can be degenerate; the result is then shorter rather than a panic or a
/// nonsensical rate, and is always strictly increasing, finite and above 0:
/// - a NaN, infinite or negative rate counts as unmeasured; an unmeasured `sync_rps` counts as 0;
/// - an unmeasured or zero `throughput_rps` gives no rates (there is no upper end);
/// - `throughput_rps < sync_rps` (noise on a saturated system) swaps them: the interesting range is
///   still the one between the two measurements;
/// - equal rates give no rates, and rates too close to tell apart in `f64` are dropped.
pub fn sweep_rates(sync_rps: f64, throughput_rps: f64, n: u32) -> Vec<f64> {
    let measured = |r: f64| (r.is_finite() && r >= 0.0).then_some(r);
    let Some(hi) = measured(throughput_rps).filter(|&r| r > 0.0) else {
        return Vec::new();
    };
    let lo = measured(sync_rps).unwrap_or(0.0);
    let (lo, hi) = if hi < lo { (hi, lo) } else { (lo, hi) };
    let mut rates: Vec<f64> = Vec::with_capacity(n as usize);
    for i in 1..=n {
        let r = lo + (hi - lo) * f64::from(i) / (f64::from(n) + 1.0);
        let above_previous = rates.last().is_none_or(|&p| r > p);
        if r > lo && r < hi && above_previous {
            rates.push(r);
        }
    }
    rates
}

/// Hands out a profile's steps one at a time, computing a sweep's rates once measured.
#[derive(Clone, Debug)]
pub struct StepPlanner {
    expansion: Expansion,
    /// Steps handed out so far.
    issued: usize,
    sync_rps: Option<f64>,
    /// A sweep's constant steps, once computed.
    sweep_steps: Vec<Step>,
}

impl StepPlanner {
    /// A planner for `profile`'s steps, none issued yet.
    pub fn new(profile: &ProfileSpec) -> StepPlanner {
        StepPlanner { expansion: expand(profile), issued: 0, sync_rps: None, sweep_steps: Vec::new() }
    }

    /// The next step, or `None` when the profile is done. `last_measured_rps` is the completed
    /// request rate of the step handed out before; only a sweep uses it, and `None` (the step
    /// measured nothing) is handled as [`sweep_rates`] documents.
    pub fn next_step(&mut self, last_measured_rps: Option<f64>) -> Option<Step> {
        let index = self.issued;
        let step = match &self.expansion {
            Expansion::Fixed(steps) => steps.get(index).cloned(),
            Expansion::Sweep { rates, max_concurrency } => match index {
                0 => Some(Step::new(StepKind::Synchronous)),
                1 => {
                    self.sync_rps = last_measured_rps;
                    Some(Step::new(StepKind::Throughput { max_concurrency: *max_concurrency }))
                }
                _ => {
                    if index == 2 {
                        let lo = self.sync_rps.unwrap_or(f64::NAN);
                        let hi = last_measured_rps.unwrap_or(f64::NAN);
                        let cap = Some(*max_concurrency);
                        let kinds = sweep_rates(lo, hi, *rates)
                            .into_iter()
                            .map(|rate| StepKind::Constant { rate, max_concurrency: cap })
                            .collect();
                        self.sweep_steps = Step::all_named(kinds);
                    }
                    self.sweep_steps.get(index - 2).cloned()
                }
            },
        };
        if step.is_some() {
            self.issued += 1;
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn names(steps: &[Step]) -> Vec<&str> {
        steps.iter().map(|s| s.name.as_str()).collect()
    }

    fn check_fixed(profile: ProfileSpec, expected: &[&str]) {
        let Expansion::Fixed(steps) = expand(&profile) else { panic!("{profile:?} is not fixed") };
        assert_eq!(names(&steps), expected, "{profile:?}");
        // The planner gives the same steps whatever it is told.
        let mut planner = StepPlanner::new(&profile);
        let planned: Vec<_> = std::iter::from_fn(|| planner.next_step(Some(3.0))).collect();
        assert_eq!(planned, steps);
    }

    #[test]
    fn fixed_profiles() {
        check_fixed(ProfileSpec::Synchronous, &["synchronous"]);
        check_fixed(
            ProfileSpec::Concurrent { levels: vec![1, 4, 16], rampup: None },
            &["concurrent@1", "concurrent@4", "concurrent@16"],
        );
        check_fixed(ProfileSpec::Throughput { max_concurrency: 64 }, &["throughput"]);
        check_fixed(
            ProfileSpec::Constant { rates: vec![10.0, 2.5, 0.25], max_concurrency: Some(8), rampup: None },
            &["constant@10.00/s", "constant@2.50/s", "constant@0.25/s"],
        );
        check_fixed(
            ProfileSpec::Poisson { rate: 50.0, seed: 1, max_concurrency: None, rampup: None },
            &["poisson@50.00/s"],
        );
        check_fixed(
            ProfileSpec::Gamma { rate: 5.0, burstiness: 0.5, seed: 1, max_concurrency: None, rampup: None },
            &["gamma@5.00/s"],
        );
        let arrivals = TraceArrivals::from_timestamps(&[10.0, 10.5, 12.0]).unwrap();
        assert_eq!(arrivals.offsets(), [0.0, 0.5, 2.0]);
        check_fixed(ProfileSpec::Trace { time_scale: 2.0, arrivals, max_concurrency: None }, &["trace@2.00x"]);
        // Small rates keep their digits: no two benchmarks named `constant@0.00/s`.
        check_fixed(
            ProfileSpec::Constant { rates: vec![0.001, 0.002, 0.004, 1.0 / 3.0], max_concurrency: None, rampup: None },
            &["constant@0.001/s", "constant@0.002/s", "constant@0.004/s", "constant@0.333/s"],
        );
        // Rates that agree to 3 digits get as many more as tell them apart; equal rates stay equal.
        check_fixed(
            ProfileSpec::Constant { rates: vec![1.001, 1.002, 1.002], max_concurrency: None, rampup: None },
            &["constant@1.001/s", "constant@1.002/s", "constant@1.002/s"],
        );
        check_fixed(
            ProfileSpec::Poisson { rate: 0.0005, seed: 1, max_concurrency: None, rampup: None },
            &["poisson@0.0005/s"],
        );
    }

    #[test]
    fn rate_formats() {
        let cases = [(10.0, "10.00"), (2.5, "2.50"), (0.25, "0.25"), (0.001, "0.001"), (1234.5, "1234.50")];
        for (rate, text) in cases {
            assert_eq!(format_rate(rate, RATE_DIGITS), text, "{rate}");
        }
        let steps = Step::all_named(vec![StepKind::Concurrent(4), StepKind::Concurrent(4)]);
        assert_eq!(duplicate_name(&steps), Some("concurrent@4"));
        assert_eq!(duplicate_name(&Step::all_named(vec![StepKind::Synchronous])), None);
    }

    #[test]
    fn rampup_goes_to_every_step_of_its_profile() {
        let ramp = Some(Duration::from_secs(30));
        let profile = ProfileSpec::Constant { rates: vec![1.0, 2.0], max_concurrency: None, rampup: ramp };
        let Expansion::Fixed(steps) = expand(&profile) else { panic!() };
        assert!(steps.iter().all(|s| s.rampup == ramp), "{steps:?}");
        let json = serde_json::to_string(&steps[0]).unwrap();
        assert!(json.ends_with(r#""rampup":{"secs":30,"nanos":0}}"#), "{json}");
    }

    #[test]
    fn trace_arrivals_must_be_finite_and_ordered() {
        assert_eq!(TraceArrivals::from_timestamps(&[]), None);
        assert_eq!(TraceArrivals::from_timestamps(&[1.0, 0.5]), None);
        assert_eq!(TraceArrivals::from_timestamps(&[1.0, f64::NAN]), None);
        let same = TraceArrivals::from_timestamps(&[3.0, 3.0]).unwrap();
        assert_eq!(same.offsets(), [0.0, 0.0]);
        assert_eq!(serde_json::to_string(&same).unwrap(), "2");
    }

    #[test]
    fn steps_serialize() {
        let steps = [
            StepKind::Synchronous,
            StepKind::Concurrent(4),
            StepKind::Throughput { max_concurrency: 8 },
            StepKind::Constant { rate: 1.5, max_concurrency: None },
            StepKind::Poisson { rate: 2.0, seed: 3, max_concurrency: Some(4) },
        ]
        .map(Step::new);
        let json = serde_json::to_string(&steps).unwrap();
        assert_eq!(
            json,
            r#"[{"name":"synchronous","kind":"synchronous"},{"name":"concurrent@4","kind":{"concurrent":4}},{"name":"throughput","kind":{"throughput":{"max_concurrency":8}}},{"name":"constant@1.50/s","kind":{"constant":{"rate":1.5,"max_concurrency":null}}},{"name":"poisson@2.00/s","kind":{"poisson":{"rate":2.0,"seed":3,"max_concurrency":4}}}]"#
        );
    }

    /// A sweep told `measured` after each step gives these step names.
    fn check_sweep(rates: u32, measured: [Option<f64>; 2], expected: &[&str]) {
        let profile = ProfileSpec::Sweep { rates, max_concurrency: 32 };
        assert_eq!(expand(&profile), Expansion::Sweep { rates, max_concurrency: 32 });
        let mut planner = StepPlanner::new(&profile);
        let mut steps = vec![planner.next_step(None).unwrap()];
        steps.push(planner.next_step(measured[0]).unwrap());
        let mut last = measured[1];
        while let Some(step) = planner.next_step(last) {
            steps.push(step);
            last = Some(1e9); // measured in constant steps: must not matter
        }
        assert_eq!(names(&steps), expected, "{measured:?}");
        assert_eq!(steps[1].kind, StepKind::Throughput { max_concurrency: 32 });
        for s in &steps[2..] {
            assert!(matches!(s.kind, StepKind::Constant { max_concurrency: Some(32), .. }), "{s:?}");
        }
        assert_eq!(planner.next_step(None), None);
    }

    #[test]
    fn sweeps() {
        check_sweep(
            3,
            [Some(2.0), Some(10.0)],
            &["synchronous", "throughput", "constant@4.00/s", "constant@6.00/s", "constant@8.00/s"],
        );
        check_sweep(0, [Some(2.0), Some(10.0)], &["synchronous", "throughput"]);
        check_sweep(1, [None, Some(10.0)], &["synchronous", "throughput", "constant@5.00/s"]);
        check_sweep(2, [Some(2.0), None], &["synchronous", "throughput"]);
        check_sweep(1, [Some(10.0), Some(2.0)], &["synchronous", "throughput", "constant@6.00/s"]);
    }

    fn check_rates(lo: f64, hi: f64, n: u32, expected: &[f64]) {
        assert_eq!(sweep_rates(lo, hi, n), expected, "sweep_rates({lo}, {hi}, {n})");
    }

    #[test]
    fn sweep_rate_edge_cases() {
        check_rates(1.0, 5.0, 3, &[2.0, 3.0, 4.0]);
        check_rates(1.0, 5.0, 0, &[]);
        check_rates(5.0, 1.0, 3, &[2.0, 3.0, 4.0]);
        check_rates(0.0, 4.0, 1, &[2.0]);
        check_rates(f64::NAN, 4.0, 1, &[2.0]);
        check_rates(-3.0, 4.0, 1, &[2.0]);
        check_rates(f64::INFINITY, 4.0, 1, &[2.0]);
        check_rates(1.0, f64::NAN, 3, &[]);
        check_rates(1.0, 0.0, 3, &[]);
        check_rates(1.0, f64::INFINITY, 3, &[]);
        check_rates(0.0, 0.0, 3, &[]);
        check_rates(3.0, 3.0, 3, &[]);
        check_rates(1.0, 1.0 + f64::EPSILON, 5, &[]);
    }

    proptest! {
        #[test]
        fn sweep_rates_are_strictly_increasing_and_inside(lo in 0.0f64..1e6, width in 0.0f64..1e6, n in 0u32..200) {
            let hi = lo + width;
            let rates = sweep_rates(lo, hi, n);
            prop_assert!(rates.len() <= n as usize);
            for pair in rates.windows(2) {
                prop_assert!(pair[0] < pair[1], "{:?}", pair);
            }
            for &r in &rates {
                prop_assert!(r > lo && r < hi && r.is_finite(), "{} not in ({}, {})", r, lo, hi);
            }
            // A visible interval gets all its rates.
            if width > 1e-6 * hi.max(1.0) {
                prop_assert_eq!(rates.len(), n as usize);
            }
        }
    }
}
