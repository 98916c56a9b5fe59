//! The embedded interpreter and the calls into a protocol object. Every function here runs on the
//! engine thread.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyCFunction, PyDict, PyFloat, PyInt, PyList, PyModule, PyString, PyTuple};

use super::output::{ChatSupport, Plain, StepServed, map_chat_support, map_info, map_outputs, map_step};
use super::{BUILT_IN_MODULES, PythonConfig};
use crate::engine::chat::Template;
use crate::engine::{EngineDeath, EngineError, EngineInfo, EngineOutput, EngineRequest, Prompt};

/// Checks the venv, installs the built-in modules and imports classes (`bootstrap.py`).
const BOOTSTRAP: &str = include_str!("bootstrap.py");

/// A started protocol object.
pub(super) struct Session {
    object: Py<PyAny>,
    /// `module:Class`, for messages.
    class: String,
    /// Whether it takes chat prompts, from `start()`'s info.
    chat: ChatSupport,
}

impl Session {
    /// Starts the interpreter (once per process), checks it, imports the class, builds the object
    /// with the config's arguments and calls its `start()`. A `start()` that fails is followed by
    /// the object's `shutdown()`, so a half-started engine can clean up.
    pub(super) fn start(
        venv: &Path,
        env: &[(String, String)],
        config: &PythonConfig,
        path: Option<String>,
    ) -> Result<(Session, EngineInfo), EngineError> {
        let class = config.class_spec();
        engine_step("starting Python");
        initialize(venv, env).map_err(EngineError::Start)?;
        let args = serde_json::to_string(&config.args).map_err(|e| EngineError::Start(e.to_string()))?;
        let start_error = |what: &str, e: PyErr| EngineError::Start(format!("{class}{what}: {}", describe(e)));
        let (object, info) = Python::attach(|py| {
            let bootstrap = load_bootstrap(py).map_err(|e| start_error(" (loading batchlab's bootstrap)", e))?;
            let env_dict = PyDict::new(py);
            for (key, value) in env {
                env_dict.set_item(key, value).map_err(|e| start_error("", e))?;
            }
            let built_in = PyList::empty(py);
            for (module, file, source) in BUILT_IN_MODULES {
                let file = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
                built_in.append((*module, file, *source)).map_err(|e| start_error("", e))?;
            }
            let step = engine_step_function(py).map_err(|e| start_error("", e))?;
            bootstrap
                .getattr("prepare")
                .and_then(|f| f.call1((venv.to_string_lossy().as_ref(), env_dict, built_in, step)))
                .map_err(|e| start_error(" (preparing the interpreter)", e))?;
            engine_step(&format!("importing {}", config.module));
            let cls = bootstrap
                .getattr("load_class")
                .and_then(|f| f.call1((config.module.as_str(), config.class.as_str(), path)))
                .map_err(|e| start_error(" (importing)", e))?;
            let kwargs = py
                .import("json")
                .and_then(|json| json.getattr("loads")?.call1((args,)))
                .and_then(|k| Ok(k.cast_into::<PyDict>()?))
                .map_err(|e| start_error("", e))?;
            let object = cls.call((), Some(&kwargs)).map_err(|e| start_error("(**args)", e))?;
            engine_step(&format!("starting {class}"));
            let info = match object.call_method0("start").and_then(|info| to_plain(&info, 0)) {
                Ok(info) => info,
                Err(e) => {
                    let err = start_error(".start()", e);
                    shutdown_after_failed_start(&object, &class);
                    return Err(err);
                }
            };
            Ok((object.unbind(), info))
        })?;
        let checked =
            map_info(&class, &info, config.clock).and_then(|checked| Ok((checked, map_chat_support(&class, &info)?)));
        let (checked, chat) = match checked {
            Ok(checked) => checked,
            Err(message) => {
                Python::attach(|py| shutdown_after_failed_start(object.bind(py), &class));
                return Err(EngineError::Start(message));
            }
        };
        Ok((Session { object, class, chat }, checked))
    }

