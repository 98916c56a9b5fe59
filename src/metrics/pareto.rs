//! The throughput/latency Pareto front: the points no other point beats on both axes.
//!
//! A point is (throughput, latency): higher throughput is better, lower latency is better. A point
//! is *dominated* when another is at least as good on both axes and strictly better on one; the
//! front is every point that is not. A point with a missing (or non-finite) value is never on the
//! front and never dominates.

/// `front[i]`: point `i` is on the Pareto front of `points` (throughput up, latency down).
pub fn front(points: &[(Option<f64>, Option<f64>)]) -> Vec<bool> {
    let valid = |p: &(Option<f64>, Option<f64>)| match *p {
        (Some(t), Some(l)) if t.is_finite() && l.is_finite() => Some((t, l)),
        _ => None,
    };
    points
        .iter()
        .map(|p| {
            let Some((t, l)) = valid(p) else { return false };
            !points.iter().filter_map(valid).any(|(ot, ol)| ot >= t && ol <= l && (ot > t || ol < l))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::front;

    #[test]
    fn the_front_holds_exactly_the_undominated_points() {
        let p = |t: f64, l: f64| (Some(t), Some(l));
        let points = [
            p(100.0, 50.0),     // front: the fastest
            p(200.0, 80.0),     // front
            p(150.0, 90.0),     // dominated by (200, 80)
            p(300.0, 200.0),    // front: the most throughput
            p(300.0, 250.0),    // dominated by (300, 200): same throughput, more latency
            (None, Some(10.0)), // unmeasured: never on the front, never dominates
            p(200.0, 80.0),     // a tie with a front point: both stay
        ];
        assert_eq!(front(&points), [true, true, false, true, false, false, true]);
    }

    #[test]
    fn empty_and_single() {
        assert!(front(&[]).is_empty());
        assert_eq!(front(&[(Some(1.0), Some(1.0))]), [true]);
    }
}
