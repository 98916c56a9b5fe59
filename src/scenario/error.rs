//! Problems found in a scenario, and how they are shown.
//!
//! Validation collects every problem before giving up, so one run shows the whole list instead of
//! a fix-one-rerun loop. The report reads like rustc's so the eye finds file, line and caret where
//! it expects them, and it stays compact enough for one screen.

use std::fmt;

/// Where a problem comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A place in the scenario text; `line` and `column` are 1-based, `width` is the caret length.
    Source {
        /// The file, as the user named it (`builder` for the builder).
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// The whole line, for the caret display.
        line_text: String,
        /// How many characters the caret underlines (at least 1).
        width: usize,
    },
    /// The `--set` (or `--seed`, or builder) argument that put the value there.
    Override {
        /// The argument as given, e.g. `batching.batch_size=0`.
        arg: String,
    },
    /// The file as a whole: it is missing, or a required key is absent from it.
    File {
        /// The file, as the user named it.
        file: String,
    },
}

impl Origin {
    /// The origin of a byte range of `source`, as `file:line:column` plus the line for the caret.
    pub(crate) fn in_source(file: &str, source: &str, span: std::ops::Range<usize>) -> Origin {
        let start = floor_char_boundary(source, span.start.min(source.len()));
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = source[start..].find('\n').map_or(source.len(), |i| start + i);
        let line = source[..start].matches('\n').count() + 1;
        let column = source[line_start..start].chars().count() + 1;
        let end = floor_char_boundary(source, span.end.clamp(start, line_end));
        let width = source[start..end].chars().count().max(1);
        let line_text = source[line_start..line_end].trim_end_matches('\r').replace('\t', " ");
        Origin::Source { file: file.to_owned(), line, column, line_text, width }
    }

    /// `file:line:column`, the argument, or the file: the short form used in expectations.
    pub fn short(&self) -> String {
        match self {
            Origin::Source { file, line, column, .. } => format!("{file}:{line}:{column}"),
            Origin::Override { arg } => arg.clone(),
            Origin::File { file } => file.clone(),
        }
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// One thing wrong with a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// What is wrong: what was found and what was expected.
    pub message: String,
    /// Where the offending value came from.
    pub origin: Origin,
    /// A hint such as "did you mean `batch_size`?".
    pub help: Option<String>,
}

/// Everything wrong with a scenario, reported at once. `Display` renders the full report.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    /// Every problem found, in source order; never empty.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "error: {}", p.message)?;
            match &p.origin {
                Origin::Source { line, line_text, column, width, .. } => {
                    let gutter = line.to_string().len();
                    writeln!(f, "{:gutter$}--> {}", "", p.origin.short())?;
                    writeln!(f, "{:gutter$} |", "")?;
                    writeln!(f, "{line} | {line_text}")?;
                    let pad = column - 1;
                    writeln!(f, "{:gutter$} | {:pad$}{}", "", "", "^".repeat(*width))?;
                }
                Origin::Override { arg } => writeln!(f, " --> {arg}")?,
                Origin::File { file } => writeln!(f, " --> {file}")?,
            }
            if let Some(help) = &p.help {
                writeln!(f, "  = help: {help}")?;
            }
            writeln!(f)?;
        }
        match self.problems.len() {
            1 => write!(f, "1 problem found"),
            n => write!(f, "{n} problems found"),
        }
    }
}

/// "did you mean `x`?" for the candidate closest to `found`, if any is close enough.
pub(crate) fn did_you_mean<'a>(found: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(found, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("did you mean `{c}`?"))
}