    /// Whether the object takes chat prompts.
    pub(super) fn chat(&self) -> ChatSupport {
        self.chat
    }

    pub(super) fn generate(&self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let outputs = Python::attach(|py| -> PyResult<Plain> {
            let outputs = self.object.bind(py).call_method1("generate", (request_list(py, batch)?,))?;
            to_plain(&outputs, 0)
        })
        .map_err(|e| self.generate_error(e))?;
        map_outputs(&self.class, &outputs, batch.len()).map_err(EngineError::Generate)
    }

    /// `object.add(requests)`: continuous admission hands requests to the engine (docs/vllm.md).
    pub(super) fn add(&self, batch: &[EngineRequest]) -> Result<(), EngineError> {
        Python::attach(|py| -> PyResult<()> {
            self.object.bind(py).call_method1("add", (request_list(py, batch)?,)).map(drop)
        })
        .map_err(|e| self.call_error("add", e))
    }

    /// `object.step()`: one engine step of continuous admission. Returns the outputs of the
    /// requests that finished in it, what the step served (when it served any request), and
    /// whether the engine has unfinished requests left.
    pub(super) fn step(&self) -> Result<(Vec<EngineOutput>, Option<StepServed>, bool), EngineError> {
        let returned = Python::attach(|py| -> PyResult<Plain> {
            let returned = self.object.bind(py).call_method0("step")?;
            to_plain(&returned, 0)
        })
        .map_err(|e| self.call_error("step", e))?;
        let (finished, step, unfinished) = match returned {
            Plain::List(mut triple) if triple.len() == 3 && matches!(triple[2], Plain::Bool(_)) => {
                let unfinished = matches!(triple.pop(), Some(Plain::Bool(true)));
                let step = triple.pop().unwrap_or(Plain::None);
                (triple.pop().unwrap_or(Plain::None), step, unfinished)
            }
            other => {
                return Err(EngineError::Generate(format!(
                    "{}.step() must return (finished, step, unfinished), found {}",
                    self.class,
                    other.describe()
                )));
            }
        };
        let n = match &finished {
            Plain::List(items) => items.len(),
            _ => 0,
        };
        let outputs = map_outputs(&format!("{}.step()", self.class), &finished, n).map_err(EngineError::Generate)?;
        let step = map_step(&step).map_err(|e| EngineError::Generate(format!("{}.step(): {e}", self.class)))?;
        Ok((outputs, step, unfinished))
    }

    /// A generate's exception: [`EngineError::Died`] when it says the engine is dead for good (see
    /// [`says_engine_dead`]), else [`EngineError::Generate`] for this batch only.
    fn generate_error(&self, e: PyErr) -> EngineError {
        self.call_error("generate", e)
    }

    /// An exception of `object.<method>()`: [`EngineError::Died`] when it says the engine is dead
    /// for good, else [`EngineError::Generate`].
    fn call_error(&self, method: &str, e: PyErr) -> EngineError {
        let dead = Python::attach(|py| says_engine_dead(py, &e));
        let text = describe(e);
        if dead {
            return EngineError::Died(EngineDeath {
                process: self.class.clone(),
                pid: None,
                status: format!("raised in {method}(): {text}"),
            });
        }
        EngineError::Generate(format!("{}.{method}(): {text}", self.class))
    }

    /// `object.<method>(requests)`, with the requests as `generate` gets them, returning the
    /// number (of seconds) it returns. Bench only: [`super::PythonEngine::bench_call`].
    pub(super) fn call_timed(&self, method: &str, batch: &[EngineRequest]) -> Result<f64, EngineError> {
        Python::attach(|py| -> PyResult<f64> {
            self.object.bind(py).call_method1(method, (request_list(py, batch)?,))?.extract::<f64>()
        })
        .map_err(|e| EngineError::Generate(format!("{}.{method}(): {}", self.class, describe(e))))
    }

