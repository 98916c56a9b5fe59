//! Typed, located reads from a parsed TOML tree.
//!
//! Every read names what it expected, records a [`Problem`] with the exact place when the value is
//! wrong, and returns `None` so the caller carries on with a default: that is how validation
//! reports every problem in one pass instead of stopping at the first.

use std::ops::Range;
use std::time::Duration;

use toml_edit::{Item, TableLike, Value};

use super::error::{LineIndex, Origin, Problem, RenamedKeys, did_you_mean, renamed_hint};
use super::files::Files;
use super::units::parse_duration;

/// A value put in place by `--set`, `--seed` or the builder, so problems about it point there.
#[derive(Clone, Debug)]
pub(crate) struct AppliedSet {
    pub path: String,
    pub label: String,
}

/// The validation context: the text for locations, the overrides, and the problems so far.
pub(crate) struct ReadContext<'a> {
    pub source: &'a str,
    pub file: &'a str,
    /// Relative workload, model and engine paths resolve against this.
    pub base_dir: &'a std::path::Path,
    /// Where a file the lowering reads (a profile, a template, a trace) comes from.
    pub files: &'a Files,
    pub sets: &'a [AppliedSet],
    /// Renamed keys, hinted at instead of a did-you-mean (the schema's list, given as data).
    renamed: &'a RenamedKeys,
    problems: Vec<Problem>,
    lines: LineIndex,
    /// The problems (by index) whose origin is a range of the text: placed all at once, in one
    /// pass, by [`ReadContext::into_problems`].
    pending: Vec<(usize, Range<usize>)>,
    /// Values that look like secrets (a key where a variable's name belongs): masked wherever a
    /// problem would show them, on every line.
    secrets: Vec<String>,
    /// Where in the text they are written (as TOML writes them, escapes and all).
    secret_spans: Vec<Range<usize>>,
}

/// `text` with every occurrence of each of `secrets` replaced by as many bytes of `*`.
/// (line ends kept, so lines stay where they were).
fn mask_all(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |text, secret| {
        let stars: String = secret.chars().flat_map(|c| masked(c).take(c.len_utf8())).collect();
        text.replace(secret.as_str(), &stars)
    })
}

/// A character's mask: a line end as itself, anything else `*`s.
fn masked(c: char) -> impl Iterator<Item = char> {
    std::iter::repeat(if c == '\n' || c == '\r' { c } else { '*' })
}

/// A table of the scenario, with its dotted path for messages.
#[derive(Clone, Copy)]
pub(crate) struct LocatedTable<'t> {
    pub path: &'t str,
    pub table: &'t dyn TableLike,
    /// Start and end of the table in the source (a `Range` is not `Copy`).
    pub at: Option<(usize, usize)>,
}

impl LocatedTable<'_> {
    pub fn span(&self) -> Option<Range<usize>> {
        self.at.map(|(start, end)| start..end)
    }
}

/// A located node: a table entry or an array element.
#[derive(Clone, Copy)]
pub(crate) enum Node<'t> {
    Item(&'t Item),
    Value(&'t Value),
}

impl<'t> Node<'t> {
    pub fn value(self) -> Option<&'t Value> {
        match self {
            Node::Item(item) => item.as_value(),
            Node::Value(v) => Some(v),
        }
    }

    pub fn table_like(self) -> Option<&'t dyn TableLike> {
        match self {
            Node::Item(item) => item.as_table_like(),
            Node::Value(v) => v.as_inline_table().map(|t| t as &dyn TableLike),
        }
    }

    fn span(self) -> Option<Range<usize>> {
        match self {
            Node::Item(item) => item.span(),
            Node::Value(v) => v.span(),
        }
    }

    /// "an integer", "a string", ...: for "expected X, found Y".
    pub fn type_name(self) -> &'static str {
        match self {
            Node::Item(Item::Table(_)) => "a table",
            Node::Item(Item::ArrayOfTables(_)) => "an array of tables",
            Node::Item(Item::None) => "nothing",
            _ => match self.value() {
                Some(Value::String(_)) => "a string",
                Some(Value::Integer(_)) => "an integer",
                Some(Value::Float(_)) => "a float",
                Some(Value::Boolean(_)) => "a boolean",
                Some(Value::Datetime(_)) => "a datetime",
                Some(Value::Array(_)) => "an array",
                Some(Value::InlineTable(_)) => "a table",
                None => "nothing",
            },
        }
    }
}

