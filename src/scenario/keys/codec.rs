//! How each kind of value is read from and written to TOML: the codecs the key rows name.
//!
//! This file holds the [`Codec`] trait, the `codec!` macro and the plain values (strings, numbers,
//! booleans, durations, choices) with the wrappers `Opt` and `List`. The children hold values
//! with more rules: `text` (checked strings), `paths`, `tables` (free-form tables), `load`
//! (`[workload]` and `[profile]` values) and `faults`.

use std::time::Duration;

use toml_edit::{Array, Item, value};

use super::super::reader::{Field, LowerBound, ReadContext};
use super::super::units::format_duration;
use super::Sub;

/// How a value type is read from and written to TOML.
pub(crate) trait Codec {
    type Value;
    const SUB: Sub = Sub::Value;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Self::Value>;
    fn print(&self, v: &Self::Value) -> Option<Item>;
}

pub(crate) const fn sub_of<C: Codec>(_: &C) -> Sub {
    C::SUB
}

/// TOML integers are i64; larger values (only in plans not read from a file, such as
/// `CostModel::free()`'s unlimited `max_num_seqs`) saturate.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `impl Codec` for a value read by one expression and printed as one TOML value.
macro_rules! codec {
    ($ty:ty => $value:ty, |$c:ident, $cx:ident, $field:ident| $read:expr, |$v:ident| $print:expr) => {
        impl Codec for $ty {
            type Value = $value;
            fn read(&self, $cx: &mut ReadContext, $field: &Field) -> Option<$value> {
                let $c = self;
                $read
            }
            fn print(&self, $v: &$value) -> Option<Item> {
                Some(value($print))
            }
        }
    };
}

pub(crate) struct Str;
codec!(Str => String, |_c, cx, field| cx.string_of(field), |v| v.as_str());

/// An integer of at least `.0`.
pub(crate) struct U64(pub u64);
codec!(U64 => u64, |c, cx, field| cx.int_of(field, c.0 as i64, i64::MAX).map(|v| v as u64), |v| int(*v));

/// An integer of at least `.0` that fits a `u32`.
pub(crate) struct U32(pub u32);
codec!(U32 => u32, |c, cx, field| cx.int_of(field, i64::from(c.0), i64::from(u32::MAX)).map(|v| v as u32), |v| {
    i64::from(*v)
});

/// A count of at least `.0`.
pub(crate) struct Count(pub usize);
codec!(Count => usize, |c, cx, field| cx.int_of(field, c.0 as i64, i64::MAX).map(|v| v as usize), |v| {
    int(*v as u64)
});

/// A number in `low..=hi`.
pub(crate) struct Float(pub LowerBound, pub f64);
codec!(Float => f64, |c, cx, field| cx.float_of(field, c.0, c.1), |v| *v);

/// A number in `low..=hi`, kept as an `f32`.
pub(crate) struct Float32(pub LowerBound, pub f64);
codec!(Float32 => f32, |c, cx, field| cx.float_of(field, c.0, c.1).map(|v| v as f32), |v| f64::from(*v));

pub(crate) struct Bool;
codec!(Bool => bool, |_c, cx, field| cx.boolean_of(field), |v| *v);

/// A duration string; zero only where `zero` is allowed.
pub(crate) struct Dur {
    pub zero: bool,
}
codec!(Dur => Duration, |c, cx, field| cx.duration_of(field, c.zero), |v| format_duration(*v));

/// A duration of at least 0 that is printed only when it is not 0: a cost added after every
/// scenario printed its costs, so that one which leaves it at 0 prints (in report.json) as before.
pub(crate) struct DurUnlessZero;
impl Codec for DurUnlessZero {
    type Value = Duration;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Duration> {
        cx.duration_of(field, true)
    }
    fn print(&self, v: &Duration) -> Option<Item> {
        (!v.is_zero()).then(|| value(format_duration(*v)))
    }
}

/// One of a few strings, each meaning a `T`.
pub(crate) struct Choice<T: 'static>(pub &'static [(&'static str, T)]);
impl<T: Copy + PartialEq> Codec for Choice<T> {
    type Value = T;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<T> {
        let names: Vec<&'static str> = self.0.iter().map(|(name, _)| *name).collect();
        let name = cx.choice_of(field, &names)?;
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
    fn print(&self, v: &T) -> Option<Item> {
        self.0.iter().find(|(_, x)| x == v).map(|(name, _)| value(*name))
    }
}

/// One of a few strings (a section's tag).
pub(crate) struct OneOf(pub &'static [&'static str]);
codec!(OneOf => &'static str, |c, cx, field| cx.choice_of(field, c.0), |v| *v);

/// A key that may be left unset: `None` is printed by leaving it out.
pub(crate) struct Opt<C>(pub C);
impl<C: Codec> Codec for Opt<C> {
    type Value = Option<C::Value>;
    const SUB: Sub = C::SUB;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Option<C::Value>> {
        self.0.read(cx, field).map(Some)
    }
    fn print(&self, v: &Option<C::Value>) -> Option<Item> {
        v.as_ref().and_then(|v| self.0.print(v))
    }
}

/// A non-empty array whose elements all read as `C`.
pub(crate) struct List<C>(pub C);
impl<C: Codec> Codec for List<C> {
    type Value = Vec<C::Value>;
    fn read(&self, cx: &mut ReadContext, field: &Field) -> Option<Vec<C::Value>> {
        let elements = cx.array(field)?;
        if elements.is_empty() {
            cx.report_at(field, format!("`{}` must not be empty", field.path), None);
            return None;
        }
        let values: Vec<Option<C::Value>> = elements.iter().map(|e| self.0.read(cx, e)).collect();
        values.into_iter().collect()
    }
    fn print(&self, v: &Vec<C::Value>) -> Option<Item> {
        let array: Array = v.iter().filter_map(|x| self.0.print(x)?.into_value().ok()).collect();
        Some(value(array))
    }
}

mod faults;
mod load;
mod paths;
mod tables;
mod text;

pub(crate) use faults::*;
pub(crate) use load::*;
pub(crate) use paths::*;
pub(crate) use tables::*;
pub(crate) use text::*;
