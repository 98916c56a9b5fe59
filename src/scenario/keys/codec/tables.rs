//! Free-form tables: one passed to an engine as JSON, and a table of strings; with the walks
//! between TOML and JSON.

use std::collections::BTreeMap;

use toml_edit::{InlineTable, Item, Table, Value, value};

use super::Codec;
use crate::scenario::keys::Sub;
use crate::scenario::reader::{Field, Node, ReadContext, join};

/// A free-form table, as JSON for an engine to take unchanged; empty is printed by leaving it out.
pub(crate) struct Json;
impl Codec for Json {
    type Value = serde_json::Map<String, serde_json::Value>;
    const SUB: Sub = Sub::Any;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Self::Value> {
        table_like(cx, field).map(|table| table_to_json(cx, &field.path, table))
    }
    fn print(&self, map: &Self::Value) -> Option<Item> {
        table_of(map, json_to_value)
    }
}

/// The table at `field`, or a type problem.
pub(super) fn table_like<'t>(cx: &mut ReadContext, field: &Field<'t>) -> Option<&'t dyn toml_edit::TableLike> {
    let table = field.node.table_like();
    if table.is_none() {
        let message = format!("`{}`: expected a table, found {}", field.path, field.node.type_name());
        cx.report_at(field, message, None);
    }
    table
}

/// Entries as a TOML table; an empty one is printed by leaving the key out.
fn table_of<'a, V: 'a>(
    entries: impl IntoIterator<Item = (&'a String, &'a V)>,
    to_value: impl Fn(&V) -> Option<Value>,
) -> Option<Item> {
    let mut table = Table::new();
    for (k, v) in entries {
        if let Some(x) = to_value(v) {
            table[k.as_str()] = value(x);
        }
    }
    (!table.is_empty()).then_some(Item::Table(table))
}

/// A table of strings (environment variables); empty is printed by leaving it out.
pub(crate) struct StringTable;
impl Codec for StringTable {
    type Value = BTreeMap<String, String>;
    const SUB: Sub = Sub::Any;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Self::Value> {
        let table = table_like(cx, field)?;
        let mut map = BTreeMap::new();
        for (key, item) in table.iter() {
            let entry = Field { path: join(&field.path, key), node: Node::Item(item), key_span: None };
            if let Some(v) = cx.string_of(&entry) {
                map.insert(key.to_owned(), v);
            }
        }
        Some(map)
    }
    fn print(&self, map: &Self::Value) -> Option<Item> {
        table_of(map, |v| Some(Value::from(v.as_str())))
    }
}

fn table_to_json(
    cx: &mut ReadContext,
    path: &str,
    table: &dyn toml_edit::TableLike,
) -> serde_json::Map<String, serde_json::Value> {
    let mut map = serde_json::Map::new();
    for (key, item) in table.iter() {
        let field = Field { path: join(path, key), node: Node::Item(item), key_span: None };
        let json = if let Some(sub) = item.as_table_like() {
            Some(serde_json::Value::Object(table_to_json(cx, &field.path, sub)))
        } else if let Some(value) = item.as_value() {
            value_to_json(cx, &field, value)
        } else {
            cx.report_at(&field, format!("`{}`: arrays of tables are not supported here", field.path), None);
            None
        };
        if let Some(json) = json {
            map.insert(key.to_owned(), json);
        }
    }
    map
}

fn value_to_json(cx: &mut ReadContext, field: &Field, value: &Value) -> Option<serde_json::Value> {
    Some(match value {
        Value::String(s) => serde_json::Value::String(s.value().clone()),
        Value::Integer(i) => serde_json::Value::from(*i.value()),
        Value::Float(f) => match serde_json::Number::from_f64(*f.value()) {
            Some(n) => serde_json::Value::Number(n),
            None => {
                cx.report_at(
                    field,
                    format!("`{}`: {} cannot be passed to the engine (not valid JSON)", field.path, f.value()),
                    None,
                );
                return None;
            }
        },
        Value::Boolean(b) => serde_json::Value::Bool(*b.value()),
        Value::Datetime(d) => serde_json::Value::String(d.value().to_string()),
        Value::Array(a) => serde_json::Value::Array(a.iter().filter_map(|v| value_to_json(cx, field, v)).collect()),
        Value::InlineTable(t) => serde_json::Value::Object(table_to_json(cx, &field.path, t)),
    })
}

/// JSON back to TOML; `null` has no TOML form and is dropped (it cannot come from a file).
fn json_to_value(j: &serde_json::Value) -> Option<Value> {
    Some(match j {
        serde_json::Value::Null => return None,
        serde_json::Value::Bool(b) => (*b).into(),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64()?.into(),
        },
        serde_json::Value::String(s) => s.as_str().into(),
        serde_json::Value::Array(a) => Value::Array(a.iter().filter_map(json_to_value).collect()),
        serde_json::Value::Object(o) => {
            let mut t = InlineTable::new();
            for (k, v) in o {
                if let Some(v) = json_to_value(v) {
                    t.insert(k, v);
                }
            }
            Value::InlineTable(t)
        }
    })
}
