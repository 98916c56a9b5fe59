//! The real vLLM engine, through an embedded CPython (pyo3, cargo feature `vllm`).
//!
//! This is the only module that touches Python. [`VllmEngine::new`] is cheap and needs no Python,
//! so the runner can build one in any build; Python starts in [`Engine::start`], on the batcher's
//! engine thread, which then makes every Python call. Without the `vllm` feature `start` fails
//! with a message saying how to rebuild.
//!
//! The interpreter is the venv's from `just setup-vllm` (`$BATCHLAB_HOME/venv`): it is started
//! with that venv's `python` as its executable, so `sys.prefix` is the venv and vLLM's child
//! processes (multiprocess mode) run the venv's interpreter. `start` checks both and that
//! `import vllm` resolves inside the venv.
//!
//! Python-side work lives in `glue.py`: it builds `vllm.LLM`, runs `LLM.generate` and flattens each
//! `RequestOutput` into plain values; `output.rs` maps those onto [`EngineOutput`]. vLLM reports
//! `*_ts` stats on `CLOCK_MONOTONIC` (our clock), so [`Engine::clock_domain`] is `Monotonic`.
//! Stats exist only with `disable_log_stats = false` (the default here, unlike plain `vllm.LLM`).

// Used by `python` only; compiled (and tested) in every build because it needs no Python.
#[cfg_attr(not(feature = "vllm"), allow(dead_code))]
mod output;
#[cfg(feature = "vllm")]
mod python;

use std::path::{Path, PathBuf};

use crate::engine::{ClockDomain, Engine, EngineError, EngineInfo, EngineOutput, EngineRequest};
use crate::scenario::plan::VllmPlan;

/// `$BATCHLAB_HOME`, else `~/.cache/batchlab`: where the venv and models live.
pub fn batchlab_home() -> PathBuf {
    if let Some(home) = std::env::var_os("BATCHLAB_HOME") {
        return PathBuf::from(home);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/batchlab")
}

/// The venv `just setup-vllm` builds: `$BATCHLAB_HOME/venv`.
pub fn default_venv() -> PathBuf {
    batchlab_home().join("venv")
}

/// A vLLM engine. See the module docs.
pub struct VllmEngine {
    plan: VllmPlan,
    venv: PathBuf,
    #[cfg(feature = "vllm")]
    session: Option<python::Session>,
}

impl VllmEngine {
    /// An engine for `plan`, using the venv at [`default_venv`]. Cheap: nothing is loaded until
    /// [`Engine::start`].
    pub fn new(plan: VllmPlan) -> Self {
        VllmEngine {
            plan,
            venv: default_venv(),
            #[cfg(feature = "vllm")]
            session: None,
        }
    }

    /// Uses another venv (one with `vllm` installed).
    pub fn with_venv(mut self, venv: impl Into<PathBuf>) -> Self {
        self.venv = venv.into();
        self
    }

    pub fn plan(&self) -> &VllmPlan {
        &self.plan
    }

    pub fn venv(&self) -> &Path {
        &self.venv
    }

    /// The environment variables the engine sets before Python starts, with their final values
    /// (a value already in the environment wins).
    pub fn environment(&self) -> Vec<(String, String)> {
        environment(&self.plan, |key| std::env::var(key).ok())
    }

    /// The keyword arguments for `vllm.LLM(...)`: the plan's settings, then `engine_args` (which
    /// win on a clash).
    pub fn llm_kwargs(&self) -> serde_json::Map<String, serde_json::Value> {
        llm_kwargs(&self.plan)
    }

    #[cfg(feature = "vllm")]
    fn check_files(&self) -> Result<(), EngineError> {
        let python = self.venv.join("bin/python");
        if !python.exists() {
            return Err(EngineError::Start(format!(
                "no vLLM venv at {} ({} is missing): run `just setup-vllm`, or set BATCHLAB_HOME",
                self.venv.display(),
                python.display()
            )));
        }
        let config = self.plan.model.join("config.json");
        if !config.exists() {
            return Err(EngineError::Start(format!(
                "model {} not found ({} is missing); `just setup-vllm` builds the tiny test model `tiny-llama`",
                self.plan.model.display(),
                config.display()
            )));
        }
        Ok(())
    }
}

/// What the engine sets, each only where `user` (the environment) has no value.
fn environment(plan: &VllmPlan, user: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut ours: Vec<(&str, String)> = vec![
        // Else vLLM's CPU backend reserves most of the machine's memory for its KV cache.
        ("VLLM_CPU_KVCACHE_SPACE", kv_cache_space(plan.kv_cache_gib)),
        ("VLLM_ENABLE_V1_MULTIPROCESSING", if plan.in_process { "0" } else { "1" }.to_owned()),
        ("VLLM_NO_USAGE_STATS", "1".to_owned()),
        ("DO_NOT_TRACK", "1".to_owned()),
        // No network: never try to download a model or tokenizer.
        ("HF_HUB_OFFLINE", "1".to_owned()),
        ("TRANSFORMERS_OFFLINE", "1".to_owned()),
        // Logs to stderr, leaving stdout to batchlab's report.
        ("VLLM_LOGGING_STREAM", "ext://sys.stderr".to_owned()),
        ("TOKENIZERS_PARALLELISM", "false".to_owned()),
    ];
    // In-process, the engine runs in this process's OpenMP runtime, which must be sized before
    // torch loads: unset, or with a thread per CPU, it runs several times slower (see
    // `default_omp_threads`).
    let omp = plan.omp_num_threads.or_else(|| plan.in_process.then(default_omp_threads));
    if let Some(n) = omp {
        ours.push(("OMP_NUM_THREADS", n.to_string()));
    }
    ours.into_iter()
        .map(|(key, value)| {
            let value = match user(key) {
                Some(theirs) if theirs != value => {
                    tracing::warn!(%key, %theirs, ours = %value, "keeping the environment's value over the plan's");
                    theirs
                }
                _ => value,
            };
            (key.to_owned(), value)
        })
        .collect()
}

/// OpenMP threads when the plan does not say: one CPU fewer than this process may run on (at
/// least one), leaving a CPU to Python's own thread, which schedules, samples and detokenizes
/// between forward passes and otherwise fights spinning OpenMP workers. On a 2-CPU machine, 1
/// thread gave ~2,800 output tokens/s where 2 gave ~750 (tiny model, 64 x 128 -> 64 tokens).
/// `available_parallelism` reads the affinity mask, so this follows the cgroup cpuset that
/// `sys::reset_cpu_affinity` set at start-up (tested in `sys::affinity`).
fn default_omp_threads() -> u32 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1));
    cpus.saturating_sub(1).max(1)
}

