//! The one decision of whether a test that needs Python may run: the venv of `just setup-vllm`
//! (and the tiny model, when the test needs it). Included with `#[path]` by every test that runs
//! a Python engine.
//!
//! A missing venv or model fails the test: a green run must mean the engine was tested. A
//! developer without them may skip on purpose with `BATCHLAB_SKIP_PYTHON=1`; the test then prints
//! SKIPPED and why. Under `CI=true` nothing is skipped, whatever is asked.

use batchlab::engine::python::{batchlab_home, default_venv};

/// The variable a developer sets to skip the Python tests on a machine without the venv.
pub const SKIP_VAR: &str = "BATCHLAB_SKIP_PYTHON";

/// True when the venv (and the tiny model when `model`) is there and the test should run. When
/// something is missing: false, after printing SKIPPED and why, if `BATCHLAB_SKIP_PYTHON=1` asks
/// for it outside CI; otherwise a panic that says what is missing and how to get it.
pub fn ready(model: bool) -> bool {
    let mut needed = vec![default_venv().join("bin/python")];
    if model {
        needed.push(batchlab_home().join("tiny-llama/config.json"));
    }
    let Some(missing) = needed.iter().find(|p| !p.exists()) else { return true };
    let fix = "run `just setup-vllm` (or `just test-vllm`), or point BATCHLAB_HOME at where it is";
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let skip = std::env::var(SKIP_VAR).is_ok_and(|v| v == "1");
    if skip && !ci {
        eprintln!("SKIPPED ({SKIP_VAR}=1): {} is missing; {fix}", missing.display());
        return false;
    }
    let why = if ci && skip {
        format!("CI=true, so {SKIP_VAR}=1 is ignored")
    } else if ci {
        "CI=true: a Python test never skips in CI".to_string()
    } else {
        format!("set {SKIP_VAR}=1 to skip the Python tests on purpose")
    };
    panic!("{} is missing; {fix} ({why})", missing.display());
}
