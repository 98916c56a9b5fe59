//! vLLM, the first engine of the Python protocol: its typed settings ([`VllmConfig`], the
//! scenario's `[engine.vllm]`) become the constructor arguments and environment of the built-in
//! class `batchlab_engines.vllm_engine:VllmEngine` (python/batchlab_engines/vllm_engine.py).
//!
//! vLLM reports `*_ts` stats on `CLOCK_MONOTONIC` (our clock). Stats exist only with
//! `disable_log_stats = false` (the default here, unlike plain `vllm.LLM`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::{PythonConfig, PythonEngine};

/// The built-in vLLM protocol class.
pub const VLLM_MODULE: &str = "batchlab_engines.vllm_engine";
/// The protocol class in [`VLLM_MODULE`] that drives `vllm.LLM`.
pub const VLLM_CLASS: &str = "VllmEngine";

/// The keyword argument of [`VLLM_CLASS`] that selects continuous admission (the others are
/// `vllm.LLM`'s).
pub const ADMISSION_ARG: &str = "batchlab_admission";

/// A vLLM engine's settings. docs/vllm.md says how each reaches vLLM.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VllmConfig {
    /// The model directory (or Hugging Face id) `vllm.LLM` loads.
    pub model: PathBuf,
    /// `LLM(dtype=...)`, e.g. `"bfloat16"`.
    pub dtype: String,
    /// `LLM(max_model_len=...)`: longest prompt plus output, in tokens; `None` lets vLLM choose.
    pub max_model_len: Option<u32>,
    /// `LLM(max_num_seqs=...)`: most sequences vLLM schedules at once; `None` lets vLLM choose.
    pub max_num_seqs: Option<u32>,
    /// `LLM(max_num_batched_tokens=...)`: token budget of one scheduler step; `None` lets vLLM choose.
    pub max_num_batched_tokens: Option<u32>,
    /// `LLM(enforce_eager=...)`: skip graph capture and compilation (default true here).
    pub enforce_eager: bool,
    /// `LLM(seed=...)`: the engine's sampling seed.
    pub seed: u64,
    /// KV-cache size for vLLM's CPU backend, in GiB, rounded up (`VLLM_CPU_KVCACHE_SPACE`).
    pub kv_cache_gib: f64,
    /// Run the engine core in batchlab's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) rather than a child.
    pub in_process: bool,
    /// `OMP_NUM_THREADS` for torch; `None` leaves OpenMP's default.
    pub omp_num_threads: Option<u32>,
    /// `LLM(disable_log_stats=...)`; with stats off vLLM reports no per-request timings.
    pub disable_log_stats: bool,
    /// Passed through to `vllm.EngineArgs` unchanged.
    pub engine_args: serde_json::Map<String, serde_json::Value>,
    /// How requests reach vLLM's engine (`engine.vllm.admission`): the batcher's micro-batches,
    /// each one `LLM.generate`, or each request as it arrives, with the engine stepped by a
    /// thread of its own (docs/vllm.md, "Admission").
    pub admission: Admission,
    /// A `batchlab calibrate` profile of this engine. vLLM never reads it: batchlab predicts a
    /// full batch's generate from it, and the default `batching.stall_timeout` follows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<PathBuf>,
}

/// How requests reach vLLM's engine: `engine.vllm.admission`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Admission {
    /// Each batch the batcher dispatches is one `LLM.generate` (micro-batching, the default).
    #[default]
    Batch,
    /// Each request goes to vLLM's engine (`LLMEngine.add_request`) as the batcher hands it over,
    /// and a thread of the engine's own steps it: vLLM's own continuous batching, with every new
    /// token's time recorded. The batcher hands requests over through the engine's concurrent face
    /// (`batching.max_in_flight` above 1, `batch_size = 1`).
    Continuous,
}

impl Admission {
    /// The key's words, as the scenario writes them.
    pub const CHOICES: &'static [(&'static str, Admission)] =
        &[("batch", Admission::Batch), ("continuous", Admission::Continuous)];

    /// The word for this admission (`batch`, `continuous`).
    pub fn name(self) -> &'static str {
        match self {
            Admission::Batch => "batch",
            Admission::Continuous => "continuous",
        }
    }
}

impl VllmConfig {
    /// The built-in vLLM class with these settings.
    pub fn python_config(&self) -> PythonConfig {
        let mut args = llm_kwargs(self);
        if self.admission == Admission::Continuous {
            // The class's own argument, not `vllm.LLM`'s: it is taken out before the LLM is built.
            args.insert(ADMISSION_ARG.into(), serde_json::Value::String(self.admission.name().into()));
        }
        PythonConfig { args, env: environment(self), ..PythonConfig::new(VLLM_MODULE, VLLM_CLASS) }
    }

    /// A vLLM engine (cheap; vLLM loads in [`crate::engine::Engine::start`]).
    pub fn engine(&self) -> PythonEngine {
        if self.disable_log_stats {
            tracing::warn!(
                "disable_log_stats = true: vLLM reports no per-request timings, so latency metrics are absent"
            );
        }
        let engine = PythonEngine::new(self.python_config());
        match self.admission {
            Admission::Batch => engine,
            Admission::Continuous => engine.continuous(),
        }
    }

    /// The keyword arguments for `vllm.LLM(...)`: the settings, then `engine_args` (which win on a
    /// clash).
    pub fn llm_kwargs(&self) -> serde_json::Map<String, serde_json::Value> {
        llm_kwargs(self)
    }
}

