//! The one door into a changed [`Plan`]: `key = value` changes go through the validator.
//!
//! A plan keeps what it was lowered from (the scenario text, its base directory, every layer of
//! changes: `--set`s, the builder's, earlier doors', and the files the lowering read). A change
//! adds one layer and lowers the whole again, exactly as a file with `--set`s is lowered, so a
//! changed plan is held to every rule a file is and a bad value is reported with its key; the
//! files (a calibration profile, a chat template, a trace) come from what the first lowering
//! kept, so a change does no IO. Nothing outside `scenario/` builds or patches a plan: tune's
//! points, calibrate's settings and a confirmation's combinations are [`Set`] lists (made from
//! the key handles in [`super::keys`]) given to this door.

use toml_edit::{Array, InlineTable, Value};

use super::error::ScenarioError;
use super::plan::{Combination, EnginePlan, Layer, MatrixPlan, Plan};
use super::print;
use super::set::{Set, SetValue};
use super::units::format_duration;

impl Plan {
    /// This plan with every `Expectation::origin` blank (a matrix's combinations too): a plan
    /// read back from [`super::to_toml`] equals this. For round-trip checks (tests, the fuzzer).
    #[doc(hidden)]
    pub fn without_origins(mut self) -> Plan {
        for e in &mut self.expect {
            e.origin.clear();
        }
        // A `[matrix]` combination is a whole plan, with expectations of its own.
        if let Some(m) = &mut self.matrix {
            for c in &mut m.combinations {
                c.plan = c.plan.clone().without_origins();
            }
        }
        self
    }

    /// This plan with `sets`, validated as a whole like a file with `--set`s: the scenario this
    /// plan was lowered from, with its overrides, then `sets` in order (later wins), lowered
    /// again. The only way to change a plan. Each is a [`Set`], from a key's handle
    /// (`keys::BATCH_SIZE.to(64)`) or [`Set::new`]; a value is read as `--set` reads it (a
    /// duration as `"10ms"`, a section's table replacing the whole section), and a bad one is
    /// reported with its key (`set batching.batch_size=0`). A set of a `[matrix]` axis key
    /// replaces that axis, as `--set` does.
    pub fn with_sets(&self, sets: &[Set]) -> Result<Plan, ScenarioError> {
        self.with_changes(&[], sets)
    }

    /// [`Plan::with_sets`] after taking out the keys or sections `remove` (dotted paths, e.g.
    /// `keys::WARMUP.path()` or `matrix`): for a section whose absence means something (no
    /// warm-up, no matrix), which no value can say.
    pub fn with_changes(&self, remove: &[&str], sets: &[Set]) -> Result<Plan, ScenarioError> {
        let sets: Vec<(&str, Value)> = sets.iter().map(|s| (s.path(), toml_of(s.value()))).collect();
        self.with_layer(remove, &sets)
    }

    fn with_layer(&self, remove: &[&str], sets: &[(&str, Value)]) -> Result<Plan, ScenarioError> {
        let layer = layer("set", remove.iter().map(|r| (*r).to_owned()).collect(), sets);
        super::lower_source(self.source.with(layer))
    }

    /// This plan on `engine` (its `[engine]` section replaced by `engine`'s, as [`super::to_toml`]
    /// writes it), everything else as it was: the batching's generate timeout too, whose default
    /// depends on the engine.
    pub fn with_engine(&self, engine: &EnginePlan) -> Result<Plan, ScenarioError> {
        let mut sets = vec![("engine", print::engine_value(engine))];
        // The timeouts this plan's engine gave it (a real engine's defaults) stay with the plan.
        if let Some(timeout) = self.batching.generate_timeout() {
            sets.push(("batching.generate_timeout", format_duration(timeout).into()));
        }
        if let Some(timeout) = self.batching.stall_timeout() {
            sets.push(("batching.stall_timeout", format_duration(timeout).into()));
        }
        self.with_layer(&[], &sets)
    }

