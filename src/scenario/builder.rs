//! Scenarios built in Rust, held to the same rules as files.
//!
//! The builder records `key=value` assignments and hands them, as overrides of an empty file, to
//! the same parse-and-validate path as `--set`: there is no second validator to drift out of step.

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml_edit::{Array, Value};

use super::error::ScenarioError;
use super::keys;
use super::overrides::Overrides;
use super::plan::{Comparison, Layer, Plan, Slo, TokenDist, Written};
use super::units::format_duration;
use crate::engine::ResolvedEngineConfig;
use crate::engine::faults::{FaultTrigger, Faults, ProcessFault};
use crate::engine::sim::CostModel;

/// Builds a [`Plan`]; start with `Scenario::builder()`. Later calls win; switching the engine,
/// workload source or profile kind forgets the settings of the previous one.
#[derive(Clone, Debug, Default)]
pub struct ScenarioBuilder {
    sets: Vec<(String, String)>,
    base_dir: Option<PathBuf>,
}

fn duration(d: Duration) -> Value {
    Value::from(format_duration(d))
}

fn int(v: u64) -> Value {
    Value::from(i64::try_from(v).unwrap_or(i64::MAX))
}

impl ScenarioBuilder {
    /// An empty builder: every key at its default (the sim engine in virtual time, name `builder`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets any key, e.g. `.set("batching.batch_size", 64)`: the escape hatch for keys without a
    /// method of their own. Problems are reported like `--set` ones.
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Self {
        let text = value.into().decorated("", "").to_string();
        self.sets.push((key.to_owned(), text));
        self
    }

    fn forget(mut self, prefix: &str) -> Self {
        self.sets.retain(|(key, _)| !key.starts_with(prefix));
        self
    }