/// A value found under a key, with its full dotted path.
#[derive(Clone)]
pub(crate) struct Field<'t> {
    pub path: String,
    pub node: Node<'t>,
    /// The key's span: used when the value has none (e.g. an implicit table).
    pub key_span: Option<Range<usize>>,
}

impl Field<'_> {
    pub fn span(&self) -> Option<Range<usize>> {
        self.node.span().or_else(|| self.key_span.clone())
    }
}

pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_owned() } else { format!("{parent}.{key}") }
}

/// Whether a numeric range is open or closed at its low end.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum LowerBound {
    AtLeast(f64),
    Above(f64),
}

impl<'a> ReadContext<'a> {
    pub fn new(
        source: &'a str,
        file: &'a str,
        base_dir: &'a std::path::Path,
        files: &'a Files,
        sets: &'a [AppliedSet],
        renamed: &'a RenamedKeys,
        problems: Vec<Problem>,
    ) -> Self {
        let lines = LineIndex::new(source);
        ReadContext {
            source,
            file,
            base_dir,
            files,
            sets,
            renamed,
            problems,
            lines,
            pending: Vec::new(),
            secrets: Vec::new(),
            secret_spans: Vec::new(),
        }
    }

    /// `field` holds a secret, `value`: no problem shows it, in its message, its help or a source
    /// excerpt of any line.
    pub fn mask(&mut self, field: &Field, value: &str) {
        if !value.is_empty() && !self.secrets.iter().any(|s| s == value) {
            self.secrets.push(value.to_owned());
        }
        self.secret_spans.extend(field.span());
    }

    /// Every problem reported, each with its origin.
    pub fn into_problems(self) -> Vec<Problem> {
        let mut problems = self.problems;
        let spans: Vec<Range<usize>> = self.pending.iter().map(|(_, span)| span.clone()).collect();
        // Excerpts come from a text with every secret masked byte for byte, so the spans still
        // fit and a window cut through a secret shows none of it either.
        let mut masked = self.source.as_bytes().to_vec();
        for span in &self.secret_spans {
            for b in &mut masked[span.clone()] {
                if *b != b'\n' && *b != b'\r' {
                    *b = b'*';
                }
            }
        }
        let masked = mask_all(&String::from_utf8_lossy(&masked), &self.secrets);
        let origins = self.lines.locate_all(self.file, &masked, &spans);
        for ((index, _), origin) in self.pending.iter().zip(origins) {
            problems[*index].origin = origin;
        }
        if !self.secrets.is_empty() {
            for p in &mut problems {
                p.message = mask_all(&p.message, &self.secrets);
                p.help = p.help.as_deref().map(|h| mask_all(h, &self.secrets));
                match &mut p.origin {
                    Origin::Source { line_text, .. } => *line_text = mask_all(line_text, &self.secrets),
                    Origin::Override { arg } => *arg = mask_all(arg, &self.secrets),
                    Origin::File { .. } => {}
                }
            }
        }
        problems
    }

    /// Whether any problem was reported.
    pub fn has_problems(&self) -> bool {
        !self.problems.is_empty()
    }

