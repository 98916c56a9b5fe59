//! A change of a plan as data: a key path and the value a scenario file could write there.
//!
//! A [`Set`] is what [`super::Plan::with_sets`] takes. It is made from a key's typed handle
//! ([`KeyPath::to`]: `keys::BATCH_SIZE.to(64)`, the handles in [`super::keys`]), or from a path
//! and a [`SetValue`] for a key no handle names ([`Set::new`]). A whole section is set from the
//! sets of its keys ([`KeyPath::table`]), replacing it as a table written in its place would.
//! Nothing here knows TOML: the door (`change`) writes each value as `--set` text.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::time::Duration;

use super::units::format_duration;

/// A value as a scenario file writes it.
#[derive(Clone, Debug, PartialEq)]
pub enum SetValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string (a duration too, as `"10ms"`).
    Text(String),
    /// A boolean.
    Bool(bool),
    /// A list.
    List(Vec<SetValue>),
    /// An inline table, its keys in order; a key may hold a table of its own.
    Table(Vec<(String, SetValue)>),
}

impl SetValue {
    /// The value as a matrix label shows it: a string bare, a number as Rust writes it (`2`,
    /// `2.5`), a list or a table as TOML writes it.
    pub(crate) fn label(&self) -> String {
        match self {
            SetValue::Int(i) => i.to_string(),
            SetValue::Float(f) => f.to_string(),
            SetValue::Text(s) => s.clone(),
            SetValue::Bool(b) => b.to_string(),
            SetValue::List(items) => {
                let items: Vec<String> = items.iter().map(SetValue::nested_label).collect();
                format!("[{}]", items.join(", "))
            }
            SetValue::Table(entries) => {
                if entries.is_empty() {
                    return "{}".to_owned();
                }
                let entries: Vec<String> = entries.iter().map(|(k, v)| format!("{k} = {}", v.nested_label())).collect();
                format!("{{ {} }}", entries.join(", "))
            }
        }
    }

    /// A label inside a list or a table: strings quoted.
    fn nested_label(&self) -> String {
        match self {
            SetValue::Text(s) => format!("{s:?}"),
            other => other.label(),
        }
    }

    /// Puts `value` at the dotted `path` under this table, making the tables on the way.
    fn insert(entries: &mut Vec<(String, SetValue)>, path: &str, value: SetValue) {
        let (head, rest) = match path.split_once('.') {
            Some((head, rest)) => (head, Some(rest)),
            None => (path, None),
        };
        let at = match entries.iter().position(|(k, _)| k == head) {
            Some(at) => at,
            None => {
                entries.push((head.to_owned(), SetValue::Table(Vec::new())));
                entries.len() - 1
            }
        };
        match rest {
            None => entries[at].1 = value,
            Some(rest) => {
                if !matches!(entries[at].1, SetValue::Table(_)) {
                    entries[at].1 = SetValue::Table(Vec::new());
                }
                if let SetValue::Table(inner) = &mut entries[at].1 {
                    SetValue::insert(inner, rest, value);
                }
            }
        }
    }
}

impl From<i64> for SetValue {
    fn from(v: i64) -> Self {
        SetValue::Int(v)
    }
}

/// A whole number beyond TOML's integers is written as the largest one.
impl From<u64> for SetValue {
    fn from(v: u64) -> Self {
        SetValue::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<u32> for SetValue {
    fn from(v: u32) -> Self {
        SetValue::Int(i64::from(v))
    }
}

impl From<f64> for SetValue {
    fn from(v: f64) -> Self {
        SetValue::Float(v)
    }
}

impl From<bool> for SetValue {
    fn from(v: bool) -> Self {
        SetValue::Bool(v)
    }
}

impl From<&str> for SetValue {
    fn from(v: &str) -> Self {
        SetValue::Text(v.to_owned())
    }
}

impl From<String> for SetValue {
    fn from(v: String) -> Self {
        SetValue::Text(v)
    }
}

/// A duration as the scenario writes one (`"10ms"`).
impl From<Duration> for SetValue {
    fn from(v: Duration) -> Self {
        SetValue::Text(format_duration(v))
    }
}

impl<T: Into<SetValue>> From<Vec<T>> for SetValue {
    fn from(v: Vec<T>) -> Self {
        SetValue::List(v.into_iter().map(Into::into).collect())
    }
}

/// One change: the value at a dotted key path (`batching.batch_size`).
#[derive(Clone, Debug, PartialEq)]
pub struct Set {
    path: Cow<'static, str>,
    value: SetValue,
}

impl Set {
    /// The change of the key at `path`, for a key no handle in [`super::keys`] names. The path
    /// is checked when the change is made, as a `--set`'s is.
    pub fn new(path: impl Into<Cow<'static, str>>, value: impl Into<SetValue>) -> Set {
        Set { path: path.into(), value: value.into() }
    }

    /// The dotted key path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The value set there.
    pub fn value(&self) -> &SetValue {
        &self.value
    }
}

/// The handle of one key: its dotted path, and the Rust type its value is given as.
pub struct KeyPath<T> {
    path: &'static str,
    of: PhantomData<fn(T)>,
}

impl<T> Clone for KeyPath<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for KeyPath<T> {}

impl<T> std::fmt::Debug for KeyPath<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyPath({})", self.path)
    }
}