    /// Calls the object's `shutdown()`, then drops it and collects garbage, so what it held (an
    /// engine core, a model) is released now rather than at exit.
    pub(super) fn shutdown(self) -> Result<(), EngineError> {
        let class = self.class;
        Python::attach(|py| -> PyResult<()> {
            let result = self.object.bind(py).call_method0("shutdown");
            drop(self.object);
            py.import("gc")?.getattr("collect")?.call0()?;
            result.map(drop)
        })
        .map_err(|e| EngineError::Shutdown(format!("{class}.shutdown(): {}", describe(e))))
    }
}

/// Shows `text` as the engine's current start-up step (the display's spinner), through the
/// `tracing` target the display listens to: engines know nothing of `run/`.
fn engine_step(text: &str) {
    tracing::info!(target: "batchlab::engine_step", "{text}");
}

/// [`engine_step`] as a Python function, `batchlab_engines.engine_step(text)`.
fn engine_step_function(py: Python<'_>) -> PyResult<Bound<'_, PyCFunction>> {
    PyCFunction::new_closure(
        py,
        Some(c"engine_step"),
        Some(c"Shows text as the current start-up step in batchlab's display."),
        |args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            let text: String = args.get_item(0)?.str()?.extract()?;
            engine_step(&text);
            Ok(())
        },
    )
}

fn shutdown_after_failed_start(object: &Bound<'_, PyAny>, class: &str) {
    if let Err(e) = object.call_method0("shutdown") {
        tracing::warn!(error = %describe(e), "{class}.shutdown() after a failed start");
    }
}

fn load_bootstrap(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    let code = CString::new(BOOTSTRAP).expect("bootstrap.py has no NUL byte");
    PyModule::from_code(py, &code, c"batchlab/engine/python/bootstrap.py", c"_batchlab_bootstrap")
}

/// A batch as the protocol's list of request dicts.
fn request_list<'py>(py: Python<'py>, batch: &[EngineRequest]) -> PyResult<Bound<'py, PyList>> {
    let requests = PyList::empty(py);
    for req in batch {
        requests.append(request_dict(py, req)?)?;
    }
    Ok(requests)
}

/// One request as the protocol's dict: `id`; one of `prompt` (str), `prompt_token_ids` (list of
/// int) or `messages` (list of `{"role", "content"}` dicts), the others `None`; `chat_template`
/// (str, or `None` for the model's own); `max_tokens`, `min_tokens`, `ignore_eos`, `temperature`,
/// `seed`. A chat request with images (`[workload.images]`) has `images`, their encoded bytes
/// (JPEG or PNG) in order, and each message with images has `content` as parts: `{"type":
/// "text", "text"}` then one `{"type": "image"}` per image, as Hugging Face templates take them.
fn request_dict<'py>(py: Python<'py>, req: &EngineRequest) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", req.id)?;
    let (mut prompt, mut ids, mut messages, mut template) = (None, None, None, None);
    let mut images = None;
    match &req.prompt {
        Prompt::Text(text) => prompt = Some(text.as_str()),
        Prompt::Tokens(t) => ids = Some(t),
        Prompt::Chat(chat) => {
            let list = PyList::empty(py);
            for m in &chat.messages {
                let message = PyDict::new(py);
                message.set_item("role", &m.role)?;
                if m.images.is_empty() {
                    message.set_item("content", &m.content)?;
                } else {
                    // OpenAI's parts, as the chat API gets them: the text, then the images.
                    let parts = PyList::empty(py);
                    let text = PyDict::new(py);
                    text.set_item("type", "text")?;
                    text.set_item("text", &m.content)?;
                    parts.append(text)?;
                    for _ in &m.images {
                        let part = PyDict::new(py);
                        part.set_item("type", "image")?;
                        parts.append(part)?;
                    }
                    message.set_item("content", parts)?;
                }
                list.append(message)?;
            }
            messages = Some(list);
            // The images' encoded bytes, in order, for the engine to decode (vLLM: PIL images in
            // `multi_modal_data`).
            let mut encoded = Vec::new();
            for image in crate::engine::image::prompt_images(&req.prompt) {
                let bytes = crate::engine::image::data_url_bytes(&image.url).ok_or_else(|| {
                    pyo3::exceptions::PyValueError::new_err("an image that is not a base64 data: URL")
                })?;
                encoded.push(pyo3::types::PyBytes::new(py, &bytes));
            }
            if !encoded.is_empty() {
                images = Some(PyList::new(py, encoded)?);
            }
            if let Template::Custom(t) = &chat.template {
                template = Some(t.source());
            }
        }
    }
    d.set_item("prompt", prompt)?;
    d.set_item("prompt_token_ids", ids)?;
    d.set_item("messages", messages)?;
    d.set_item("chat_template", template)?;
    if let Some(images) = images {
        d.set_item("images", images)?;
    }
    d.set_item("max_tokens", req.max_tokens)?;
    d.set_item("min_tokens", req.min_tokens)?;
    d.set_item("ignore_eos", req.ignore_eos)?;
    d.set_item("temperature", req.temperature)?;
    d.set_item("seed", req.seed)?;
    Ok(d)
}