/// What vLLM needs in its environment before Python starts (the user's environment still wins,
/// see [`PythonEngine::environment`]).
fn environment(config: &VllmConfig) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = [
        // Else vLLM's CPU backend reserves most of the machine's memory for its KV cache.
        ("VLLM_CPU_KVCACHE_SPACE", kv_cache_space(config.kv_cache_gib)),
        ("VLLM_ENABLE_V1_MULTIPROCESSING", if config.in_process { "0" } else { "1" }.to_owned()),
        ("VLLM_NO_USAGE_STATS", "1".to_owned()),
        // Logs to stderr, leaving stdout to batchlab's report; batchlab captures both to
        // engine.log (or streams them with `-v`), so INFO is kept for the log.
        ("VLLM_LOGGING_STREAM", "ext://sys.stderr".to_owned()),
        ("VLLM_CONFIGURE_LOGGING", "1".to_owned()),
        ("VLLM_LOGGING_LEVEL", "INFO".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    // In-process, the engine runs in this process's OpenMP runtime, which must be sized before
    // torch loads: unset, or with a thread per CPU, it runs several times slower (see
    // `default_omp_threads`).
    let omp = config.omp_num_threads.or_else(|| config.in_process.then(default_omp_threads));
    if let Some(n) = omp {
        env.insert("OMP_NUM_THREADS".to_owned(), n.to_string());
    }
    env
}

/// OpenMP threads when the config does not say: one CPU fewer than this process may run on (at
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

fn llm_kwargs(config: &VllmConfig) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut kwargs = serde_json::Map::new();
    kwargs.insert("model".into(), Value::String(config.model.to_string_lossy().into_owned()));
    kwargs.insert("dtype".into(), Value::String(config.dtype.clone()));
    kwargs.insert("seed".into(), Value::from(engine_seed(config.seed)));
    kwargs.insert("enforce_eager".into(), Value::Bool(config.enforce_eager));
    kwargs.insert("disable_log_stats".into(), Value::Bool(config.disable_log_stats));
    for (key, value) in [
        ("max_model_len", config.max_model_len),
        ("max_num_seqs", config.max_num_seqs),
        ("max_num_batched_tokens", config.max_num_batched_tokens),
    ] {
        if let Some(v) = value {
            kwargs.insert(key.into(), Value::from(v));
        }
    }
    for (key, value) in &config.engine_args {
        if let Some(old) = kwargs.insert(key.clone(), value.clone()) {
            tracing::debug!(%key, %old, new = %value, "engine_args overrides a setting");
        }
    }
    kwargs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> VllmConfig {
        VllmConfig {
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
            admission: Admission::Batch,
            profile: None,
        }
    }

    fn check_env(config: &VllmConfig, user: &[(&str, &str)], expected: &[(&str, &str)]) {
        let env = super::super::environment(&environment(config), |k| {
            user.iter().find(|(uk, _)| *uk == k).map(|(_, v)| v.to_string())
        });
        for (key, value) in expected {
            let found = env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
            assert_eq!(found, Some(*value), "{key} in {env:?}");
        }
    }

    #[test]
    fn environment_follows_the_config_and_the_user_wins() {
        check_env(
            &config(),
            &[],
            &[
                ("VLLM_CPU_KVCACHE_SPACE", "1"),
                ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),
                ("OMP_NUM_THREADS", "3"),
                ("HF_HUB_OFFLINE", "1"),
            ],
        );
        check_env(
            &config(),
            &[("OMP_NUM_THREADS", "2"), ("HF_HUB_OFFLINE", "0")],
            &[("OMP_NUM_THREADS", "2"), ("HF_HUB_OFFLINE", "0")],
        );
        let default_omp = default_omp_threads().to_string();
        check_env(&VllmConfig { omp_num_threads: None, ..config() }, &[], &[("OMP_NUM_THREADS", &default_omp)]);
        let multi = VllmConfig { in_process: false, omp_num_threads: None, kv_cache_gib: 2.0, ..config() };
        assert!(!environment(&multi).contains_key("OMP_NUM_THREADS"), "multiprocess mode leaves OpenMP to vLLM");
        check_env(&multi, &[], &[("VLLM_ENABLE_V1_MULTIPROCESSING", "1"), ("VLLM_CPU_KVCACHE_SPACE", "2")]);
    }

    #[test]
    fn engine_args_pass_through_and_win() {
        let mut c = config();
        c.engine_args.insert("tensor_parallel_size".into(), 2.into());
        c.engine_args.insert("max_num_seqs".into(), 4.into());
        let expected = serde_json::json!({
            "model": "/models/tiny",
            "dtype": "float32",
            "seed": 5,
            "enforce_eager": true,
            "disable_log_stats": false,
            "max_num_seqs": 4,
            "tensor_parallel_size": 2,
        });
        assert_eq!(serde_json::Value::Object(c.llm_kwargs()), expected);
        let python = c.python_config();
        assert_eq!(python.class_spec(), "batchlab_engines.vllm_engine:VllmEngine");
        assert_eq!(serde_json::Value::Object(python.args), expected);
        assert_eq!((python.path, python.venv), (None, None));
    }

    #[test]
    fn engine_seeds_fit_in_32_bits() {
        assert_eq!(engine_seed(7), 7);
        assert_eq!(engine_seed(u64::from(u32::MAX)), u32::MAX);
        assert_eq!(engine_seed(0x1234_5678_0000_0001), 0x1234_5679);
    }
}