    /// This plan with a `[matrix]` of the given combinations instead of any it had: each a label
    /// (the benchmark name's prefix) and its sets, lowered as [`Plan::with_sets`] lowers them,
    /// all run in one engine start. For combinations that are no Cartesian product (the points
    /// `batchlab tune` confirms); a product is written as `[matrix]` axes. A combination's values
    /// are shown as a matrix label shows them (a number as Rust writes it, a string bare). The
    /// result's own fields are the first combination's, and so is what a further change of it
    /// starts from: no scenario text holds such a list, so that change has no matrix.
    pub fn with_combinations(&self, combinations: &[(String, Vec<Set>)]) -> Result<Plan, ScenarioError> {
        let mut out = Vec::with_capacity(combinations.len());
        let mut problems = Vec::new();
        for (label, sets) in combinations {
            match self.with_changes(&["matrix"], sets) {
                Ok(plan) => {
                    let values = sets.iter().map(|s| (s.path().to_owned(), s.value().label())).collect();
                    out.push(Combination { label: label.clone(), values, plan });
                }
                // A problem every combination shares is told once.
                Err(e) => {
                    for p in e.problems {
                        if !problems.contains(&p) {
                            problems.push(p);
                        }
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(ScenarioError { problems });
        }
        let Some(first) = out.first() else {
            // No combination: the plan as it is, without a matrix.
            return self.with_changes(&["matrix"], &[]);
        };
        let mut plan = first.plan.clone();
        plan.matrix = Some(Box::new(MatrixPlan { axes: Vec::new(), combinations: out }));
        Ok(plan)
    }
}

/// A set's value as TOML.
fn toml_of(value: &SetValue) -> Value {
    match value {
        SetValue::Int(i) => (*i).into(),
        SetValue::Float(f) => (*f).into(),
        SetValue::Text(s) => s.as_str().into(),
        SetValue::Bool(b) => (*b).into(),
        SetValue::List(items) => Value::Array(items.iter().map(toml_of).collect::<Array>()),
        SetValue::Table(entries) => {
            let mut t = InlineTable::new();
            for (key, v) in entries {
                t.insert(key, toml_of(v));
            }
            Value::InlineTable(t)
        }
    }
}

/// One layer of changes from `key = value`s, each value written as TOML text, as `--set` reads it.
pub(super) fn layer<K: AsRef<str>>(arg: &'static str, remove: Vec<String>, sets: &[(K, Value)]) -> Layer {
    let sets = sets.iter().map(|(k, v)| format!("{}={}", k.as_ref(), v.clone().decorated("", ""))).collect();
    Layer { arg, remove, sets, seed: None }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::scenario::error::Origin;
    use crate::scenario::keys;
    use crate::scenario::{Overrides, load_file, parse_str};

    const TEXT: &str = r#"
name = "door"
[batching]
batch_size = 4
batch_timeout = "2ms"
[profile]
kind = "constant"
rates = [5.0, 10.0]
[warmup]
requests = 2
[stop]
max_requests = 20
"#;

    fn parse(sets: &[&str]) -> Plan {
        let overrides = Overrides { sets: sets.iter().map(|s| (*s).to_owned()).collect(), seed: Some(7) };
        parse_str(TEXT, "door.toml", Path::new("."), &overrides).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A change through the door gives the plan the same `--set` would, the earlier overrides
    /// (here `--seed`) kept.
    #[test]
    fn a_change_is_a_set() {
        let base = parse(&[]);
        let cases: &[(Set, &str)] = &[
            (keys::BATCH_SIZE.to(16), "batching.batch_size=16"),
            (keys::BATCH_TIMEOUT.to(Duration::from_millis(10)), "batching.batch_timeout=10ms"),
            (keys::RATES.to(vec![2.5]), "profile.rates=[2.5]"),
            (keys::RATES.to(vec![2.0, 1e20]), "profile.rates=[2.0, 1e20]"),
            (keys::PROFILE.table([keys::PROFILE_KIND.to("throughput")]), "profile={ kind = \"throughput\" }"),
            (keys::STOP.table([keys::MAX_DURATION.to(Duration::from_secs(1))]), "stop={ max_duration = \"1s\" }"),
            (keys::NAME.to("other"), "name=other"),
            (Set::new("workload.seed", 3_u64), "workload.seed=3"),
        ];
        for (change, set) in cases {
            let key = change.path();
            let changed = base.with_sets(std::slice::from_ref(change)).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(changed, parse(&[set]), "{key}");
            assert_eq!(changed.seed(), 7, "{key}: the --seed stays");
        }
        // Changes stack: a changed plan changes again from where it is.
        let twice = base.with_sets(&[keys::BATCH_SIZE.to(16)]).unwrap();
        let twice = twice.with_sets(&[keys::MAX_REQUESTS.to(5)]).unwrap();
        assert_eq!(twice, parse(&["batching.batch_size=16", "stop.max_requests=5"]));
    }

    /// A bad change is reported like a bad `--set`: with its key and value, and a did-you-mean.
    #[test]
    fn a_bad_change_names_its_key() {
        let base = parse(&[]);
        let cases: &[(Set, &str, &str)] = &[
            (keys::BATCH_SIZE.to(0), "set batching.batch_size=0", "`batching.batch_size` must be at least 1"),
            (Set::new("batching.batch_sise", 8_u64), "set batching.batch_sise=8", "unknown key `batching.batch_sise`"),
            (keys::RATE.to(3.0), "set profile.rate=3.0", "`profile.rate` does not apply"),
        ];
        for (change, arg, message) in cases {
            let key = change.path();
            let e = base.with_sets(std::slice::from_ref(change)).expect_err(key);
            let p = &e.problems[0];
            assert_eq!(p.origin, Origin::Override { arg: (*arg).to_owned() }, "{key}");
            assert!(p.message.starts_with(message), "{key}: {}", p.message);
        }
    }

    #[test]
    fn with_changes_takes_sections_out() {
        let base = parse(&[]);
        assert!(base.warmup().is_some());
        let remove = [keys::WARMUP.path(), keys::MAX_REQUESTS.path()];
        let without = base.with_changes(&remove, &[keys::MAX_ERRORS.to(3)]).unwrap();
        assert_eq!(without.warmup(), None);
        assert_eq!(without.stop().max_requests(), Some(1000), "the default when neither limit is written");
        assert_eq!(without.stop().max_errors(), Some(3));
        let e = base.with_changes(&["warmpu"], &[]).expect_err("no such section");
        assert_eq!(e.problems[0].origin, Origin::Override { arg: "set -warmpu".to_owned() });
        assert!(e.problems[0].help.as_deref().is_some_and(|h| h.contains("warmup")), "{e}");
        let matrix = base.with_sets(&[Set::new("batching.batch_size", vec![8_u64, 16])]);
        assert!(matrix.is_err(), "a list is not a batch size");
    }

    /// Explicit combinations: each lowered like a change, labelled, its values as labels show them.
    #[test]
    fn with_combinations_makes_a_matrix() {
        let base = parse(&[]);
        let point = |size: u64, timeout: u64, rate: f64| {
            vec![
                keys::BATCH_SIZE.to(size),
                keys::BATCH_TIMEOUT.to(Duration::from_millis(timeout)),
                keys::RATES.to(vec![rate]),
            ]
        };
        let combos = [("a".to_owned(), point(8, 1, 2.0)), ("b".to_owned(), point(32, 5, 2.5))];
        let plan = base.with_combinations(&combos).unwrap();
        let matrix = plan.matrix().expect("a matrix");
        let labels: Vec<&str> = matrix.combinations().iter().map(Combination::label).collect();
        assert_eq!(labels, ["a", "b"]);
        assert_eq!(matrix.combinations()[1].values()[1], ("batching.batch_timeout".to_owned(), "5ms".to_owned()));
        assert_eq!(matrix.combinations()[0].values()[2], ("profile.rates".to_owned(), "[2]".to_owned()));
        assert_eq!(matrix.combinations()[1].values()[2], ("profile.rates".to_owned(), "[2.5]".to_owned()));
        assert_eq!(matrix.combinations()[1].plan().batching().batch_timeout(), Duration::from_millis(5));
        assert_eq!(plan.batching().batch_size(), 8, "the plan's own fields are the first combination's");
        let bad = [("c".to_owned(), point(0, 1, 2.0))];
        assert!(base.with_combinations(&bad).is_err());
        let none: [(String, Vec<Set>); 0] = [];
        assert!(base.with_combinations(&none).unwrap().matrix().is_none());
    }

    /// `with_engine` writes the engine as `[engine]` and reads it back: the same engine, the rest
    /// of the plan (the real engine's default generate timeout included) as it was.
    #[test]
    fn with_engine_moves_a_plan_to_another_engine() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let vllm = load_file(&dir.join("vllm-cpu.toml"), &Overrides::default()).unwrap();
        let sim = load_file(&dir.join("throughput.toml"), &Overrides::default()).unwrap();
        let moved = vllm.with_engine(sim.engine()).unwrap();
        assert_eq!(moved.engine(), sim.engine());
        assert_eq!(moved.batching(), vllm.batching());
        assert_eq!(moved.workload(), vllm.workload());
        let back = moved.with_engine(vllm.engine()).unwrap();
        assert_eq!(back, vllm);
    }

    /// A plan from a file keeps its directory: relative paths resolve as they did.
    #[test]
    fn relative_paths_resolve_as_in_the_file() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let trace = load_file(&dir.join("trace.toml"), &Overrides::default()).unwrap();
        let changed = trace.with_sets(&[keys::BATCH_SIZE.to(3)]).unwrap();
        assert_eq!(changed.workload(), trace.workload());
        assert_eq!(changed.profile(), trace.profile());
    }
}
