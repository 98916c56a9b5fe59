//! Paths as the keys take them: as written, beside the scenario, a model's (beside the scenario
//! or under `$BATCHLAB_HOME`), and a file that must exist.

use std::path::{Path, PathBuf};

use super::Codec;
use crate::scenario::reader::{Field, ReadContext};
use toml_edit::{Item, value};

/// A path as written (relative to the current directory when it is used).
pub(crate) struct PathAsIs;
codec!(PathAsIs => PathBuf, |_c, cx, field| cx.string_of(field).map(PathBuf::from), |v| v.to_string_lossy().as_ref());

/// A path relative to the scenario's directory; existence is the user's business.
pub(crate) struct PathBeside;
codec!(PathBeside => PathBuf, |_c, cx, field| path_beside(cx, field), |v| v.to_string_lossy().as_ref());

fn path_beside(cx: &mut ReadContext, field: &Field) -> Option<PathBuf> {
    resolved(cx, field, |dir, p| dir.join(p))
}

/// A written path: an absolute one as it is, a relative one through `resolve` (given the
/// scenario's directory), made absolute.
fn resolved(cx: &mut ReadContext, field: &Field, resolve: fn(&Path, PathBuf) -> PathBuf) -> Option<PathBuf> {
    let p = PathBuf::from(cx.string_of(field)?);
    if p.is_absolute() {
        return Some(p);
    }
    let p = resolve(cx.base_dir, p);
    Some(std::path::absolute(&p).unwrap_or(p))
}

/// A model path: absolute, or next to the scenario if it exists there, else under
/// `$BATCHLAB_HOME` (default `~/.cache/batchlab`). Existence is the engine's business.
pub(crate) struct ModelPath;
codec!(ModelPath => PathBuf, |_c, cx, field| model_path(cx, field), |v| v.to_string_lossy().as_ref());

pub(super) fn model_path(cx: &mut ReadContext, field: &Field) -> Option<PathBuf> {
    resolved(cx, field, |dir, model| {
        let beside = dir.join(&model);
        if beside.exists() { beside } else { crate::engine::python::batchlab_home().join(model) }
    })
}

/// A file relative to the scenario's directory that must exist.
pub(crate) struct ExistingFile;
codec!(ExistingFile => PathBuf, |_c, cx, field| existing_file(cx, field), |v| v.to_string_lossy().as_ref());

fn existing_file(cx: &mut ReadContext, field: &Field) -> Option<PathBuf> {
    let written = cx.string_of(field)?;
    let joined = cx.base_dir.join(&written);
    let path = std::path::absolute(&joined).unwrap_or_else(|_| joined.clone());
    if !path.is_file() {
        let message = format!("workload file `{written}` not found (looked for {})", joined.display());
        cx.report_at(field, message, Some("paths are relative to the scenario file".to_owned()));
    }
    Some(path)
}
