//! Problems found in a scenario, and how they are shown.
//!
//! Validation collects every problem before giving up, so one run shows the whole list instead of
//! a fix-one-rerun loop. The report reads like rustc's so the eye finds file, line and caret where
//! it expects them, and it stays compact enough for one screen.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

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
        /// The line as shown under the message: control characters escaped (`\u{1b}`), a long
        /// line cut to a window around the caret (marked `…`).
        line_text: String,
        /// Where the caret starts in `line_text`, in characters from its start.
        caret: usize,
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
    /// For many ranges of one text use [`LineIndex`], built once.
    pub(crate) fn in_source(file: &str, source: &str, span: Range<usize>) -> Origin {
        LineIndex::new(source).origin(file, source, span)
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

/// Where each line of a text starts. A range's line is then a binary search, and
/// [`LineIndex::locate_all`] places any number of ranges in one pass over the text, so reporting
/// every problem of a file is linear in its size, not a count of newlines per problem.
pub(crate) struct LineIndex {
    /// Byte offset of the start of each line; the first is 0.
    starts: Vec<usize>,
}

/// A snippet line longer than this many bytes is shown as a window around the caret.
const SNIPPET_BYTES: usize = 120;
/// How many characters of a long line the window shows before the caret, and in all.
const WINDOW_BEFORE: usize = 30;
const WINDOW_CHARS: usize = 100;

impl LineIndex {
    pub(crate) fn new(source: &str) -> LineIndex {
        let newlines = source.bytes().enumerate().filter(|(_, b)| *b == b'\n').map(|(i, _)| i + 1);
        LineIndex { starts: std::iter::once(0).chain(newlines).collect() }
    }

    /// The 0-based line holding byte `at`.
    fn line_of(&self, at: usize) -> usize {
        self.starts.partition_point(|&s| s <= at).saturating_sub(1)
    }

    /// The origin of one range of `source` (the text this index was built from); its column is
    /// counted from the start of its line.
    pub(crate) fn origin(&self, file: &str, source: &str, span: Range<usize>) -> Origin {
        let start = floor_char_boundary(source, span.start.min(source.len()));
        let line = self.line_of(start);
        let column = source[self.starts[line]..start].chars().count();
        self.origin_at(file, source, start, span.end, line, column)
    }

    /// The origins of many ranges of `source`, in their order: one pass over the text, in order of
    /// position, carrying the column along, so even one long line with many problems is linear.
    pub(crate) fn locate_all(&self, file: &str, source: &str, spans: &[Range<usize>]) -> Vec<Origin> {
        let starts: Vec<usize> = spans.iter().map(|s| floor_char_boundary(source, s.start.min(source.len()))).collect();
        let mut order: Vec<usize> = (0..spans.len()).collect();
        order.sort_by_key(|&i| starts[i]);
        let mut origins = vec![None; spans.len()];
        let (mut at, mut line, mut column) = (0, 0, 0);
        for i in order {
            let start = starts[i];
            let l = self.line_of(start);
            if l != line {
                (at, line, column) = (self.starts[l], l, 0);
            }
            column += source[at..start].chars().count();
            at = start;
            origins[i] = Some(self.origin_at(file, source, start, spans[i].end, line, column));
        }
        origins.into_iter().map(|o| o.unwrap_or_else(|| Origin::File { file: file.to_owned() })).collect()
    }

    /// The origin of the range `start..end` (`start` a char boundary on 0-based `line`, `column`
    /// characters into it). Only a window of a long line is looked at.
    fn origin_at(&self, file: &str, source: &str, start: usize, end: usize, line: usize, column: usize) -> Origin {
        let line_start = self.starts[line];
        let line_end = self.starts.get(line + 1).map_or(source.len(), |next| next - 1);
        let line_end = if source[line_start..line_end].ends_with('\r') { line_end - 1 } else { line_end }.max(start);
        let end = floor_char_boundary(source, end.clamp(start, line_end));
        let (from, to) = if line_end - line_start <= SNIPPET_BYTES {
            (line_start, line_end)
        } else {
            let from = source[line_start..start]
                .char_indices()
                .rev()
                .nth(WINDOW_BEFORE - 1)
                .map_or(line_start, |(i, _)| line_start + i);
            let to = source[from..line_end].char_indices().nth(WINDOW_CHARS).map_or(line_end, |(i, _)| from + i);
            (from, to)
        };
        let (open, close) = (if from > line_start { "…" } else { "" }, if to < line_end { "…" } else { "" });
        let line_text = format!("{open}{}{close}", escape_line(&source[from..to]));
        let caret = open.chars().count() + shown_width(&source[from..start]);
        let width = shown_width(&source[start..end.min(to).max(start)]).max(1);
        Origin::Source { file: file.to_owned(), line: line + 1, column: column + 1, line_text, caret, width }
    }
}

/// A character as an error report prints it: a tab as a space, any other control character
/// (ESC, CR, NUL, DEL, the C1 range) as its `\u{..}` escape, so that no scenario text, key or
/// value can drive the user's terminal.
fn push_shown(out: &mut String, c: char) {
    match c {
        '\t' => out.push(' '),
        c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
        c => out.push(c),
    }
}

fn shown_width(text: &str) -> usize {
    text.chars().map(|c| if c.is_control() && c != '\t' { c.escape_unicode().count() } else { 1 }).sum()
}

fn escape_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    text.chars().for_each(|c| push_shown(&mut out, c));
    out
}

