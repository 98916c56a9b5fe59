//! Any Python engine, through one small protocol (cargo feature `vllm`, which embeds CPython with
//! pyo3).
//!
//! A protocol object is an instance of a Python class with three methods:
//! `start() -> info`, `generate(requests) -> outputs` and `shutdown()` (docs/engines.md has the
//! fields, units and clock). [`PythonEngine`] drives any such object: vLLM
//! ([`vllm::VllmConfig`]), the Hugging Face transformers engine, or a user's own class, with no
//! Rust change per engine.
//!
//! This is the only module that touches Python. [`PythonEngine::new`] is cheap and needs no Python,
//! so the runner can build one in any build; the interpreter starts in [`Engine::start`], on the
//! batcher's engine thread, which then makes every Python call. Without the `vllm` feature `start`
//! fails with a message saying how to rebuild. The pure parts (configuration, environment, the
//! checks of what the object returns in `output.rs`) are compiled and tested in every build.
//!
//! The interpreter is the venv's (`$BATCHLAB_HOME/venv` from `just setup-vllm`, or
//! [`PythonConfig::venv`]): it is started with that venv's `python` as its executable, so
//! `sys.prefix` is the venv and child processes (vLLM's multiprocess mode) run the venv's
//! interpreter. One process gets one interpreter: a second engine must use the same venv.
//!
//! The engines batchlab ships (`python/batchlab_engines/`) are compiled into the binary and
//! importable as `batchlab_engines.<module>` from anywhere; a user's class is imported from
//! [`PythonConfig::path`].

#[cfg(feature = "vllm")]
mod continuous;
#[cfg(feature = "vllm")]
mod interpreter;
// Used by `interpreter` only; compiled (and tested) in every build because it needs no Python.
#[cfg_attr(not(feature = "vllm"), allow(dead_code))]
mod output;
pub mod vllm;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::engine::chat::{Template, render_plain};
use crate::engine::{ClockDomain, Engine, EngineError, EngineOutput, EngineRequest, Prompt, Started};
use output::ChatSupport;

/// The Python modules shipped inside batchlab, importable as `batchlab_engines.<name>`: module
/// name, file (for tracebacks) and source.
pub const BUILT_IN_MODULES: &[(&str, &str, &str)] = &[
    (
        "batchlab_engines",
        "python/batchlab_engines/__init__.py",
        include_str!("../../../python/batchlab_engines/__init__.py"),
    ),
    (
        "batchlab_engines.chat",
        "python/batchlab_engines/chat.py",
        include_str!("../../../python/batchlab_engines/chat.py"),
    ),
    (
        "batchlab_engines.vllm_engine",
        "python/batchlab_engines/vllm_engine.py",
        include_str!("../../../python/batchlab_engines/vllm_engine.py"),
    ),
    (
        "batchlab_engines.transformers_engine",
        "python/batchlab_engines/transformers_engine.py",
        include_str!("../../../python/batchlab_engines/transformers_engine.py"),
    ),
];

/// `$BATCHLAB_HOME`, else `~/.cache/batchlab`: where the venv and models live. The one reading of
/// `$BATCHLAB_HOME` (the venv, model paths in scenarios, the missing-model hint).
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

/// Which Python class to run, and how.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PythonConfig {
    /// The module to import (`batchlab_engines.transformers_engine`, `my_engine`).
    pub module: String,
    /// The protocol class in that module.
    pub class: String,
    /// Put first on `sys.path` before importing `module` (absolute; the scenario's
    /// `engine.python.path` is resolved against the scenario's directory).
    pub path: Option<PathBuf>,
    /// Keyword arguments for the class's constructor.
    pub args: serde_json::Map<String, serde_json::Value>,
    /// The venv whose interpreter runs the engine; `None` is [`default_venv`].
    pub venv: Option<PathBuf>,
    /// Environment variables set before the interpreter starts (on top of [`BASE_ENVIRONMENT`]);
    /// a value already in batchlab's environment wins.
    pub env: BTreeMap<String, String>,
    /// The clock of the object's `*_ts` fields. Known before the engine starts, because the run
    /// is set up before; a `clock` in `start()`'s info must agree with it.
    pub clock: ClockDomain,
}

impl PythonConfig {
    /// The class `module:Class` with no arguments, nothing added to `sys.path`.
    pub fn new(module: impl Into<String>, class: impl Into<String>) -> Self {
        PythonConfig {
            module: module.into(),
            class: class.into(),
            path: None,
            args: serde_json::Map::new(),
            venv: None,
            env: BTreeMap::new(),
            clock: ClockDomain::Monotonic,
        }
    }

    /// `module:Class`, as a scenario writes it and as errors name the engine.
    pub fn class_spec(&self) -> String {
        format!("{}:{}", self.module, self.class)
    }