/// Deep enough for a list of dicts of lists; anything deeper is not protocol data.
const MAX_DEPTH: usize = 4;

/// A Python value as [`Plain`] data. Integers that are not `int` but have `__index__` (numpy's)
/// count as integers; numpy's float64 is a float subclass and counts as a float.
fn to_plain(value: &Bound<'_, PyAny>, depth: usize) -> PyResult<Plain> {
    if value.is_none() {
        return Ok(Plain::None);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Plain::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(value.extract::<i128>().map_or_else(|_| Plain::Other("int (too large)".into()), Plain::Int));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Ok(Plain::Float(f.value()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        // A lone surrogate cannot cross into Rust as UTF-8.
        return Ok(Plain::Str(s.to_string_lossy().into_owned()));
    }
    let type_name = || value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into());
    if depth >= MAX_DEPTH {
        return Ok(Plain::Other(format!("{} (nested too deep)", type_name())));
    }
    if let Ok(list) = value.cast::<PyList>() {
        return list.iter().map(|item| to_plain(&item, depth + 1)).collect::<PyResult<_>>().map(Plain::List);
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return tuple.iter().map(|item| to_plain(&item, depth + 1)).collect::<PyResult<_>>().map(Plain::List);
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut items = Vec::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let key = match key.cast::<PyString>() {
                Ok(k) => k.to_string_lossy().into_owned(),
                Err(_) => key.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into()),
            };
            items.push((key, to_plain(&item, depth + 1)?));
        }
        return Ok(Plain::Dict(items));
    }
    if value.hasattr("__index__")?
        && let Ok(i) = value.extract::<i128>()
    {
        return Ok(Plain::Int(i));
    }
    Ok(Plain::Other(type_name()))
}

/// The protocol's engine-dead convention (docs/engines.md): the exception, or one it was raised
/// from, is of a class named `EngineDeadError` (vLLM's `vllm.v1.engine.exceptions.EngineDeadError`
/// or any subclass of such a class), or has a true `batchlab_engine_dead` attribute.
fn says_engine_dead(py: Python<'_>, e: &PyErr) -> bool {
    let mut current = Some(e.clone_ref(py));
    // A cause chain is short; the bound only guards against a cycle.
    for _ in 0..8 {
        let Some(err) = current else { return false };
        let value = err.value(py);
        let marked = value.getattr("batchlab_engine_dead").and_then(|v| v.is_truthy()).unwrap_or(false);
        let named =
            value.get_type().mro().iter().any(|t| {
                t.getattr("__name__").and_then(|n| n.extract::<String>()).is_ok_and(|n| n == "EngineDeadError")
            });
        if marked || named {
            return true;
        }
        current = err.cause(py);
    }
    false
}

/// A Python exception as one line: `Type: message`, plus the innermost traceback frame's place.
fn describe(e: PyErr) -> String {
    Python::attach(|py| {
        let mut text = e.to_string();
        if let Some(tb) = e.traceback(py)
            && let Ok(formatted) = tb.format()
        {
            tracing::debug!(traceback = %formatted, "Python exception");
            if let Some(last) = formatted.lines().rev().find(|l| l.trim_start().starts_with("File ")) {
                text.push_str(&format!(" (at {})", last.trim()));
            }
        }
        text
    })
}

