//! Every scenario key, one row each.
//!
//! A section's keys are one table of [`Key`]s over the type the section lowers into: the key's
//! name, its doc line (docs/scenarios.md's notes column), its default as the docs state it, and
//! how its value is read ([`Codec::read`]) and printed ([`Codec::print`]). The schema (allowed keys,
//! did-you-mean, `--set` paths), the lowering, the printer, the builder and the docs check all
//! walk these tables, so adding a key is one row in its section's table (plus its plan field).
//! Rules between keys (required keys, exactly-one-of, keys of another variant) stay in the
//! lowering. `[faults]` is a section like any other: [`FAULT_KEYS`] over the engine's own `Faults`.
//!
//! This file holds the row type, the `key!` macro, the walks over a table, the top level's own
//! keys and the seeds. Each section's table is in the child named for it (`engine`, `batching`,
//! `workload`, `profile`, `measuring`, `faults`); `codec` reads and prints each kind of value.
//!
//! Sections whose keys depend on a tag (`workload.source`, `profile.kind`) have one table per
//! variant ([`Variant`]); a row shared by variants matches them with an or-pattern. The seeds a
//! section's defaults derive from the master seed are here too ([`derive_seed`]).

use toml_edit::{Item, Table, value};

use super::reader::{Field, LocatedTable, ReadContext};
use crate::rng::SplitMix64;

/// Seed streams of the components whose seed defaults to one derived from the master seed.
#[doc(hidden)]
pub mod seed_stream {
    /// `engine.sim.seed`.
    pub const SIM: u64 = 1;
    /// `engine.vllm.seed`.
    pub const VLLM: u64 = 2;
    /// `workload.seed`.
    pub const WORKLOAD: u64 = 3;
    /// A poisson profile's `seed`.
    pub const POISSON: u64 = 4;
    /// A gamma profile's `seed`.
    pub const GAMMA: u64 = 5;
}

/// The default seed of a component: the first draw of `SplitMix64::derive(master, stream)`,
/// shifted right by one bit so that it fits a TOML integer.
#[doc(hidden)]
pub fn derive_seed(master: u64, stream: u64) -> u64 {
    SplitMix64::derive(master, stream).next_u64() >> 1
}

/// What may stand below a key: nothing (a plain value), anything (a free-form table), or fixed keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Sub {
    Value,
    Any,
    Fixed(&'static [&'static str]),
}

/// A key's default as docs/scenarios.md states it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum KeyDefault {
    /// The section's default value, printed (`"500us"`, `256`, `true`; `none` when unset).
    Value,
    /// Words, for a default that is not a value (`derived (stream 1)`, `vLLM's`).
    Text(&'static str),
    /// The key must be written; the example goes into the "add `key = example`" help.
    Required(&'static str),
}

/// One key of a section that lowers into an `S`.
pub(crate) struct Key<S: 'static> {
    pub name: &'static str,
    /// The docs' notes on the key (the last column of its row in docs/scenarios.md, checked there).
    #[cfg_attr(not(test), allow(dead_code))]
    pub doc: &'static str,
    pub default: KeyDefault,
    pub sub: Sub,
    /// Reads a present key into `S`; a bad value is reported and leaves `S` as it was.
    pub read: fn(&mut ReadContext, &Field, &mut S),
    /// The key's value in `S` as TOML; `None` leaves the key out (unset, or another variant's).
    pub print: fn(&S) -> Option<Item>,
}

/// One [`Key`] row. `key!(name: Codec, default, "doc", in Type)` reads and prints the field `name`
/// of the struct or enum variant `Type`; `key!(name: Codec, default, "doc", pattern)` binds `name`
/// in any pattern (an or-pattern for a key several variants share).
macro_rules! key {
    ($name:ident: $codec:expr, $default:expr, $doc:literal, in $($ty:ident)::+) => {
        key!($name: $codec, $default, $doc, $($ty)::+ { $name, .. })
    };
    ($name:ident: $codec:expr, $default:expr, $doc:literal, $pat:pat) => {
        Key {
            name: stringify!($name),
            doc: $doc,
            default: $default,
            sub: sub_of(&$codec),
            read: |cx, field, s| match s {
                $pat => {
                    if let Some(v) = Codec::read(&$codec, cx, field) {
                        *$name = v;
                    }
                }
                #[allow(unreachable_patterns)]
                _ => {}
            },
            print: |s| match s {
                $pat => Codec::print(&$codec, $name),
                #[allow(unreachable_patterns)]
                _ => None,
            },
        }
    };
}

