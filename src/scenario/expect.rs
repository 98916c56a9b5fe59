//! `[expect]`: the metrics a scenario may assert on, and the `"op value"` syntax.
//!
//! The metric names are the report's own (`metrics::result`); checking them at load time catches
//! a typo in a scenario instead of an expectation that silently never matches.

use super::plan::Comparison;

/// Every metric name `[expect]` accepts: exactly those a benchmark result reports
/// ([`crate::metrics::result::all_metric_names`]), so the two can never drift apart.
pub fn known_metrics() -> Vec<String> {
    crate::metrics::result::all_metric_names().to_vec()
}

/// Whether `[expect]` accepts `name` (one of [`known_metrics`]).
pub fn is_known_metric(name: &str) -> bool {
    crate::metrics::result::is_metric_name(name)
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
        let kinds = crate::batcher::RequestError::KINDS.len();
        assert_eq!(
            all.len(),
            28 + 8 * 9 + kinds,
            "28 scalars (dispatch delay and client lag p50, p99, max among them), 8 timings with 9 statistics each, \
             errors by kind"
        );
        assert!(all.iter().all(|m| is_known_metric(m)));
        for bad in ["ttft_p99", "ttft_p98_ms", "complete", "latency__ms", "_ms"] {
            assert!(!is_known_metric(bad), "{bad}");
        }
    }
}
