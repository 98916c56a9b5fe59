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
        if let Some(timeout) = self.batching.generate_timeout() {
            sets.push(("batching.generate_timeout", format_duration(timeout).into()));
        }
        self.with_sets(&sets)
    }

    /// This plan with a `[matrix]` of the given combinations instead of any it had: each a label
    /// (the benchmark name's prefix) and its `key = value` list, lowered as [`Plan::with_sets`]
    /// lowers one, all run in one engine start. For combinations that are no Cartesian product
    /// (the points `batchlab tune` confirms); a product is written as `[matrix]` axes.
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
        let mut plan = match out.first() {
            Some(first) => first.plan.clone(),
            None => self.with_changes::<&str>(&["matrix"], &[])?,
        };
        plan.matrix = Some(Box::new(MatrixPlan { axes: Vec::new(), combinations: out }));
        Ok(plan)
    }
}

/// One layer of changes from `key = value`s, each value written as TOML text, as `--set` reads it.
pub(super) fn layer<K: AsRef<str>>(arg: &'static str, remove: Vec<String>, sets: &[(K, Value)]) -> Layer {
    let sets = sets.iter().map(|(k, v)| format!("{}={}", k.as_ref(), v.clone().decorated("", ""))).collect();
    Layer { arg, remove, sets, seed: None }
}