/// Reads every key of `keys` that `t` has into `s`, in table order.
pub(crate) fn read<S>(cx: &mut ReadContext, t: LocatedTable, keys: &[Key<S>], s: &mut S) {
    for key in keys {
        if let Some(field) = cx.field(t, key.name) {
            (key.read)(cx, &field, s);
        }
    }
}

/// Writes every key of `keys` that `s` has into `t`, in table order.
pub(crate) fn print<S>(t: &mut Table, keys: &[Key<S>], s: &S) {
    for key in keys {
        if let Some(item) = (key.print)(s) {
            t[key.name] = item;
        }
    }
}

/// The key names of `keys`, in order.
pub(crate) fn names<S>(keys: &[Key<S>]) -> impl Iterator<Item = &'static str> + '_ {
    keys.iter().map(|k| k.name)
}

/// A variant of a tagged section: the tag's value, its keys and its plan before any key is read
/// (from the master seed, for derived seeds).
pub(crate) struct Variant<S: 'static> {
    pub name: &'static str,
    pub keys: &'static [Key<S>],
    pub default: fn(u64) -> S,
    /// Whether a value is this variant (for the printer).
    pub is: fn(&S) -> bool,
}

/// A tag naming one of `variants`.
pub(crate) struct TagOf<S: 'static>(pub &'static [Variant<S>]);
impl<S> Codec for TagOf<S> {
    type Value = &'static str;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<&'static str> {
        let names: Vec<&'static str> = self.0.iter().map(|v| v.name).collect();
        cx.choice_of(field, &names)
    }
    fn print(&self, v: &&'static str) -> Option<Item> {
        Some(value(*v))
    }
}

/// The variant named `name` (the tag was read as one of the names, so it exists).
pub(crate) fn variant<S>(variants: &'static [Variant<S>], name: &str) -> &'static Variant<S> {
    variants.iter().find(|v| v.name == name).unwrap_or(&variants[0])
}

/// Every key some variant has, in order of first appearance.
pub(crate) fn variant_keys<S>(variants: &[Variant<S>]) -> Vec<(&'static str, Sub)> {
    let mut all: Vec<(&'static str, Sub)> = Vec::new();
    for key in variants.iter().flat_map(|v| v.keys) {
        if !all.iter().any(|(name, _)| *name == key.name) {
            all.push((key.name, key.sub));
        }
    }
    all
}

/// A section's keys as the schema sees them.
pub(crate) fn subs<S>(keys: &[Key<S>]) -> impl Iterator<Item = (&'static str, Sub)> + '_ {
    keys.iter().map(|k| (k.name, k.sub))
}

/// The top level's own keys (the sections are [`SECTIONS`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Head {
    pub name: String,
    pub description: Option<String>,
    pub seed: u64,
}

pub(crate) const HEAD_KEYS: &[Key<Head>] = &[
    key!(
        name: ScenarioName,
        KeyDefault::Text("the file stem"),
        "one plain file name: no `/` or `\\`, not `.` or `..` (it names `results/<name>`)",
        in Head
    ),
    key!(description: Opt(Str), KeyDefault::Value, "", in Head),
    key!(seed: U64(0), KeyDefault::Value, "master seed, see above", in Head),
];

/// The top level's sections, in the order the printer writes them.
pub(crate) const SECTIONS: &[&str] =
    &["engine", "batching", "workload", "profile", "stop", "warmup", "cooldown", "faults", "slo", "expect", "output"];

/// A section's tag: `engine.kind`, `workload.source`, `profile.kind`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tag(pub &'static str);

/// The engine kinds `engine.kind` takes; each has its own sub-section, `[engine.<kind>]`.
#[doc(hidden)]
pub const ENGINE_KINDS: &[&str] = &["sim", "vllm", "python", "openai"];

mod batching;
mod codec;
mod engine;
mod faults;
mod handles;
mod measuring;
mod profile;
#[cfg(test)]
mod tests;
mod workload;

pub(crate) use batching::*;
pub(crate) use codec::*;
pub(crate) use engine::*;
pub(crate) use faults::*;
pub use handles::*;
pub(crate) use measuring::*;
pub(crate) use profile::*;
pub(crate) use workload::*;