    /// The override covering `path`, if one does (the latest).
    fn covering_set(&self, path: &str) -> Option<&AppliedSet> {
        let covered = |set: &&AppliedSet| {
            path.strip_prefix(set.path.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        };
        self.sets.iter().rev().find(covered)
    }

    /// Where the value at `path` came from: the latest override covering it, else its span.
    pub fn origin(&self, path: &str, span: Option<Range<usize>>) -> Origin {
        if let Some(set) = self.covering_set(path) {
            return Origin::Override { arg: set.label.clone() };
        }
        match span {
            Some(span) => self.lines.origin(self.file, self.source, span),
            None => Origin::File { file: self.file.to_owned() },
        }
    }

    pub fn report(&mut self, path: &str, span: Option<Range<usize>>, message: String, help: Option<String>) {
        let origin = match (self.covering_set(path), span) {
            (Some(set), _) => Origin::Override { arg: set.label.clone() },
            (None, Some(span)) => {
                // Placed later, with every other problem, in one pass over the text.
                self.pending.push((self.problems.len(), span));
                Origin::File { file: self.file.to_owned() }
            }
            (None, None) => Origin::File { file: self.file.to_owned() },
        };
        self.problems.push(Problem { message, origin, help });
    }

    pub fn report_at(&mut self, field: &Field, message: String, help: Option<String>) {
        self.report(&field.path, field.span(), message, help);
    }

    fn wrong_type(&mut self, field: &Field, expected: &str) {
        let message = format!("`{}`: expected {expected}, found {}", field.path, field.node.type_name());
        self.report_at(field, message, None);
    }

    pub fn field<'t>(&self, t: LocatedTable<'t>, key: &str) -> Option<Field<'t>> {
        let (k, item) = t.table.get_key_value(key)?;
        if item.is_none() {
            return None;
        }
        Some(Field { path: join(t.path, key), node: Node::Item(item), key_span: k.span() })
    }

    /// Reports every key of `t` that is not in `known`.
    pub fn check_keys(&mut self, t: LocatedTable, known: &[&str]) {
        for (key, _) in t.table.iter() {
            if known.contains(&key) {
                continue;
            }
            let span = t.table.key(key).and_then(|k| k.span());
            let place = if t.path.is_empty() { "at the top level".to_owned() } else { format!("in [{}]", t.path) };
            let help = renamed_hint(self.renamed, t.path, key).or_else(|| did_you_mean(key, known.iter().copied()));
            self.report(&join(t.path, key), span, format!("unknown key `{key}` {place}"), help);
        }
    }

    /// The table-like node of `field`, or a type problem.
    pub fn as_table<'t>(&mut self, field: &Field<'t>, path: &'t str, known: &[&str]) -> Option<LocatedTable<'t>> {
        match field.node.table_like() {
            Some(table) => {
                let t = LocatedTable { path, table, at: field.span().map(|r| (r.start, r.end)) };
                self.check_keys(t, known);
                Some(t)
            }
            None => {
                self.wrong_type(field, "a table");
                None
            }
        }
    }

    /// The sub-table `key` of `t`, its unknown keys already reported; `path` is its dotted path.
    pub fn section<'t>(
        &mut self,
        t: LocatedTable<'t>,
        key: &str,
        path: &'t str,
        known: &[&str],
    ) -> Option<LocatedTable<'t>> {
        let field = self.field(t, key)?;
        self.as_table(&field, path, known)
    }

    pub fn int_of(&mut self, field: &Field, lo: i64, hi: i64) -> Option<i64> {
        let Some(v) = field.node.value().and_then(Value::as_integer) else {
            self.wrong_type(field, "an integer");
            return None;
        };
        if v < lo || v > hi {
            let range = if hi == i64::MAX { format!("at least {lo}") } else { format!("between {lo} and {hi}") };
            self.report_at(field, format!("`{}` must be {range}, found {v}", field.path), None);
            return None;
        }
        Some(v)
    }

    pub fn int(&mut self, t: LocatedTable, key: &str, lo: i64, hi: i64) -> Option<i64> {
        let field = self.field(t, key)?;
        self.int_of(&field, lo, hi)
    }

    pub fn u32(&mut self, t: LocatedTable, key: &str, lo: u32) -> Option<u32> {
        self.int(t, key, i64::from(lo), i64::from(u32::MAX)).map(|v| v as u32)
    }

    pub fn u64(&mut self, t: LocatedTable, key: &str, lo: u64) -> Option<u64> {
        self.int(t, key, lo as i64, i64::MAX).map(|v| v as u64)
    }

    /// A float (integers accepted) at or above / above `low` and at most `hi`.
    pub fn float_of(&mut self, field: &Field, low: LowerBound, hi: f64) -> Option<f64> {
        let v = match field.node.value() {
            Some(Value::Float(f)) => *f.value(),
            Some(Value::Integer(i)) => *i.value() as f64,
            _ => {
                self.wrong_type(field, "a number");
                return None;
            }
        };
        // TOML's `inf` and `nan` are floats too; no key takes them (a bound of infinity means none).
        if !v.is_finite() {
            let message = format!("`{}` must be a finite number, found {v}", field.path);
            self.report_at(field, message, None);
            return None;
        }
        let ok = match low {
            LowerBound::AtLeast(lo) => v >= lo,
            LowerBound::Above(lo) => v > lo,
        } && v <= hi;
        if !ok {
            let range = match low {
                LowerBound::AtLeast(lo) if hi.is_finite() => format!("between {lo} and {hi}"),
                LowerBound::AtLeast(lo) if lo == f64::MIN => "finite".to_owned(),
                LowerBound::AtLeast(lo) => format!("at least {lo}"),
                LowerBound::Above(lo) if hi == f64::MAX => format!("a finite number greater than {lo}"),
                LowerBound::Above(lo) if hi.is_finite() => format!("greater than {lo} and at most {hi}"),
                LowerBound::Above(lo) => format!("greater than {lo}"),
            };
            self.report_at(field, format!("`{}` must be {range}, found {v}", field.path), None);
            return None;
        }
        Some(v)
    }

    pub fn float(&mut self, t: LocatedTable, key: &str, low: LowerBound, hi: f64) -> Option<f64> {
        let field = self.field(t, key)?;
        self.float_of(&field, low, hi)
    }

    pub fn boolean_of(&mut self, field: &Field) -> Option<bool> {
        match field.node.value().and_then(Value::as_bool) {
            Some(b) => Some(b),
            None => {
                self.wrong_type(field, "a boolean (true or false)");
                None
            }
        }
    }

    pub fn string_of(&mut self, field: &Field) -> Option<String> {
        match field.node.value().and_then(Value::as_str) {
            Some(s) => Some(s.to_owned()),
            None => {
                self.wrong_type(field, "a string");
                None
            }
        }
    }

    /// A string naming one of `options`.
    pub fn choice(&mut self, t: LocatedTable, key: &str, options: &[&'static str]) -> Option<&'static str> {
        let field = self.field(t, key)?;
        self.choice_of(&field, options)
    }

    pub fn choice_of(&mut self, field: &Field, options: &[&'static str]) -> Option<&'static str> {
        let found = self.string_of(field)?;
        if let Some(option) = options.iter().find(|o| **o == found) {
            return Some(option);
        }
        let list = options.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ");
        let help = did_you_mean(&found, options.iter().copied());
        self.report_at(field, format!("`{}` must be one of {list}, found `{found}`", field.path), help);
        None
    }

    /// A duration string; zero allowed only with `allow_zero`.
    pub fn duration_of(&mut self, field: &Field, allow_zero: bool) -> Option<Duration> {
        let Some(text) = field.node.value().and_then(Value::as_str) else {
            let message =
                format!("`{}`: expected a duration such as \"10ms\", found {}", field.path, field.node.type_name());
            self.report_at(field, message, Some("write the number and its unit as a string: \"10ms\"".to_owned()));
            return None;
        };
        match parse_duration(text) {
            Ok(d) if d.is_zero() && !allow_zero => {
                self.report_at(field, format!("`{}` must be greater than 0", field.path), None);
                None
            }
            Ok(d) => Some(d),
            Err(message) => {
                self.report_at(field, format!("`{}`: {message}", field.path), None);
                None
            }
        }
    }

    /// The elements of an array value, each located.
    pub fn array<'t>(&mut self, field: &Field<'t>) -> Option<Vec<Field<'t>>> {
        let Some(array) = field.node.value().and_then(Value::as_array) else {
            self.wrong_type(field, "an array");
            return None;
        };
        let elements = array
            .iter()
            .enumerate()
            .map(|(i, v)| Field { path: format!("{}[{i}]", field.path), node: Node::Value(v), key_span: None })
            .collect();
        Some(elements)
    }
}