    /// The venv to run in: [`Self::venv`] or [`default_venv`].
    pub fn venv_or_default(&self) -> PathBuf {
        self.venv.clone().unwrap_or_else(default_venv)
    }
}

/// Set for every Python engine (unless the environment has its own value): no network, so no
/// model hub is ever contacted, no tokenizer thread pools fighting the engine for CPUs, and no
/// progress bars (the engine's output goes to `engine.log`, where a redrawn bar is noise).
pub const BASE_ENVIRONMENT: &[(&str, &str)] = &[
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("DO_NOT_TRACK", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("TQDM_DISABLE", "1"),
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
    ("TRANSFORMERS_VERBOSITY", "warning"),
];

/// An engine run by a Python protocol object. See the module docs.
pub struct PythonEngine {
    config: PythonConfig,
    #[cfg(feature = "vllm")]
    session: Option<interpreter::Session>,
    /// Continuous admission: requests go to the object's `add` as they are handed over, and a
    /// stepping thread of its own calls `step` (`continuous.rs`; the vLLM class only).
    continuous: bool,
    #[cfg(feature = "vllm")]
    stepper: Option<continuous::Continuous>,
    /// The model has no chat template and chat prompts fell back to plain: said once.
    #[cfg_attr(not(feature = "vllm"), allow(dead_code))]
    warned_plain: bool,
}

impl PythonEngine {
    /// An engine for `config`. Cheap: nothing is loaded until [`Engine::start`].
    pub fn new(config: PythonConfig) -> Self {
        PythonEngine {
            config,
            #[cfg(feature = "vllm")]
            session: None,
            continuous: false,
            #[cfg(feature = "vllm")]
            stepper: None,
            warned_plain: false,
        }
    }

    /// With continuous admission: the object is driven through its `add` and `step` (the vLLM
    /// class has them), by a stepping thread of its own, and the engine has a concurrent face
    /// ([`Started::concurrent`](crate::engine::Started::concurrent)) that takes each hand-over as it comes.
    pub fn continuous(mut self) -> Self {
        self.continuous = true;
        self
    }

    /// Whether the engine admits continuously ([`continuous`](Self::continuous)).
    pub fn is_continuous(&self) -> bool {
        self.continuous
    }

    /// Uses another venv.
    pub fn with_venv(mut self, venv: impl Into<PathBuf>) -> Self {
        self.config.venv = Some(venv.into());
        self
    }

    /// The settings the engine was built with (class, path, venv, clock, environment).
    pub fn config(&self) -> &PythonConfig {
        &self.config
    }

    /// The environment variables the engine sets before Python starts, with their final values
    /// (a value already in the environment wins).
    pub fn environment(&self) -> Vec<(String, String)> {
        environment(&self.config.env, |key| std::env::var(key).ok())
    }

    /// Bench only, not part of the protocol or of batchlab's API: calls the started object's
    /// `method(requests)` (the requests as [`Engine::generate`] would pass them) and returns the
    /// number it returns. Call it only from the engine thread, e.g. from inside an [`Engine`]
    /// wrapper's `generate`, as `benches/vllm_overhead.rs` does to time raw `LLM.generate` calls
    /// (`VllmEngine.bench_raw_generate`) between batches batchlab drives, in one engine.
    #[doc(hidden)]
    pub fn bench_call(&mut self, method: &str, batch: &[EngineRequest]) -> Result<f64, EngineError> {
        #[cfg(feature = "vllm")]
        if let Some(session) = &self.session {
            return session.call_timed(method, batch);
        }
        let _ = batch;
        Err(EngineError::Generate(format!("{method} before start")))
    }

    #[cfg(feature = "vllm")]
    fn check_venv(venv: &std::path::Path) -> Result<(), EngineError> {
        let python = venv.join("bin/python");
        if !python.exists() {
            return Err(EngineError::Start(format!(
                "no Python venv at {} ({} is missing): run `just setup-vllm`, or set BATCHLAB_HOME",
                venv.display(),
                python.display()
            )));
        }
        Ok(())
    }
}

/// [`BASE_ENVIRONMENT`] and then `extra` (which wins), each only where `user` (the environment)
/// has no value of its own.
fn environment(extra: &BTreeMap<String, String>, user: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut ours: BTreeMap<&str, &str> = BASE_ENVIRONMENT.iter().copied().collect();
    for (key, value) in extra {
        ours.insert(key, value);
    }
    ours.into_iter()
        .map(|(key, value)| {
            let value = match user(key) {
                Some(theirs) if theirs != value => {
                    tracing::warn!(%key, %theirs, ours = %value, "keeping the environment's value over the plan's");
                    theirs
                }
                _ => value.to_owned(),
            };
            (key.to_owned(), value)
        })
        .collect()
}

/// The batch as the engine can take it. Chat prompts for the model's own template become plain
/// text when the model has none (warned once per engine, through `warned`); a chat prompt for an
/// engine that takes none fails the batch, saying what to do.
#[cfg_attr(not(feature = "vllm"), allow(dead_code))]
fn prepare_chat<'b>(
    config: &PythonConfig,
    support: ChatSupport,
    warned: &mut bool,
    batch: &'b [EngineRequest],
) -> Result<std::borrow::Cow<'b, [EngineRequest]>, EngineError> {
    use std::borrow::Cow;
    let is_chat = |r: &EngineRequest| matches!(r.prompt, Prompt::Chat(_));
    if !batch.iter().any(is_chat) {
        return Ok(Cow::Borrowed(batch));
    }
    match support {
        ChatSupport::ModelTemplate => Ok(Cow::Borrowed(batch)),
        ChatSupport::None => Err(EngineError::Generate(format!(
            "{} does not take chat prompts: its start() info has no `model_chat_template` (docs/engines.md); \
             set `workload.request_format = \"plain\"` to send the messages as text",
            config.class_spec()
        ))),
        ChatSupport::NoModelTemplate => {
            let falls_back = |r: &EngineRequest| matches!(&r.prompt, Prompt::Chat(c) if c.template == Template::Model);
            if !batch.iter().any(falls_back) {
                return Ok(Cow::Borrowed(batch));
            }
            if !std::mem::replace(warned, true) {
                tracing::warn!(
                    engine = %config.class_spec(),
                    "the model has no chat template: chat prompts fall back to the plain format \
                     (`role: content` lines; docs/scenarios.md)"
                );
            }
            let plain = batch
                .iter()
                .map(|r| match &r.prompt {
                    Prompt::Chat(c) if c.template == Template::Model => {
                        EngineRequest { prompt: Prompt::Text(render_plain(&c.messages)), ..r.clone() }
                    }
                    _ => r.clone(),
                })
                .collect();
            Ok(Cow::Owned(plain))
        }
    }
}

