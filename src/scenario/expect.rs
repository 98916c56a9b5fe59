//! `[expect]`: the metrics a scenario may assert on, and the `"op value"` syntax.
//!
//! The metric names live here and only here; the report side checks expectations by the same
//! names, so a typo in a scenario is caught at load time instead of silently never matching.

use super::plan::Comparison;

/// Counters and rates, one value per benchmark.
pub const SCALAR_METRICS: &[&str] = &[
    "completed",
    "errors",
    "cancelled",
    "incomplete",
    "lost",
    "anomalies",
    "requests_per_s",
    "input_tokens_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "duration_s",
    "concurrency_mean",
    "batches",
    "batch_size_mean",
    "full_flush_share",
    "timeout_flush_share",
    "drain_flush_share",
];

/// Timings with a distribution; each yields `<timing>_<stat>_ms`.
pub const TIMINGS: &[&str] = &["latency", "ttft", "itl", "tpot", "batch_wait", "engine_queue", "generate"];

/// The statistics of each timing.
pub const TIMING_STATS: &[&str] = &["mean", "p50", "p90", "p95", "p99", "p999", "min", "max", "std"];

/// Every metric name `[expect]` accepts.
pub fn known_metrics() -> Vec<String> {
    let timings = TIMINGS.iter().flat_map(|t| TIMING_STATS.iter().map(move |s| format!("{t}_{s}_ms")));
    SCALAR_METRICS.iter().map(|m| (*m).to_owned()).chain(timings).collect()
}

pub fn is_known_metric(name: &str) -> bool {
    if SCALAR_METRICS.contains(&name) {
        return true;
    }
    let Some(rest) = name.strip_suffix("_ms") else {
        return false;
    };
    TIMINGS.iter().any(|t| {
        rest.strip_prefix(t).and_then(|r| r.strip_prefix('_')).is_some_and(|stat| TIMING_STATS.contains(&stat))
    })
}

impl Comparison {
    /// The operator as written in scenarios.
    pub fn symbol(self) -> &'static str {
        match self {
            Comparison::Eq => "==",
            Comparison::Ne => "!=",
            Comparison::Lt => "<",
            Comparison::Le => "<=",
            Comparison::Gt => ">",
            Comparison::Ge => ">=",
        }
    }

    /// Whether `actual op expected` holds.
    pub fn holds(self, actual: f64, expected: f64) -> bool {
        match self {
            Comparison::Eq => actual == expected,
            Comparison::Ne => actual != expected,
            Comparison::Lt => actual < expected,
            Comparison::Le => actual <= expected,
            Comparison::Gt => actual > expected,
            Comparison::Ge => actual >= expected,
        }
    }
}

/// Parses `"op value"`, e.g. `">= 1000"`; a bare number means `==`.
pub fn parse_condition(text: &str) -> Result<(Comparison, f64), String> {
    const OPS: &[(&str, Comparison)] = &[
        ("==", Comparison::Eq),
        ("!=", Comparison::Ne),
        ("<=", Comparison::Le),
        (">=", Comparison::Ge),
        ("<", Comparison::Lt),
        (">", Comparison::Gt),
    ];
    let text = text.trim();
    let (op, rest) = OPS
        .iter()
        .find_map(|(sym, op)| text.strip_prefix(sym).map(|rest| (*op, rest)))
        .unwrap_or((Comparison::Eq, text));
    match rest.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok((op, v)),
        _ => Err(format!("expected \"op value\" such as \">= 1000\" (op: == != < <= > >=), found \"{text}\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Option<(Comparison, f64)>) {
        assert_eq!(parse_condition(input).ok(), expected, "{input}");
    }

    #[test]
    fn conditions() {
        check("== 256", Some((Comparison::Eq, 256.0)));
        check(">=1000", Some((Comparison::Ge, 1000.0)));
        check(" < 0.5 ", Some((Comparison::Lt, 0.5)));
        check("!= 0", Some((Comparison::Ne, 0.0)));
        check("> -1", Some((Comparison::Gt, -1.0)));
        check("12", Some((Comparison::Eq, 12.0)));
        check("=> 3", None);
        check(">= lots", None);
        check("<= inf", None);
    }

    #[test]
    fn metric_names() {
        let all = known_metrics();
        assert_eq!(all.len(), SCALAR_METRICS.len() + TIMINGS.len() * TIMING_STATS.len());
        assert!(all.iter().all(|m| is_known_metric(m)));
        for bad in ["ttft_p99", "ttft_p98_ms", "complete", "latency__ms", "_ms"] {
            assert!(!is_known_metric(bad), "{bad}");
        }
    }
}