/// vLLM reads `VLLM_CPU_KVCACHE_SPACE` as whole GiB; a fraction rounds up so it is never zero
/// (zero means "pick a default", most of RAM).
fn kv_cache_space(gib: f64) -> String {
    let whole = gib.ceil().max(1.0);
    format!("{whole:.0}")
}

/// vLLM seeds numpy, which takes 32 bits; derived scenario seeds have 63. A seed that fits is kept
/// as written, a larger one is folded (high half xor low half) so it still depends on every bit.
fn engine_seed(seed: u64) -> u32 {
    u32::try_from(seed).unwrap_or(((seed >> 32) ^ (seed & 0xffff_ffff)) as u32)
}

fn llm_kwargs(plan: &VllmPlan) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut kwargs = serde_json::Map::new();
    kwargs.insert("model".into(), Value::String(plan.model.to_string_lossy().into_owned()));
    kwargs.insert("dtype".into(), Value::String(plan.dtype.clone()));
    kwargs.insert("seed".into(), Value::from(engine_seed(plan.seed)));
    kwargs.insert("enforce_eager".into(), Value::Bool(plan.enforce_eager));
    kwargs.insert("disable_log_stats".into(), Value::Bool(plan.disable_log_stats));
    for (key, value) in [
        ("max_model_len", plan.max_model_len),
        ("max_num_seqs", plan.max_num_seqs),
        ("max_num_batched_tokens", plan.max_num_batched_tokens),
    ] {
        if let Some(v) = value {
            kwargs.insert(key.into(), Value::from(v));
        }
    }
    for (key, value) in &plan.engine_args {
        if let Some(old) = kwargs.insert(key.clone(), value.clone()) {
            tracing::debug!(%key, %old, new = %value, "engine_args overrides a plan setting");
        }
    }
    kwargs
}

impl Engine for VllmEngine {
    #[cfg(feature = "vllm")]
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        if self.session.is_some() {
            return Err(EngineError::Start("the engine is already started".into()));
        }
        self.check_files()?;
        if self.plan.disable_log_stats {
            tracing::warn!(
                "disable_log_stats = true: vLLM reports no per-request timings, so latency metrics are absent"
            );
        }
        let (session, info) = python::Session::start(&self.venv, &self.environment(), &self.llm_kwargs())?;
        self.session = Some(session);
        Ok(info)
    }

    #[cfg(not(feature = "vllm"))]
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        Err(EngineError::Start(
            "this batchlab was built without the `vllm` feature: rebuild with `cargo build --features vllm`".into(),
        ))
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        #[cfg(feature = "vllm")]
        if let Some(session) = &self.session {
            return session.generate(batch);
        }
        let _ = batch;
        Err(EngineError::Generate("generate before start".into()))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        #[cfg(feature = "vllm")]
        if let Some(session) = self.session.take() {
            return session.shutdown();
        }
        Ok(())
    }

    fn clock_domain(&self) -> ClockDomain {
        ClockDomain::Monotonic
    }
}

