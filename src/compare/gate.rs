//! The gate's rule: what an interval says of a metric ([`verdict_of`]), and the three-way
//! verdict of a gated one ([`gate_of`]: pass, regression or inconclusive against the margin), with
//! what would decide an inconclusive row ([`needs`]).

use super::comparison::{CompareOptions, Direction, Gate, Judgement, Scale, Verdict, direction};
use super::judge::Judged;
use super::stats::{Interval, share_change};

/// What an interval says of a metric: on which side of no change it lies, if on one.
pub(super) fn verdict_of(metric: &str, interval: &Interval) -> Verdict {
    let side = if interval.low > 0.0 {
        1
    } else if interval.high < 0.0 {
        -1
    } else {
        return Verdict::WithinNoise;
    };
    match (direction(metric), side) {
        (Direction::Neutral, _) => Verdict::Differs,
        (Direction::Lower, -1) | (Direction::Higher, 1) => Verdict::Better,
        _ => Verdict::Worse,
    }
}

/// An interval turned so that positive is worse: `(estimate, better bound, worse bound)`. A
/// metric without a better direction is judged both ways: its larger departure is "worse".
fn worse_side(metric: &str, i: &Interval) -> (f64, f64, f64) {
    match direction(metric) {
        Direction::Lower => (i.estimate, i.low, i.high),
        Direction::Higher => (-i.estimate, -i.high, -i.low),
        Direction::Neutral => {
            let far = i.high.abs().max(i.low.abs());
            let near = if i.low > 0.0 || i.high < 0.0 { i.low.abs().min(i.high.abs()) } else { 0.0 };
            (i.estimate.abs(), near, far)
        }
    }
}

/// The three-way rule on `interval` (turned worse-positive) against `margin`; `estimate` is the
/// table's change, which a pass must keep inside the margin and a regression beyond it (the
/// interval's own estimate can differ a little: nearest-rank quantiles of requests.jsonl against
/// the report's; a row that reads +4.98 % is no regression at a 5 % margin).
fn decide(metric: &str, interval: &Interval, estimate: Option<f64>, margin: f64) -> Option<bool> {
    let (est, better, worse) = worse_side(metric, interval);
    let shown = estimate.map(|e| worse_side(metric, &Interval::exact(e)).0);
    if better > 0.0 && est > margin && shown.is_none_or(|s| s > margin) {
        return Some(false);
    }
    if worse < margin && shown.is_none_or(|s| s <= margin) {
        return Some(true);
    }
    None
}

fn percent(x: f64) -> String {
    format!("{} %", crate::report::expect::human_number(x * 100.0))
}

/// A gated metric's verdict. See [`Gate`].
pub(super) fn gate_of(metric: &str, judged: &Judged, relative: Option<f64>, options: &CompareOptions) -> Gate {
    let j = match judged {
        Ok(j) => j,
        Err(reason) => return Gate::Inconclusive(format!("not judged: {reason}")),
    };
    let (margin, estimate) = match j.scale {
        Scale::Points => (options.max_error_increase, Some(j.interval.estimate)),
        Scale::Relative => (options.max_regression, relative),
    };
    // The absolute limit on errors, whatever A did.
    if metric == "errors"
        && let Some((low, _)) = j.b_share
        && low > options.max_error_rate
    {
        return Gate::Regression(format!(
            "B's error share is at least {} (its {}-interval), above --max-error-rate {}",
            percent(low),
            percent(1.0 - options.alpha),
            percent(options.max_error_rate)
        ));
    }
    let (est, _, _) = worse_side(metric, &j.interval);
    match decide(metric, &j.interval, estimate, margin) {
        Some(true) => Gate::Pass,
        Some(false) => {
            Gate::Regression(format!("worse by {} at least", show(worse_side(metric, &j.interval).1, j.scale)))
        }
        None => Gate::Inconclusive(needs(metric, j, estimate, margin, est, options.alpha)),
    }
}

/// A change as the table shows it: a percentage, or points.
fn show(x: f64, scale: Scale) -> String {
    match scale {
        Scale::Relative => format!("{:+.1} %", x * 100.0),
        Scale::Points => format!("{:+.2} pp", x * 100.0),
    }
}

/// What would decide an inconclusive row: the units per run at which the same change, measured
/// as precisely as a larger run would, is a pass or a regression.
fn needs(metric: &str, j: &Judgement, estimate: Option<f64>, margin: f64, est: f64, alpha: f64) -> String {
    let tell = match j.scale {
        Scale::Relative => format!("±{}", percent(margin)),
        Scale::Points => format!("±{} pp", crate::report::expect::human_number(margin * 100.0)),
    };
    let open = format!(
        "the interval [{}, {}] holds both no change and more than {tell}",
        show(j.interval.low, j.scale),
        show(j.interval.high, j.scale)
    );
    let at = |scale: f64| -> Option<Interval> {
        match &j.share_inputs {
            Some((a, b)) => share_change(a, b, alpha, scale).map(|c| c.change),
            None => {
                let i = &j.interval;
                let k = scale.sqrt();
                Some(Interval {
                    estimate: i.estimate,
                    low: i.estimate - (i.estimate - i.low) / k,
                    high: i.estimate + (i.high - i.estimate) / k,
                })
            }
        }
    };
    if !j.interval.low.is_finite() || !j.interval.high.is_finite() || j.units < 1.0 {
        return format!("{open}; too few units to say how many more would decide it");
    }
    let mut scale = 1.0;
    while scale < 1e4 {
        scale *= 1.25;
        if let Some(i) = at(scale)
            && decide(metric, &i, estimate, margin).is_some()
        {
            let target = if est > margin { "to tell it from no change".to_string() } else { format!("to tell {tell}") };
            let count = (j.units * scale).ceil();
            return format!("{open}; needs about {count} {} per run {target}", j.unit);
        }
    }
    format!("{open}; the change is too close to the margin for any run size to decide")
}