/// A message, help or name longer than this many characters is cut (it quotes what was found,
/// which can be a whole line).
const MESSAGE_CHARS: usize = 300;

/// `text` as a report prints it: every control character escaped as in the snippets (newlines
/// too: a message is one line), cut after [`MESSAGE_CHARS`] characters.
pub(crate) fn escape_controls(text: &str) -> Cow<'_, str> {
    let long = text.len() > MESSAGE_CHARS && text.chars().nth(MESSAGE_CHARS).is_some();
    if !long && !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let cut: String = text.chars().take(MESSAGE_CHARS).collect();
    let mut shown = escape_line(&cut);
    if long {
        shown.push('…');
    }
    Cow::Owned(shown)
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

/// Up to this many problems are shown with their line and a caret; more are listed one per line.
pub const FULL_REPORT_MAX: usize = 5;
/// At most this many problems are listed; the rest are counted (`… and N more`).
pub const LISTED_MAX: usize = 20;

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = self.problems.len() <= FULL_REPORT_MAX;
        for p in self.problems.iter().take(LISTED_MAX) {
            let message = escape_controls(&p.message);
            let help = p.help.as_deref().map(escape_controls);
            if !full {
                // One line each: `error: file:line:column: message; help`.
                write!(f, "error: {}: {message}", escape_controls(&p.origin.short()))?;
                match help {
                    Some(help) => writeln!(f, "; {help}")?,
                    None => writeln!(f)?,
                }
                continue;
            }
            writeln!(f, "error: {message}")?;
            match &p.origin {
                Origin::Source { line, line_text, caret, width, .. } => {
                    let gutter = line.to_string().len();
                    writeln!(f, "{:gutter$}--> {}", "", escape_controls(&p.origin.short()))?;
                    writeln!(f, "{:gutter$} |", "")?;
                    writeln!(f, "{line} | {line_text}")?;
                    writeln!(f, "{:gutter$} | {:caret$}{}", "", "", "^".repeat(*width))?;
                }
                Origin::Override { arg } => writeln!(f, " --> {}", escape_controls(arg))?,
                Origin::File { file } => writeln!(f, " --> {}", escape_controls(file))?,
            }
            if let Some(help) = help {
                writeln!(f, "  = help: {help}")?;
            }
            writeln!(f)?;
        }
        if let Some(more) = self.problems.len().checked_sub(LISTED_MAX).filter(|n| *n > 0) {
            writeln!(f, "… and {more} more")?;
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

/// Keys an older batchlab had and has renamed, by the dotted path of their table: `(table,
/// [(old, new, what changed)])`. The schema holds the one list (`schema::RENAMED`); the reader
/// is given it as data.
pub(crate) type RenamedKeys = [(&'static str, &'static [(&'static str, &'static str, &'static str)])];

/// The hint for `key` of the table at `path` (dotted) if `renamed` has it, given instead of a
/// did-you-mean: its new name and why it changed.
pub(crate) fn renamed_hint(renamed: &RenamedKeys, path: &str, key: &str) -> Option<String> {
    let (_, keys) = renamed.iter().find(|(table, _)| *table == path)?;
    let (_, new, why) = keys.iter().find(|(old, ..)| *old == key)?;
    Some(format!("`{key}` was renamed to `{new}`: {why}"))
}