    /// What relative workload and model paths resolve against (default: the current directory).
    pub fn base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }

    /// `name`: the scenario's name, in reports and the default output directory.
    pub fn name(self, name: &str) -> Self {
        self.set("name", name)
    }
    /// `description`: free text carried into the report.
    pub fn description(self, text: &str) -> Self {
        self.set("description", text)
    }
    /// `seed`: the run seed every component's default seed is derived from.
    pub fn seed(self, seed: u64) -> Self {
        self.set("seed", int(seed))
    }

    /// The simulated engine in virtual time.
    pub fn sim_virtual(self) -> Self {
        self.forget("engine.").set("engine.kind", "sim").set("engine.sim.time", "virtual")
    }
    /// The simulated engine in real time.
    pub fn sim_real(self) -> Self {
        self.forget("engine.").set("engine.kind", "sim").set("engine.sim.time", "real")
    }
    /// `engine.sim.seed`: the simulator's own seed, instead of one derived from the run seed.
    pub fn sim_seed(self, seed: u64) -> Self {
        self.set("engine.sim.seed", int(seed))
    }
    /// `engine.sim.*`: every field of the simulator's cost model (the rows of its key table).
    pub fn sim_cost(mut self, cost: &CostModel) -> Self {
        for key in keys::COST_KEYS {
            // A cost printed only when set is set at 0 too: it overrides a profile's.
            let item = (key.print)(cost).unwrap_or_else(|| toml_edit::value(format_duration(Duration::ZERO)));
            if let Ok(v) = item.into_value() {
                self = self.set(&format!("engine.sim.{}", key.name), v);
            }
        }
        self
    }
    /// `engine.sim.*`: every scheduler limit of the simulator (the rows of its key table).
    pub fn sim_scheduler(mut self, limits: &ResolvedEngineConfig) -> Self {
        for key in keys::SCHED_KEYS {
            if let Some(v) = (key.print)(limits).and_then(|item| item.into_value().ok()) {
                self = self.set(&format!("engine.sim.{}", key.name), v);
            }
        }
        self
    }
    /// `engine.sim.profile`: a calibrated profile (docs/simulation.md); keys set after it override it.
    pub fn sim_profile(self, path: impl AsRef<Path>) -> Self {
        self.set("engine.sim.profile", path.as_ref().to_string_lossy().into_owned())
    }
    /// The vLLM engine with `model`; other `engine.vllm.*` keys through [`Self::set`].
    pub fn vllm(self, model: impl AsRef<Path>) -> Self {
        let model = model.as_ref().to_string_lossy().into_owned();
        self.forget("engine.").set("engine.kind", "vllm").set("engine.vllm.model", model)
    }
    /// A Python protocol engine, `class = "module:Class"`; `path`, `args.*` and the other
    /// `engine.python.*` keys through [`Self::set`].
    pub fn python(self, class: &str) -> Self {
        self.forget("engine.").forget("faults.").set("engine.kind", "python").set("engine.python.class", class)
    }

    /// `batching.batch_size`: most requests per batch (>= 1).
    pub fn batch_size(self, n: usize) -> Self {
        self.set("batching.batch_size", int(n as u64))
    }
    /// `batching.batch_timeout`: how long the oldest request waits before a partial batch goes (> 0).
    pub fn batch_timeout(self, t: Duration) -> Self {
        self.set("batching.batch_timeout", duration(t))
    }
    /// `batching.generate_timeout`: a generate running longer fails its batch (default: none).
    pub fn generate_timeout(self, t: Duration) -> Self {
        self.set("batching.generate_timeout", duration(t))
    }
    /// `batching.stall_timeout`: a generate that makes no progress (no output, no CPU time) this
    /// long fails with `engine_stalled`, and the engine is not used again (default: none for the
    /// simulator; 30 s for a real engine, a library caller's included).
    pub fn stall_timeout(self, t: Duration) -> Self {
        self.set("batching.stall_timeout", duration(t))
    }

    /// Synthetic prompts of fixed lengths.
    pub fn synthetic(self, prompt_tokens: u32, output_tokens: u32) -> Self {
        self.synthetic_dist(&TokenDist::Fixed { value: prompt_tokens }, &TokenDist::Fixed { value: output_tokens })
    }
    /// Synthetic prompts with lengths drawn from distributions.
    pub fn synthetic_dist(self, prompt_tokens: &TokenDist, output_tokens: &TokenDist) -> Self {
        self.forget("workload.")
            .set("workload.source", "synthetic")
            .set("workload.prompt_tokens", keys::token_dist_value(prompt_tokens))
            .set("workload.output_tokens", keys::token_dist_value(output_tokens))
    }
    /// `workload.seed`: the synthetic workload's seed, instead of one derived from the run seed.
    pub fn workload_seed(self, seed: u64) -> Self {
        self.set("workload.seed", int(seed))
    }
    /// Prompts from a JSONL file (relative to [`Self::base_dir`]).
    pub fn workload_file(self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref().to_string_lossy().into_owned();
        self.forget("workload.").set("workload.source", "file").set("workload.path", path)
    }

    /// `profile.kind = "synchronous"`: one request at a time.
    pub fn profile_synchronous(self) -> Self {
        self.forget("profile.").set("profile.kind", "synchronous")
    }
    /// `profile.kind = "concurrent"`: one benchmark per level, each keeping that many requests in flight.
    pub fn profile_concurrent(self, levels: &[u32]) -> Self {
        let levels: Array = levels.iter().map(|l| i64::from(*l)).collect();
        self.forget("profile.").set("profile.kind", "concurrent").set("profile.levels", levels)
    }
    /// `profile.kind = "throughput"`: as fast as possible, at most `max_concurrency` in flight.
    pub fn profile_throughput(self, max_concurrency: u32) -> Self {
        self.forget("profile.")
            .set("profile.kind", "throughput")
            .set("profile.max_concurrency", i64::from(max_concurrency))
    }
    /// `profile.kind = "constant"`: one benchmark per rate (requests/s), evenly spaced arrivals.
    pub fn profile_constant(self, rates: &[f64]) -> Self {
        let rates: Array = rates.iter().copied().collect();
        self.forget("profile.").set("profile.kind", "constant").set("profile.rates", rates)
    }
    /// `profile.kind = "poisson"`: Poisson arrivals at `rate` requests/s.
    pub fn profile_poisson(self, rate: f64) -> Self {
        self.forget("profile.").set("profile.kind", "poisson").set("profile.rate", rate)
    }
    /// `profile.kind = "sweep"`: synchronous, throughput, then `rates` constant rates between the two.
    pub fn profile_sweep(self, rates: u32) -> Self {
        self.forget("profile.").set("profile.kind", "sweep").set("profile.rates", i64::from(rates))
    }
    /// For constant, poisson (optional there) and after `profile_sweep`.
    pub fn max_concurrency(self, n: u32) -> Self {
        self.set("profile.max_concurrency", i64::from(n))
    }

    /// `stop.max_requests`: stop admitting after this many measured requests.
    pub fn max_requests(self, n: u64) -> Self {
        self.set("stop.max_requests", int(n))
    }
    /// `stop.max_duration`: stop admitting after measuring this long.
    pub fn max_duration(self, d: Duration) -> Self {
        self.set("stop.max_duration", duration(d))
    }
    /// `stop.max_errors`: stop admitting after this many measured requests failed.
    pub fn max_errors(self, n: u64) -> Self {
        self.set("stop.max_errors", int(n))
    }
    /// `stop.max_error_rate`: stop admitting once this share (0 to 1) of measured requests failed.
    pub fn max_error_rate(self, rate: f64) -> Self {
        self.set("stop.max_error_rate", rate)
    }

    /// `warmup.requests`: run this many unmeasured requests first (replaces a warm-up duration).
    pub fn warmup_requests(self, n: u64) -> Self {
        self.forget("warmup.").set("warmup.requests", int(n))
    }
    /// `warmup.duration`: run unmeasured requests this long first (replaces a warm-up count).
    pub fn warmup_duration(self, d: Duration) -> Self {
        self.forget("warmup.").set("warmup.duration", duration(d))
    }
    /// `cooldown.requests`: keep the load on for this many unmeasured requests after measuring.
    pub fn cooldown_requests(self, n: u64) -> Self {
        self.forget("cooldown.").set("cooldown.requests", int(n))
    }
    /// `cooldown.duration`: keep the load on, unmeasured, this long after measuring.
    pub fn cooldown_duration(self, d: Duration) -> Self {
        self.forget("cooldown.").set("cooldown.duration", duration(d))
    }

    /// Sets every `[faults]` key in which `faults` differs from the defaults, e.g.
    /// `.faults(&Faults { fail_batch: FaultTrigger::every(7), ..Faults::default() })`. Additive:
    /// keys set by earlier calls and left at their default here stay as they were.
    pub fn faults(mut self, faults: &Faults) -> Self {
        let default = Faults::default();
        for key in keys::FAULT_KEYS {
            let (v, d) = ((key.print)(faults), (key.print)(&default));
            if v.as_ref().map(ToString::to_string) == d.as_ref().map(ToString::to_string) {
                continue;
            }
            let name = format!("faults.{}", key.name);
            self = match v.and_then(|item| item.into_value().ok()) {
                Some(v) => self.set(&name, v),
                None => self.forget(&name),
            };
        }
        self
    }
    /// A fault trigger by its `[faults]` name (`fail_batch`, `short_output`, `extra_output`,
    /// `wrong_id`, `panic`, `slow`, `hang`).
    pub fn fault(self, name: &str, trigger: &FaultTrigger) -> Self {
        match keys::trigger_value(trigger) {
            Some(v) => self.set(&format!("faults.{name}"), v),
            None => self.forget(&format!("faults.{name}")),
        }
    }
    /// `faults.fail_batch = { every = n }`: every `n`-th generate fails with an engine error.
    pub fn fault_fail_batch_every(self, n: u64) -> Self {
        self.faults(&Faults { fail_batch: FaultTrigger::every(n), ..Faults::default() })
    }
    /// `faults.hang = { every = n }` with `hang_for`: every `n`-th generate blocks, then fails.
    pub fn fault_hang_every(self, n: u64, hang_for: Duration) -> Self {
        self.faults(&Faults { hang: FaultTrigger::every(n), hang_for, ..Faults::default() })
    }
    /// `faults.slow` with `slow_factor`: triggered generates return `slow_factor` times later.
    pub fn fault_slow(self, trigger: &FaultTrigger, slow_factor: f64) -> Self {
        self.faults(&Faults { slow: trigger.clone(), slow_factor, ..Faults::default() })
    }
    /// `faults.start_fails`: the engine never starts.
    pub fn fault_start_fails(self, start_fails: bool) -> Self {
        self.faults(&Faults { start_fails, ..Faults::default() })
    }
    /// `faults.start_delay`: start takes this much longer.
    pub fn fault_start_delay(self, start_delay: Duration) -> Self {
        self.faults(&Faults { start_delay, ..Faults::default() })
    }
    /// SIGKILL vLLM's EngineCore during generate `after_batches + 1` (multiprocess vLLM only).
    pub fn fault_kill_engine(self, after_batches: u64) -> Self {
        self.faults(&Faults { kill_engine: Some(ProcessFault { after_batches }), ..Faults::default() })
    }

    /// `[slo]`: sets every objective `slo` sets (replacing earlier ones), e.g.
    /// `.slo(&Slo { ttft_ms: Some(50.0), ..Slo::default() })`.
    pub fn slo(mut self, slo: &Slo) -> Self {
        self = self.forget("slo.");
        let objectives = [
            ("ttft_ms", slo.ttft_ms),
            ("tpot_ms", slo.tpot_ms),
            ("itl_ms", slo.itl_ms),
            ("latency_ms", slo.latency_ms),
        ];
        for (key, bound) in objectives {
            if let Some(ms) = bound {
                self = self.set(&format!("slo.{key}"), ms);
            }
        }
        self
    }

    /// Adds `metric op value` to `[expect]`.
    pub fn expect(self, metric: &str, op: Comparison, value: f64) -> Self {
        self.set(&format!("expect.{metric}"), format!("{} {value}", op.symbol()))
    }

    /// `output.dir`: where report.json and report.csv are written.
    pub fn output_dir(self, dir: impl AsRef<Path>) -> Self {
        self.set("output.dir", dir.as_ref().to_string_lossy().as_ref())
    }
    /// `output.requests_jsonl`: also write one line per request to requests.jsonl.
    pub fn requests_jsonl(self, yes: bool) -> Self {
        self.set("output.requests_jsonl", yes)
    }

    /// The key paths set so far, in order.
    #[cfg(test)]
    pub(super) fn paths(&self) -> Vec<&str> {
        self.sets.iter().map(|(key, _)| key.as_str()).collect()
    }

    /// Validates and returns the plan; the default name is "builder".
    pub fn build(self) -> Result<Plan, ScenarioError> {
        let sets = self.sets.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let overrides = Overrides { sets, seed: None };
        let base_dir = self.base_dir.unwrap_or_else(|| PathBuf::from("."));
        let layer = Layer { arg: "builder:", remove: Vec::new(), sets: overrides.sets, seed: None };
        super::lower_source(Written {
            text: "".into(),
            file: "builder".into(),
            base_dir: base_dir.into(),
            layers: vec![layer],
            files: super::files::Files::default(),
        })
    }
}
