//! The comparison as a console table: one row per metric, then the regressions.

use std::fmt::Write as _;

use super::{Comparison, Row, Verdict};
use crate::report::expect::human_number;
use crate::report::table::aligned;

fn value(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), human_number)
}

/// A delta with its sign; float noise (from averaging repeats) below 0.0005 reads as 0.
fn signed(v: Option<f64>) -> String {
    match v {
        Some(v) if v.abs() < 0.0005 => "0".to_string(),
        Some(v) if v > 0.0 => format!("+{}", human_number(v)),
        v => value(v),
    }
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |r| format!("{:+.1}%", r * 100.0))
}

/// A p-value for people: 3 decimals, small ones in scientific notation, tiny ones as `<1e-9`.
pub fn p_value(p: f64) -> String {
    if p < 1e-9 {
        "<1e-9".to_string()
    } else if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

fn test(r: &Row) -> (String, String) {
    match r.test {
        Some((kind, p)) => (kind.label().into(), p_value(p)),
        None => ("-".into(), "-".into()),
    }
}

/// The side-by-side table, then what was not judged and why, then the gate's result.
pub fn render_comparison(c: &Comparison) -> String {
    let headers = ["benchmark", "metric", "A", "B", "delta", "delta %", "test", "p", "verdict"];
    let mut rows: Vec<[String; 9]> = Vec::new();
    for r in &c.rows {
        let (kind, p) = test(r);
        let mut verdict = r.verdict.label().to_string();
        if r.regression {
            verdict.push_str("  REGRESSION");
        } else if r.gated {
            verdict.push_str("  (gated)");
        }
        rows.push([
            r.benchmark.clone(),
            r.metric.clone(),
            value(r.a),
            value(r.b),
            signed(r.delta),
            percent(r.relative),
            kind,
            p,
            verdict,
        ]);
    }
    let mut out = format!("A: {}\nB: {}\n\n", c.a, c.b);
    out.push_str(&aligned(&headers, &rows, |i| matches!(i, 0 | 1 | 6 | 8)));
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
    for name in &c.only_a {
        let _ = writeln!(out, "only in A: {name}");
    }
    for name in &c.only_b {
        let _ = writeln!(out, "only in B: {name}");
    }
    let threshold = format!("{}%", human_number(c.max_regression * 100.0));
    let regressions: Vec<&Row> = c.regressions().collect();
    if regressions.is_empty() {
        let _ = writeln!(out, "\nno gated metric worse by more than {threshold} (alpha {})", human_number(c.alpha));
    } else {
        let _ = writeln!(out, "\n{} regression(s) beyond {threshold}:", regressions.len());
        for r in regressions {
            let _ = writeln!(
                out,
                "  {} {}: {} -> {} ({})",
                r.benchmark,
                r.metric,
                value(r.a),
                value(r.b),
                percent(r.relative)
            );
        }
    }
    out
}