/// Outcome of the one initialization this process gets, and the venv it was for.
static INITIALIZED: OnceLock<Mutex<Option<Result<String, String>>>> = OnceLock::new();

/// Starts the interpreter as the venv's python, with `env` set first. Only the first call starts
/// it; later calls (a second engine in one process) must name the same venv.
fn initialize(venv: &Path, env: &[(String, String)]) -> Result<(), String> {
    let venv_text = venv.to_string_lossy().into_owned();
    let cell = INITIALIZED.get_or_init(|| Mutex::new(None));
    let mut state = cell.lock().unwrap_or_else(|p| p.into_inner());
    match &*state {
        Some(Ok(first)) if *first == venv_text => return Ok(()),
        Some(Ok(first)) => {
            return Err(format!("Python is already running from the venv {first}; it cannot switch to {venv_text}"));
        }
        Some(Err(e)) => return Err(e.clone()),
        None => {}
    }
    let result = initialize_once(venv, env).map(|()| venv_text);
    *state = Some(result.clone());
    result.map(drop)
}

fn initialize_once(venv: &Path, env: &[(String, String)]) -> Result<(), String> {
    // SAFETY: Py_IsInitialized may be called at any time.
    if unsafe { pyo3::ffi::Py_IsInitialized() } != 0 {
        // Someone else started it; `bootstrap.prepare` reports it if it is not the venv's.
        return Ok(());
    }
    for (key, value) in env {
        // SAFETY: this runs once, on the engine thread, before the interpreter exists; batchlab's
        // other threads read the environment only while starting up, before any engine starts.
        // OpenMP reads OMP_NUM_THREADS when torch loads it, so it must be set in the process
        // environment now, not only in Python's `os.environ` later.
        unsafe { std::env::set_var(key, value) };
    }
    let python = venv.join("bin/python");
    let python = CString::new(python.as_os_str().as_bytes()).map_err(|e| format!("venv path: {e}"))?;
    // SAFETY: the PyConfig calls follow CPython's "Python Initialization Configuration" protocol:
    // init the struct, set fields through the API, initialize, clear. The interpreter is not
    // initialized (checked above), and this runs once (guarded by INITIALIZED).
    unsafe {
        let mut config = std::mem::MaybeUninit::<pyo3::ffi::PyConfig>::zeroed();
        pyo3::ffi::PyConfig_InitPythonConfig(config.as_mut_ptr());
        let config = config.assume_init_mut();
        // Like pyo3's own initialization: Python must not take over SIGINT and friends.
        config.install_signal_handlers = 0;
        config.parse_argv = 0;
        // The executable decides sys.prefix: the venv's python makes it the venv (pyvenv.cfg).
        let mut status = pyo3::ffi::PyConfig_SetBytesString(config, &mut config.program_name, python.as_ptr());
        if pyo3::ffi::PyStatus_Exception(status) == 0 {
            status = pyo3::ffi::PyConfig_SetBytesString(config, &mut config.executable, python.as_ptr());
        }
        if pyo3::ffi::PyStatus_Exception(status) == 0 {
            status = pyo3::ffi::Py_InitializeFromConfig(config);
        }
        pyo3::ffi::PyConfig_Clear(config);
        if pyo3::ffi::PyStatus_Exception(status) != 0 {
            let message = if status.err_msg.is_null() {
                "unknown error".into()
            } else {
                CStr::from_ptr(status.err_msg).to_string_lossy()
            };
            return Err(format!("starting Python from {}: {message}", venv.display()));
        }
        // Release the GIL taken by initialization, as pyo3's own initialization does.
        pyo3::ffi::PyEval_SaveThread();
    }
    // A no-op now, but keeps pyo3's bookkeeping in step.
    Python::initialize();
    Ok(())
}
