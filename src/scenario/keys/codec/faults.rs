//! `[faults]`'s values: a trigger (`{ every = N }` and/or `{ probability = p }`) and a process
//! fault (`{ after_batches = N }`).

use toml_edit::{InlineTable, Item, Value, value};

use super::{Codec, int};
use crate::engine::faults::{FaultTrigger, ProcessFault};
use crate::scenario::keys::Sub;
use crate::scenario::reader::{Field, LowerBound, ReadContext};

/// The keys a `[faults]` trigger's table takes.
pub(crate) const TRIGGER_KEYS: &[&str] = &["every", "probability"];

/// A `[faults]` trigger: `{ every = N }` and/or `{ probability = p }`; one that never fires is
/// written by leaving the key out.
pub(crate) struct Trigger;
impl Codec for Trigger {
    type Value = FaultTrigger;
    const SUB: Sub = Sub::Fixed(TRIGGER_KEYS);
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<FaultTrigger> {
        let tt = cx.as_table(field, &field.path, TRIGGER_KEYS)?;
        if tt.table.get("every").is_none() && tt.table.get("probability").is_none() {
            let help = "write { every = N } and/or { probability = p }".to_owned();
            cx.report_at(field, format!("`{}` needs `every` and/or `probability`", field.path), Some(help));
        }
        Some(FaultTrigger {
            every: cx.u64(tt, "every", 1),
            probability: cx.float(tt, "probability", LowerBound::AtLeast(0.0), 1.0).unwrap_or(0.0),
        })
    }
    fn print(&self, trigger: &FaultTrigger) -> Option<Item> {
        trigger_value(trigger).map(value)
    }
}

/// A trigger as the DSL writes it (also what the builder sets); `None` for one that never fires.
pub(crate) fn trigger_value(trigger: &FaultTrigger) -> Option<Value> {
    let mut t = InlineTable::new();
    if let Some(every) = trigger.every {
        t.insert("every", int(every).into());
    }
    if trigger.probability != 0.0 {
        t.insert("probability", trigger.probability.into());
    }
    (!t.is_empty()).then_some(Value::InlineTable(t))
}

/// The keys a process fault's table takes.
pub(crate) const PROCESS_FAULT_KEYS: &[&str] = &["after_batches"];

/// A process fault: `{ after_batches = N }`.
pub(crate) struct KillAfter;
impl Codec for KillAfter {
    type Value = ProcessFault;
    const SUB: Sub = Sub::Fixed(PROCESS_FAULT_KEYS);
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<ProcessFault> {
        let tt = cx.as_table(field, &field.path, PROCESS_FAULT_KEYS)?;
        if tt.table.get("after_batches").is_none() {
            let help = "write { after_batches = N }: the kill lands during generate N + 1".to_owned();
            cx.report_at(field, format!("`{}` needs `after_batches`", field.path), Some(help));
        }
        Some(ProcessFault { after_batches: cx.u64(tt, "after_batches", 0)? })
    }
    fn print(&self, p: &ProcessFault) -> Option<Item> {
        let mut t = InlineTable::new();
        t.insert("after_batches", int(p.after_batches).into());
        Some(value(t))
    }
}