#[cfg(feature = "vllm")]
impl Drop for VllmEngine {
    /// A started engine that was never shut down (an error path, a panic) still stops vLLM's
    /// engine core, so its child processes never outlive batchlab.
    fn drop(&mut self) {
        if let Some(session) = self.session.take()
            && let Err(e) = session.shutdown()
        {
            tracing::warn!(error = %e, "vLLM shutdown on drop failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> VllmPlan {
        VllmPlan {
            model: PathBuf::from("/models/tiny"),
            dtype: "float32".into(),
            max_model_len: None,
            max_num_seqs: Some(8),
            max_num_batched_tokens: None,
            enforce_eager: true,
            seed: 5,
            kv_cache_gib: 0.5,
            in_process: true,
            omp_num_threads: Some(3),
            disable_log_stats: false,
            engine_args: serde_json::Map::new(),
        }
    }

    fn check_env(plan: &VllmPlan, user: &[(&str, &str)], expected: &[(&str, &str)]) {
        let env = environment(plan, |k| user.iter().find(|(uk, _)| *uk == k).map(|(_, v)| v.to_string()));
        for (key, value) in expected {
            let found = env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
            assert_eq!(found, Some(*value), "{key} in {env:?}");
        }
    }

    #[test]
    fn environment_follows_the_plan_and_the_user_wins() {
        check_env(
            &plan(),
            &[],
            &[("VLLM_CPU_KVCACHE_SPACE", "1"), ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"), ("OMP_NUM_THREADS", "3")],
        );
        check_env(
            &plan(),
            &[("OMP_NUM_THREADS", "2"), ("HF_HUB_OFFLINE", "0")],
            &[("OMP_NUM_THREADS", "2"), ("HF_HUB_OFFLINE", "0")],
        );
        let default_omp = default_omp_threads().to_string();
        check_env(&VllmPlan { omp_num_threads: None, ..plan() }, &[], &[("OMP_NUM_THREADS", &default_omp)]);
        let multi = VllmPlan { in_process: false, omp_num_threads: None, kv_cache_gib: 2.0, ..plan() };
        let env = environment(&multi, |_| None);
        assert!(!env.iter().any(|(k, _)| k == "OMP_NUM_THREADS"), "multiprocess mode leaves OpenMP to vLLM");
        check_env(&multi, &[], &[("VLLM_ENABLE_V1_MULTIPROCESSING", "1"), ("VLLM_CPU_KVCACHE_SPACE", "2")]);
    }

    #[test]
    fn engine_args_pass_through_and_win() {
        let mut p = plan();
        p.engine_args.insert("tensor_parallel_size".into(), 2.into());
        p.engine_args.insert("max_num_seqs".into(), 4.into());
        let kwargs = llm_kwargs(&p);
        let expected = serde_json::json!({
            "model": "/models/tiny",
            "dtype": "float32",
            "seed": 5,
            "enforce_eager": true,
            "disable_log_stats": false,
            "max_num_seqs": 4,
            "tensor_parallel_size": 2,
        });
        assert_eq!(serde_json::Value::Object(kwargs), expected);
    }

    #[test]
    fn engine_seeds_fit_in_32_bits() {
        assert_eq!(engine_seed(7), 7);
        assert_eq!(engine_seed(u64::from(u32::MAX)), u32::MAX);
        assert_eq!(engine_seed(0x1234_5678_0000_0001), 0x1234_5679);
    }

    #[cfg(feature = "vllm")]
    #[test]
    fn start_reports_a_missing_venv_or_model() {
        let dir = std::env::temp_dir().join(format!("batchlab-vllm-missing-{}", std::process::id()));
        let mut engine = VllmEngine::new(plan()).with_venv(&dir);
        let err = engine.start().unwrap_err().to_string();
        assert!(err.contains("no vLLM venv") && err.contains("just setup-vllm"), "{err}");
        assert_eq!(engine.generate(&[]), Err(EngineError::Generate("generate before start".into())));
        assert_eq!(engine.shutdown(), Ok(()));
    }

    #[cfg(not(feature = "vllm"))]
    #[test]
    fn without_the_feature_start_says_how_to_rebuild() {
        let mut engine = VllmEngine::new(plan());
        let err = engine.start().unwrap_err().to_string();
        assert!(err.contains("--features vllm"), "{err}");
        assert_eq!(engine.generate(&[]), Err(EngineError::Generate("generate before start".into())));
        assert_eq!(engine.shutdown(), Ok(()));
    }
}
