//! The embedded interpreter and the calls into `glue.py`. Every function here runs on the engine
//! thread.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyModule};

use super::output::{RawOutput, map_output};
use crate::engine::{EngineError, EngineInfo, EngineOutput, EngineRequest, Prompt};

const GLUE: &str = include_str!("glue.py");

/// A started `vllm.LLM` and the glue module that drives it.
pub(super) struct Session {
    glue: Py<PyModule>,
    llm: Py<PyAny>,
}

impl Session {
    /// Starts the interpreter (once per process), checks it, and builds the `LLM`.
    pub(super) fn start(
        venv: &Path,
        env: &[(String, String)],
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(Session, EngineInfo), EngineError> {
        initialize(venv, env).map_err(EngineError::Start)?;
        let kwargs = serde_json::to_string(kwargs).map_err(|e| EngineError::Start(e.to_string()))?;
        Python::attach(|py| {
            let glue = load_glue(py)?;
            let env_dict = PyDict::new(py);
            for (key, value) in env {
                env_dict.set_item(key, value)?;
            }
            let venv = venv.to_string_lossy();
            let version: String = glue.getattr("prepare")?.call1((venv.as_ref(), env_dict))?.extract()?;
            let json_kwargs = py.import("json")?.getattr("loads")?.call1((kwargs,))?;
            let llm = match glue.getattr("start")?.call((), Some(&kwargs_dict(&json_kwargs)?)) {
                Ok(llm) => llm,
                Err(e) => {
                    // A half-started engine may have left child processes: reap them.
                    if let Err(reap) = glue.getattr("shutdown").and_then(|f| f.call1((py.None(),))) {
                        tracing::warn!(error = %reap, "cleaning up after a failed vLLM start");
                    }
                    return Err(e);
                }
            };
            let info = EngineInfo { name: "vllm".into(), version };
            Ok((Session { glue: glue.unbind(), llm: llm.unbind() }, info))
        })
        .map_err(|e: PyErr| EngineError::Start(describe(e)))
    }

    pub(super) fn generate(&self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let raw = Python::attach(|py| -> PyResult<Vec<RawOutput>> {
            let requests = PyList::empty(py);
            for req in batch {
                requests.append(request_dict(py, req)?)?;
            }
            let outputs = self.glue.bind(py).getattr("generate")?.call1((self.llm.bind(py), requests))?;
            outputs.cast_into::<PyList>()?.iter().map(|o| raw_output(&o)).collect()
        })
        .map_err(|e| EngineError::Generate(describe(e)))?;
        if raw.len() != batch.len() {
            return Err(EngineError::Generate(format!(
                "vLLM returned {} outputs for {} requests",
                raw.len(),
                batch.len()
            )));
        }
        check_order(&raw)?;
        Ok(raw.into_iter().map(map_output).collect())
    }

    /// Stops the engine core (and in multiprocess mode its child processes, which it waits for).
    pub(super) fn shutdown(self) -> Result<(), EngineError> {
        Python::attach(|py| -> PyResult<()> {
            let result = self.glue.bind(py).getattr("shutdown")?.call1((self.llm.bind(py),));
            drop(self.llm);
            py.import("gc")?.getattr("collect")?.call0()?;
            result.map(drop)
        })
        .map_err(|e| EngineError::Shutdown(describe(e)))
    }
}

/// `LLM.generate` numbers requests with a counter in input order and returns outputs sorted by
/// it; the batcher relies on that order, so a numeric id out of order fails the batch.
fn check_order(raw: &[RawOutput]) -> Result<(), EngineError> {
    let ids: Option<Vec<u64>> = raw.iter().map(|o| o.request_id.parse().ok()).collect();
    if let Some(ids) = ids
        && ids.windows(2).any(|w| w[0] >= w[1])
    {
        return Err(EngineError::Generate(format!("vLLM returned outputs out of input order: request ids {ids:?}")));
    }
    Ok(())
}

/// `json.loads` gave a dict; anything else is a bug in our kwargs.
fn kwargs_dict<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    Ok(value.cast::<PyDict>()?.clone())
}

fn load_glue(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    let code = CString::new(GLUE).expect("glue.py has no NUL byte");
    PyModule::from_code(py, &code, c"batchlab/engine/vllm/glue.py", c"batchlab_vllm_glue")
}

fn request_dict<'py>(py: Python<'py>, req: &EngineRequest) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match &req.prompt {
        Prompt::Text(text) => d.set_item("prompt", text)?,
        Prompt::Tokens(ids) => d.set_item("prompt_token_ids", ids)?,
    }
    d.set_item("max_tokens", req.max_tokens)?;
    d.set_item("min_tokens", req.min_tokens)?;
    d.set_item("ignore_eos", req.ignore_eos)?;
    d.set_item("temperature", req.temperature)?;
    d.set_item("seed", req.seed)?;
    Ok(d)
}

fn raw_output(o: &Bound<'_, PyAny>) -> PyResult<RawOutput> {
    let d = o.cast::<PyDict>()?;
    Ok(RawOutput {
        request_id: item(d, "request_id")?,
        prompt_tokens: item(d, "prompt_tokens")?,
        token_ids: item(d, "token_ids")?,
        text: item(d, "text")?,
        finish_reason: item(d, "finish_reason")?,
        arrival_time: item(d, "arrival_time")?,
        queued_ts: item(d, "queued_ts")?,
        scheduled_ts: item(d, "scheduled_ts")?,
        first_token_ts: item(d, "first_token_ts")?,
        last_token_ts: item(d, "last_token_ts")?,
    })
}

/// `d[key]`, converted; a missing key is an error naming it (the glue always sets every key).
fn item<T>(d: &Bound<'_, PyDict>, key: &str) -> PyResult<T>
where
    T: for<'a, 'py> FromPyObject<'a, 'py>,
    for<'a, 'py> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
{
    let value = d.get_item(key)?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(key.to_owned()))?;
    value.extract::<T>().map_err(Into::into)
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
        // Someone else started it; `glue.prepare` reports it if it is not the venv's.
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
