//! The comparison as a console table: one row per metric, then what was not judged, what is
//! inconclusive and what would decide it, the regressions, and the outcome.

use std::fmt::Write as _;

use super::{Comparison, Gate, Judgement, Outcome, Row, Scale, Verdict};
use crate::report::expect::human_number;
use crate::report::table::aligned;

fn value(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), human_number)
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |r| format!("{:+.1}%", r * 100.0))
}

/// One bound of a change: a percentage, or points of a share; `inf` as the table says it.
fn bound(x: f64, scale: Scale) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "+inf".into() } else { "-inf".into() };
    }
    match scale {
        Scale::Relative => format!("{:+.1}%", x * 100.0),
        Scale::Points => format!("{:+.2}pp", x * 100.0),
    }
}

/// The change's interval as the table and the page show it: `[-3.1%, +4.0%]`.
pub fn interval_text(j: &Judgement) -> String {
    format!("[{}, {}]", bound(j.interval.low, j.scale), bound(j.interval.high, j.scale))
}

/// The independent units behind a row, in words: `8 batches`, `3 repeats`.
pub fn units_text(j: &Judgement) -> String {
    let unit = j.unit.split(" (").next().unwrap_or(&j.unit);
    format!("{} {unit}", human_number(j.units.floor().max(0.0)))
}

/// The change as the table shows it: relative, or in points for a share.
fn change(r: &Row) -> String {
    match &r.judgement {
        Some(j) if j.scale == Scale::Points => bound(j.interval.estimate, Scale::Points),
        _ => percent(r.relative),
    }
}

/// The side-by-side table, then what was not judged and why, then the gate's result.
pub fn render_comparison(c: &Comparison) -> String {
    let headers = ["benchmark", "metric", "A", "B", "change", "interval", "test", "units", "verdict", "gate"];
    let mut rows: Vec<[String; 10]> = Vec::new();
    for r in &c.rows {
        let (interval, test, units) = match &r.judgement {
            Some(j) => (interval_text(j), j.test.label().to_string(), units_text(j)),
            None => ("-".into(), "-".into(), "-".into()),
        };
        rows.push([
            r.benchmark.clone(),
            r.metric.clone(),
            value(r.a),
            value(r.b),
            change(r),
            interval,
            test,
            units,
            r.verdict.label().to_string(),
            r.gate.as_ref().map_or(if r.gated { "(parts)" } else { "" }, Gate::label).to_string(),
        ]);
    }
    let mut out = format!("A: {}\nB: {}\n\n", c.a, c.b);
    out.push_str(&aligned(&headers, &rows, |i| matches!(i, 0 | 1 | 6 | 7 | 8 | 9)));
    let mut reasons: Vec<&str> = Vec::new();
    for r in &c.rows {
        if let Verdict::NotJudged(reason) = &r.verdict
            && !reasons.contains(&reason.as_str())
        {
            reasons.push(reason);
        }
    }
    if !reasons.is_empty() {
        out.push_str("\nnot judged:\n");
        for reason in reasons {
            let metrics: Vec<&str> = c
                .rows
                .iter()
                .filter(|r| matches!(&r.verdict, Verdict::NotJudged(x) if x == reason))
                .map(|r| r.metric.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let _ = writeln!(out, "  {reason}: {}", metrics.join(" "));
        }
    }
    for note in &c.notes {
        let _ = writeln!(out, "\nnote: {note}");
    }
    for name in &c.only_a {
        let _ = writeln!(out, "only in A: {name}");
    }
    for name in &c.only_b {
        let _ = writeln!(out, "only in B: {name}");
    }
    let margins = format!(
        "margin {}%, {}pp for shares, errors at most {}%; intervals at {}%",
        human_number(c.max_regression * 100.0),
        human_number(c.max_error_increase * 100.0),
        human_number(c.max_error_rate * 100.0),
        human_number((1.0 - c.alpha) * 100.0)
    );
    let inconclusive: Vec<&Row> = c.inconclusive().collect();
    if !inconclusive.is_empty() {
        let _ = writeln!(out, "\n{} inconclusive:", inconclusive.len());
        for r in inconclusive {
            if let Some(Gate::Inconclusive(why)) = &r.gate {
                let _ = writeln!(out, "  {} {}: {why}", r.benchmark, r.metric);
            }
        }
    }
    let regressions: Vec<&Row> = c.regressions().collect();
    if !regressions.is_empty() {
        let _ = writeln!(out, "\n{} regression(s):", regressions.len());
        for r in regressions {
            let why = match &r.gate {
                Some(Gate::Regression(why)) => why.as_str(),
                _ => "",
            };
            let _ = writeln!(
                out,
                "  {} {}: {} -> {} ({}): {why}",
                r.benchmark,
                r.metric,
                value(r.a),
                value(r.b),
                change(r)
            );
        }
    }
    let _ = writeln!(
        out,
        "\n{} ({margins})",
        match c.outcome() {
            Outcome::Pass => "pass: every gated metric is within its margin",
            Outcome::Regression => "REGRESSION",
            Outcome::Inconclusive =>
                "INCONCLUSIVE: no regression shown, and not every gated metric shown within its margin",
        }
    );
    out
}
