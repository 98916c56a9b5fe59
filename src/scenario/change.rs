//! The one door into a changed [`Plan`]: `key = value` changes go through the validator.
//!
//! A plan keeps what it was lowered from (the scenario text, its base directory, and every layer
//! of changes: `--set`s, the builder's, earlier doors'). A change adds one layer and lowers the
//! whole again, exactly as a file with `--set`s is lowered, so a changed plan is held to every rule
//! a file is and a bad value is reported with its key. Nothing outside `scenario/` builds or
//! patches a plan: tune's points, calibrate's settings and a confirmation's combinations are
//! `key = value` lists given to this door.

use toml_edit::Value;

use super::error::ScenarioError;
use super::matrix::label_value;
use super::plan::{Combination, EnginePlan, Layer, MatrixPlan, Plan};
use super::print;
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

    /// This plan with `key = value` changes, validated as a whole like a file with `--set`s: the
    /// scenario this plan was lowered from, with its overrides, then `sets` in order (later wins),
    /// lowered again. The only way to change a plan. A value is read as `--set` reads it (an
    /// integer, `"10ms"`, a list, or a table that replaces a whole section); a bad one is reported
    /// with its key (`set batching.batch_size=0`). A set of a `[matrix]` axis key replaces that
    /// axis, as `--set` does.
    pub fn with_sets<K: AsRef<str>>(&self, sets: &[(K, Value)]) -> Result<Plan, ScenarioError> {
        self.with_changes(&[], sets)
    }

    /// [`Plan::with_sets`] after taking out the keys or sections `remove` (dotted paths, e.g.
    /// `warmup` or `matrix`): for a section whose absence means something (no warm-up, no
    /// matrix), which no value can say.
    pub fn with_changes<K: AsRef<str>>(&self, remove: &[&str], sets: &[(K, Value)]) -> Result<Plan, ScenarioError> {
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
        self.with_sets(&sets)
    }

    /// This plan with a `[matrix]` of the given combinations instead of any it had: each a label
    /// (the benchmark name's prefix) and its `key = value` list, lowered as [`Plan::with_sets`]
    /// lowers one, all run in one engine start. For combinations that are no Cartesian product
    /// (the points `batchlab tune` confirms); a product is written as `[matrix]` axes. The
    /// result's own fields are the first combination's, and so is what a further change of it
    /// starts from: no scenario text holds such a list, so that change has no matrix.
    pub fn with_combinations<K: AsRef<str>>(
        &self,
        combinations: &[(String, Vec<(K, Value)>)],
    ) -> Result<Plan, ScenarioError> {
        let mut out = Vec::with_capacity(combinations.len());
        let mut problems = Vec::new();
        for (label, sets) in combinations {
            match self.with_changes(&["matrix"], sets) {
                Ok(plan) => {
                    let values = sets.iter().map(|(k, v)| (k.as_ref().to_owned(), label_value(v))).collect();
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
            return self.with_changes::<&str>(&["matrix"], &[]);
        };
        let mut plan = first.plan.clone();
        plan.matrix = Some(Box::new(MatrixPlan { axes: Vec::new(), combinations: out }));
        Ok(plan)
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
        let cases: &[(&str, Value, &str)] = &[
            ("batching.batch_size", 16.into(), "batching.batch_size=16"),
            ("batching.batch_timeout", "10ms".into(), "batching.batch_timeout=10ms"),
            ("profile.rates", [2.5].into_iter().collect(), "profile.rates=[2.5]"),
            ("profile", "{ kind = \"throughput\" }".parse().unwrap(), "profile={ kind = \"throughput\" }"),
            ("stop", "{ max_duration = \"1s\" }".parse().unwrap(), "stop={ max_duration = \"1s\" }"),
            ("name", "other".into(), "name=other"),
        ];
        for (key, value, set) in cases {
            let changed = base.with_sets(&[(key, value.clone())]).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(changed, parse(&[set]), "{key}");
            assert_eq!(changed.seed(), 7, "{key}: the --seed stays");
        }
        // Changes stack: a changed plan changes again from where it is.
        let twice = base.with_sets(&[("batching.batch_size", 16.into())]).unwrap();
        let twice = twice.with_sets(&[("stop.max_requests", 5.into())]).unwrap();
        assert_eq!(twice, parse(&["batching.batch_size=16", "stop.max_requests=5"]));
    }

    /// A bad change is reported like a bad `--set`: with its key and value, and a did-you-mean.
    #[test]
    fn a_bad_change_names_its_key() {
        let base = parse(&[]);
        let cases: &[(&str, Value, &str, &str)] = &[
            ("batching.batch_size", 0.into(), "set batching.batch_size=0", "`batching.batch_size` must be at least 1"),
            ("batching.batch_sise", 8.into(), "set batching.batch_sise=8", "unknown key `batching.batch_sise`"),
            ("profile.rate", 3.0.into(), "set profile.rate=3.0", "`profile.rate` does not apply"),
        ];
        for (key, value, arg, message) in cases {
            let e = base.with_sets(&[(key, value.clone())]).expect_err(key);
            let p = &e.problems[0];
            assert_eq!(p.origin, Origin::Override { arg: (*arg).to_owned() }, "{key}");
            assert!(p.message.starts_with(message), "{key}: {}", p.message);
        }
    }

    #[test]
    fn with_changes_takes_sections_out() {
        let base = parse(&[]);
        assert!(base.warmup().is_some());
        let without = base.with_changes(&["warmup", "stop.max_requests"], &[("stop.max_errors", 3.into())]).unwrap();
        assert_eq!(without.warmup(), None);
        assert_eq!(without.stop().max_requests(), Some(1000), "the default when neither limit is written");
        assert_eq!(without.stop().max_errors(), Some(3));
        let e = base.with_changes::<&str>(&["warmpu"], &[]).expect_err("no such section");
        assert_eq!(e.problems[0].origin, Origin::Override { arg: "set -warmpu".to_owned() });
        assert!(e.problems[0].help.as_deref().is_some_and(|h| h.contains("warmup")), "{e}");
        let matrix = base.with_sets(&[("batching.batch_size", [8, 16].into_iter().collect::<Value>())]);
        assert!(matrix.is_err(), "a list is not a batch size");
    }

    /// Explicit combinations: each lowered like a change, labelled, its values as labels show them.
    #[test]
    fn with_combinations_makes_a_matrix() {
        let base = parse(&[]);
        let point = |size: i64, timeout: &str| {
            vec![("batching.batch_size", Value::from(size)), ("batching.batch_timeout", Value::from(timeout))]
        };
        let combos = [("a".to_owned(), point(8, "1ms")), ("b".to_owned(), point(32, "5ms"))];
        let plan = base.with_combinations(&combos).unwrap();
        let matrix = plan.matrix().expect("a matrix");
        let labels: Vec<&str> = matrix.combinations().iter().map(Combination::label).collect();
        assert_eq!(labels, ["a", "b"]);
        assert_eq!(matrix.combinations()[1].values()[1], ("batching.batch_timeout".to_owned(), "5ms".to_owned()));
        assert_eq!(matrix.combinations()[1].plan().batching().batch_timeout(), Duration::from_millis(5));
        assert_eq!(plan.batching().batch_size(), 8, "the plan's own fields are the first combination's");
        let bad = [("c".to_owned(), point(0, "1ms"))];
        assert!(base.with_combinations(&bad).is_err());
        let none: [(String, Vec<(&str, Value)>); 0] = [];
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
        let changed = trace.with_sets(&[("batching.batch_size", 3.into())]).unwrap();
        assert_eq!(changed.workload(), trace.workload());
        assert_eq!(changed.profile(), trace.profile());
    }
}
