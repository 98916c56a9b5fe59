//! `scenario` and `scenario_structured`: parsing never panics, and a parsed plan survives
//! `to_toml` → `parse_str` unchanged (except `Expectation::origin`, which names where it was read).

use std::path::Path;
use std::sync::LazyLock;

use arbitrary::Arbitrary;
use batchlab::scenario::expect::known_metrics;
use batchlab::scenario::{Overrides, parse_str, to_toml};
use toml_edit::{Array, InlineTable, Value};

/// Relative paths resolve here; it does not exist, so only absolute workload paths can be found
/// and runs do not depend on the working directory.
pub const BASE_DIR: &str = "/nonexistent/batchlab-fuzz";
pub const FILE_NAME: &str = "fuzz.toml";

/// The shipped scenarios: valid starting points for the structured target.
pub const SEEDS: [&str; 7] = [
    include_str!("../../scenarios/throughput.toml"),
    include_str!("../../scenarios/constant.toml"),
    include_str!("../../scenarios/faults.toml"),
    include_str!("../../scenarios/poisson.toml"),
    include_str!("../../scenarios/sweep.toml"),
    include_str!("../../scenarios/vllm-cpu.toml"),
    include_str!("../../scenarios/vllm-faults.toml"),
];

/// Parses `source` with `overrides`; when it parses, checks the printed plan parses back equal.
pub fn check(source: &str, overrides: &Overrides) {
    let base = Path::new(BASE_DIR);
    let plan = match parse_str(source, FILE_NAME, base, overrides) {
        Ok(plan) => plan,
        Err(e) => {
            // Rendering the report must not panic either.
            let _ = e.to_string();
            return;
        }
    };
    let printed = to_toml(&plan);
    let reparsed = match parse_str(&printed, FILE_NAME, base, &Overrides::default()) {
        Ok(p) => p,
        Err(e) => panic!("the printed plan does not parse:\n{e}\n--- printed ---\n{printed}--- source ---\n{source}"),
    };
    let (a, b) = (plan.without_origins(), reparsed.without_origins());
    assert!(
        a == b,
        "round trip changed the plan\n--- printed ---\n{printed}\n--- before ---\n{a:#?}\n--- after ---\n{b:#?}"
    );
    // Printing is a fixed point: this also catches differences `PartialEq` cannot see (NaN).
    assert_eq!(to_toml(&b), printed, "printing the re-parsed plan gave different text");
}

/// A shipped scenario edited by a list of `--set`s.
#[derive(Arbitrary, Debug)]
pub struct Edit {
    pub seed_scenario: u8,
    pub sets: Vec<Set>,
    pub master_seed: Option<u64>,
}

#[derive(Arbitrary, Debug)]
pub struct Set {
    pub key: Key,
    pub value: SetValue,
}

#[derive(Arbitrary, Debug)]
pub enum Key {
    /// One of the keys the DSL knows (index into [`keys`]).
    Known(u8),
    /// An `[expect]` metric.
    Metric(u16),
    /// A free-form key under `engine.vllm.engine_args`.
    EngineArg(String),
    /// Anything, usually unknown.
    Raw(String),
}

#[derive(Arbitrary, Debug)]
pub enum SetValue {
    Int(i64),
    SmallInt(u8),
    Float(f64),
    Special(SpecialFloat),
    Bool(bool),
    Str(String),
    Duration(u32, DurationUnit),
    Choice(u8),
    Condition(u8, f64),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Table(Vec<(String, i64)>),
    /// Text after `=`, read as TOML or else as a bare string.
    Raw(String),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum SpecialFloat {
    Nan,
    Inf,
    NegInf,
    NegZero,
    Max,
    MinPositive,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum DurationUnit {
    Ns,
    Us,
    Ms,
    S,
    M,
    H,
}

/// Every settable key path, from batchlab's key tables, so most edits land somewhere meaningful.
static KEYS: LazyLock<Vec<String>> = LazyLock::new(batchlab::scenario::key_paths);

/// Every key path edits choose from.
pub fn keys() -> &'static [String] {
    &KEYS
}

/// String values the DSL gives a meaning to.
const CHOICES: &[&str] = &[
    "sim",
    "vllm",
    "virtual",
    "real",
    "synthetic",
    "file",
    "fixed",
    "uniform",
    "normal",
    "synchronous",
    "concurrent",
    "throughput",
    "constant",
    "poisson",
    "sweep",
    "/etc/hostname",
    "",
];

const OPS: &[&str] = &["==", "!=", "<", "<=", ">", ">=", ""];

impl Edit {
    pub fn source(&self) -> &'static str {
        SEEDS[usize::from(self.seed_scenario) % SEEDS.len()]
    }

    /// The edit as `--set` arguments and `--seed`.
    pub fn overrides(&self) -> Overrides {
        let metrics = known_metrics();
        let sets = self
            .sets
            .iter()
            .map(|s| {
                let key = match &s.key {
                    Key::Known(i) => KEYS[usize::from(*i) % KEYS.len()].clone(),
                    Key::Metric(i) => format!("expect.{}", metrics[usize::from(*i) % metrics.len()]),
                    Key::EngineArg(k) => format!("engine.vllm.engine_args.{k}"),
                    Key::Raw(k) => k.clone(),
                };
                format!("{key}={}", s.value.text())
            })
            .collect();
        Overrides { sets, seed: self.master_seed }
    }
}

impl SetValue {
    fn text(&self) -> String {
        let value = match self {
            SetValue::Raw(text) => return text.clone(),
            SetValue::Int(i) => Value::from(*i),
            SetValue::SmallInt(i) => Value::from(i64::from(*i)),
            SetValue::Float(f) => Value::from(*f),
            SetValue::Special(s) => Value::from(s.value()),
            SetValue::Bool(b) => Value::from(*b),
            SetValue::Str(s) => Value::from(s.as_str()),
            SetValue::Duration(n, unit) => Value::from(format!("{n}{}", unit.suffix())),
            SetValue::Choice(i) => Value::from(CHOICES[usize::from(*i) % CHOICES.len()]),
            SetValue::Condition(op, v) => Value::from(format!("{} {v}", OPS[usize::from(*op) % OPS.len()])),
            SetValue::Ints(v) => Value::Array(v.iter().copied().collect::<Array>()),
            SetValue::Floats(v) => Value::Array(v.iter().copied().collect::<Array>()),
            SetValue::Table(entries) => {
                let mut t = InlineTable::new();
                for (k, v) in entries {
                    t.insert(k, Value::from(*v));
                }
                Value::InlineTable(t)
            }
        };
        value.to_string()
    }
}

impl SpecialFloat {
    fn value(self) -> f64 {
        match self {
            SpecialFloat::Nan => f64::NAN,
            SpecialFloat::Inf => f64::INFINITY,
            SpecialFloat::NegInf => f64::NEG_INFINITY,
            SpecialFloat::NegZero => -0.0,
            SpecialFloat::Max => f64::MAX,
            SpecialFloat::MinPositive => f64::MIN_POSITIVE,
        }
    }
}

impl DurationUnit {
    fn suffix(self) -> &'static str {
        match self {
            DurationUnit::Ns => "ns",
            DurationUnit::Us => "us",
            DurationUnit::Ms => "ms",
            DurationUnit::S => "s",
            DurationUnit::M => "m",
            DurationUnit::H => "h",
        }
    }
}