impl<T> KeyPath<T> {
    pub(crate) const fn new(path: &'static str) -> Self {
        KeyPath { path, of: PhantomData }
    }

    /// The dotted path (`batching.batch_size`), e.g. for [`super::Plan::with_changes`]'s `remove`.
    pub const fn path(self) -> &'static str {
        self.path
    }
}

impl<T: Into<SetValue>> KeyPath<T> {
    /// The change that sets this key to `value`.
    pub fn to(self, value: T) -> Set {
        Set { path: Cow::Borrowed(self.path), value: value.into() }
    }
}

/// The type of a key whose value is text: its change takes a `&str` or a `String`.
#[derive(Clone, Copy, Debug)]
pub struct Text;

impl KeyPath<Text> {
    /// The change that sets this key to `value`.
    pub fn to(self, value: impl Into<String>) -> Set {
        Set { path: Cow::Borrowed(self.path), value: SetValue::Text(value.into()) }
    }
}

/// The value of a whole section (or a key whose value is a table): made from its keys' sets by
/// [`KeyPath::table`].
#[derive(Clone, Copy, Debug)]
pub struct Section;

impl KeyPath<Section> {
    /// The change that replaces this whole section by one holding `sets` (each a key inside it,
    /// e.g. `keys::WORKLOAD.table([keys::PROMPT_TOKENS.to(64)])`); every key not given takes its
    /// default. No sets: an empty section. A set not inside this section keeps its whole path,
    /// and is reported as an unknown key of the section when the change is made.
    pub fn table(self, sets: impl IntoIterator<Item = Set>) -> Set {
        let mut entries = Vec::new();
        for set in sets {
            let inner = set.path.strip_prefix(self.path).and_then(|rest| rest.strip_prefix('.'));
            SetValue::insert(&mut entries, inner.unwrap_or(&set.path), set.value);
        }
        Set { path: Cow::Borrowed(self.path), value: SetValue::Table(entries) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTION: KeyPath<Section> = KeyPath::new("engine");
    const KIND: KeyPath<Text> = KeyPath::new("engine.kind");
    const TIME: KeyPath<Text> = KeyPath::new("engine.sim.time");
    const SEED: KeyPath<u64> = KeyPath::new("engine.sim.seed");

    /// A section's sets become one inline table, nested by their paths under the section, in order.
    #[test]
    fn a_section_is_built_from_its_keys() {
        let set = SECTION.table([KIND.to("sim"), TIME.to("virtual"), SEED.to(u64::MAX)]);
        assert_eq!(set.path(), "engine");
        let sim = SetValue::Table(vec![
            ("time".to_owned(), SetValue::Text("virtual".to_owned())),
            ("seed".to_owned(), SetValue::Int(i64::MAX)),
        ]);
        assert_eq!(
            set.value(),
            &SetValue::Table(vec![("kind".to_owned(), SetValue::Text("sim".to_owned())), ("sim".to_owned(), sim)])
        );
        assert_eq!(set.value().label(), "{ kind = \"sim\", sim = { time = \"virtual\", seed = 9223372036854775807 } }");
        assert_eq!(SECTION.table([]).value(), &SetValue::Table(Vec::new()));
    }

    /// Labels show numbers as Rust writes them and strings bare, as a matrix label does.
    #[test]
    fn labels_are_as_a_matrix_shows_them() {
        assert_eq!(SetValue::from(vec![2.0]).label(), "[2]");
        assert_eq!(SetValue::from(vec![2.5, 3.0]).label(), "[2.5, 3]");
        assert_eq!(SetValue::from(Duration::from_millis(5)).label(), "5ms");
        assert_eq!(SetValue::from(7_u32).label(), "7");
    }
}
