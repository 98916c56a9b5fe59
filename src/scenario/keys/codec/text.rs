//! Strings with a rule: not blank, a scenario name, an HTTP base URL, an environment variable's
//! name.

use super::Codec;
use crate::scenario::reader::{Field, ReadContext};
use toml_edit::{Item, value};

/// A string that is not blank.
pub(super) fn non_blank(cx: &mut ReadContext, field: &Field) -> Option<String> {
    let s = cx.string_of(field)?;
    if s.trim().is_empty() {
        cx.report_at(field, format!("`{}` must not be empty", field.path), None);
        return None;
    }
    Some(s)
}

/// A scenario name: it names the default output directory, `results/<name>`, so it must be one
/// plain path component (no `/` or `\\`, not `.` or `..`, no control characters, not blank).
pub(crate) struct ScenarioName;
codec!(ScenarioName => String, |_c, cx, field| scenario_name(cx, field), |v| v.as_str());

fn scenario_name(cx: &mut ReadContext, field: &Field) -> Option<String> {
    let name = non_blank(cx, field)?;
    match name_problem(&name) {
        None => Some(name),
        Some(why) => {
            let message =
                format!("`{}` must be a plain file name (it names the directory results/<name>): {why}", field.path);
            let help = "use letters, digits, `-`, `_` or `.`; set `output.dir` (or pass --output) to write elsewhere";
            cx.report_at(field, message, Some(help.to_owned()));
            None
        }
    }
}

/// Why `name` cannot be a scenario name, if it cannot.
pub(crate) fn name_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("it is blank")
    } else if name.contains(['/', '\\']) {
        Some("it holds a path separator")
    } else if name == "." || name == ".." {
        Some("it names a directory")
    } else if name.chars().any(char::is_control) {
        Some("it holds a control character")
    } else {
        None
    }
}

/// A string that is not blank.
pub(crate) struct NonBlank;
codec!(NonBlank => String, |_c, cx, field| non_blank(cx, field), |v| v.as_str());

/// An HTTP engine's base URL (`engine::openai::config::base_url`), normalized.
pub(crate) struct BaseUrl;
codec!(BaseUrl => String, |_c, cx, field| base_url(cx, field), |v| v.as_str());

fn base_url(cx: &mut ReadContext, field: &Field) -> Option<String> {
    let url = cx.string_of(field)?;
    match crate::engine::openai::config::base_url(&url) {
        Ok(url) => Some(url),
        Err(why) => {
            let help = "a server's base URL, e.g. \"http://127.0.0.1:8000\"; `/v1/completions` is appended";
            cx.report_at(field, format!("`{}`: not a base URL: {why}", field.path), Some(help.to_owned()));
            None
        }
    }
}

/// The name of an environment variable. A value that is not a name (a key pasted in by mistake)
/// is refused without being repeated.
pub(crate) struct EnvVarName;
codec!(EnvVarName => String, |_c, cx, field| env_var_name(cx, field), |v| v.as_str());

fn env_var_name(cx: &mut ReadContext, field: &Field) -> Option<String> {
    let name = cx.string_of(field)?;
    let Err(why) = crate::engine::openai::config::check_api_key_env(&name) else { return Some(name) };
    cx.mask(field, &name);
    let message = format!("`{}` {why}", field.path);
    let help = "e.g. `api_key_env = \"OPENAI_API_KEY\"`, with the key itself in that variable, never in the scenario";
    cx.report_at(field, message, Some(help.to_owned()));
    None
}