#[cfg(feature = "vllm")]
fn path_of(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

impl Engine for PythonEngine {
    #[cfg(feature = "vllm")]
    fn start(&mut self) -> Result<Started, EngineError> {
        if self.session.is_some() || self.stepper.is_some() {
            return Err(EngineError::Start("the engine is already started".into()));
        }
        let venv = self.config.venv_or_default();
        Self::check_venv(&venv)?;
        let env = self.environment();
        let path = self.config.path.as_deref().map(path_of);
        if self.continuous {
            let (stepper, info) = continuous::Continuous::start(venv, env, self.config.clone(), path)?;
            let concurrent = stepper.concurrent();
            self.stepper = Some(stepper);
            return Ok(Started { info, concurrent: Some(concurrent) });
        }
        let (session, info) = interpreter::Session::start(&venv, &env, &self.config, path)?;
        self.session = Some(session);
        Ok(info.into())
    }

    #[cfg(not(feature = "vllm"))]
    fn start(&mut self) -> Result<Started, EngineError> {
        Err(EngineError::Start(format!(
            "{}: this batchlab was built without Python engines (the `vllm` feature): rebuild with \
             `cargo build --features vllm`",
            self.config.class_spec()
        )))
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        #[cfg(feature = "vllm")]
        if let Some(session) = &self.session {
            let batch = prepare_chat(&self.config, session.chat(), &mut self.warned_plain, batch)?;
            return session.generate(&batch);
        }
        let _ = batch;
        if self.continuous {
            return Err(EngineError::Generate(
                "continuous admission takes requests through the engine's concurrent face \
                 (batching.max_in_flight above 1), not one generate at a time"
                    .into(),
            ));
        }
        Err(EngineError::Generate("generate before start".into()))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        #[cfg(feature = "vllm")]
        if let Some(stepper) = self.stepper.take() {
            return stepper.shutdown();
        }
        #[cfg(feature = "vllm")]
        if let Some(session) = self.session.take() {
            return session.shutdown();
        }
        Ok(())
    }

    /// [`PythonConfig::clock`].
    fn clock_domain(&self) -> ClockDomain {
        self.config.clock
    }
}

#[cfg(feature = "vllm")]
impl Drop for PythonEngine {
    /// A started engine that was never shut down (an error path, a panic) still runs the object's
    /// `shutdown()`, so an engine's child processes never outlive batchlab.
    fn drop(&mut self) {
        if let Some(session) = self.session.take()
            && let Err(e) = session.shutdown()
        {
            tracing::warn!(error = %e, "Python engine shutdown on drop failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_environment_is_set_and_the_user_and_the_config_win() {
        let mut extra = BTreeMap::new();
        extra.insert("OMP_NUM_THREADS".to_owned(), "1".to_owned());
        extra.insert("TOKENIZERS_PARALLELISM".to_owned(), "true".to_owned());
        let user = |k: &str| (k == "HF_HUB_OFFLINE").then(|| "0".to_owned());
        let env = environment(&extra, user);
        let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        assert_eq!(get("HF_HUB_OFFLINE"), Some("0"), "the environment wins");
        assert_eq!(get("TRANSFORMERS_OFFLINE"), Some("1"));
        assert_eq!(get("TOKENIZERS_PARALLELISM"), Some("true"), "the config wins over the base");
        assert_eq!(get("OMP_NUM_THREADS"), Some("1"));
    }

    fn chat(id: u64, template: Template) -> EngineRequest {
        let messages = vec![crate::engine::chat::Message::new("user", "Hi")];
        let prompt = Prompt::Chat(crate::engine::chat::ChatPrompt { messages, template });
        EngineRequest { prompt, ..EngineRequest::tokens(vec![], 4).with_id(id) }
    }

    #[test]
    fn chat_prompts_fall_back_to_plain_once_warned_or_are_refused() {
        let custom = crate::engine::chat::ChatTemplate::new(
            "{{ messages[0].content }}",
            crate::engine::chat::TemplateOrigin::Inline,
        )
        .unwrap();
        let batch = vec![
            EngineRequest::tokens(vec![1], 4).with_id(0),
            chat(1, Template::Model),
            chat(2, Template::Custom(custom)),
        ];
        let mut warned = false;
        let m = PythonConfig::new("m", "C");
        // The model has a template: everything goes as it is.
        let same = prepare_chat(&m, ChatSupport::ModelTemplate, &mut warned, &batch).unwrap();
        assert_eq!(&*same, &batch[..]);
        assert!(!warned);
        // It has none: the model-template request becomes plain text; a custom template still applies.
        let fell_back = prepare_chat(&m, ChatSupport::NoModelTemplate, &mut warned, &batch).unwrap();
        assert_eq!(fell_back[0], batch[0]);
        assert_eq!(fell_back[1].prompt, Prompt::Text("user: Hi".into()));
        assert_eq!(fell_back[2], batch[2]);
        assert!(warned, "the fallback is warned about");
        // Token prompts need no chat support at all; chat prompts do.
        let tokens = &batch[..1];
        assert_eq!(&*prepare_chat(&m, ChatSupport::None, &mut warned, tokens).unwrap(), tokens);
        let err = prepare_chat(&m, ChatSupport::None, &mut warned, &batch).unwrap_err().to_string();
        assert!(err.contains("m:C does not take chat prompts") && err.contains("request_format = \"plain\""), "{err}");
    }

    #[tracing_test::traced_test]
    #[test]
    fn the_plain_fallback_is_warned_about_once() {
        let batch = vec![chat(1, Template::Model)];
        let mut warned = false;
        let m = PythonConfig::new("m", "C");
        for _ in 0..3 {
            prepare_chat(&m, ChatSupport::NoModelTemplate, &mut warned, &batch).unwrap();
        }
        logs_assert(|lines: &[&str]| {
            let n = lines.iter().filter(|l| l.contains("the model has no chat template")).count();
            if n == 1 { Ok(()) } else { Err(format!("{n} warnings")) }
        });
    }

    #[test]
    fn built_in_modules_are_a_package() {
        assert_eq!(BUILT_IN_MODULES[0].0, "batchlab_engines");
        for (module, file, source) in BUILT_IN_MODULES {
            assert!(module.starts_with("batchlab_engines"), "{module}");
            assert!(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file).exists(), "{file}");
            assert!(!source.contains('\0'), "{file}");
        }
    }

    #[cfg(feature = "vllm")]
    #[test]
    fn start_reports_a_missing_venv() {
        let dir = std::env::temp_dir().join(format!("batchlab-python-missing-{}", std::process::id()));
        let mut engine = PythonEngine::new(PythonConfig::new("m", "C")).with_venv(&dir);
        let err = engine.start().unwrap_err().to_string();
        assert!(err.contains("no Python venv") && err.contains("just setup-vllm"), "{err}");
        assert_eq!(engine.generate(&[]), Err(EngineError::Generate("generate before start".into())));
        assert_eq!(engine.shutdown(), Ok(()));
    }

    #[cfg(not(feature = "vllm"))]
    #[test]
    fn without_the_feature_start_says_how_to_rebuild() {
        let mut engine = PythonEngine::new(PythonConfig::new("echo_engine", "EchoEngine"));
        let err = engine.start().unwrap_err().to_string();
        assert!(err.contains("echo_engine:EchoEngine") && err.contains("--features vllm"), "{err}");
        assert_eq!(engine.generate(&[]), Err(EngineError::Generate("generate before start".into())));
        assert_eq!(engine.shutdown(), Ok(()));
    }
}
