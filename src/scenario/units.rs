//! Durations written as strings with a unit (`"10ms"`, `"1.5s"`).
//!
//! A bare number is ambiguous (seconds? milliseconds?), so the DSL refuses it. Parsing is exact
//! decimal arithmetic, not floating point, so `format_duration` and `parse_duration` round-trip.

use std::time::Duration;

const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses `<number><unit>` with unit one of `ns us ms s m h`; decimals allowed, sub-nanosecond
/// remainders truncated.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = (&text[..split], text[split..].trim());
    let Some(&(_, unit_nanos)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(format!("expected a duration such as \"10ms\" (units: ns, us, ms, s, m, h), found \"{text}\""));
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits_ok(whole) || !digits_ok(fraction) {
        return Err(format!("expected a duration such as \"10ms\", found \"{text}\""));
    }
    let too_large = || format!("duration \"{text}\" is too large");
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
    let fraction = &fraction[..fraction.len().min(18)];
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction: u128 = if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| too_large())? };
    let nanos = whole
        .checked_mul(unit_nanos)
        .and_then(|w| w.checked_add(fraction * unit_nanos / scale))
        .filter(|n| *n <= u128::from(u64::MAX))
        .ok_or_else(too_large)?;
    Ok(Duration::from_nanos(nanos as u64))
}

/// The shortest exact form: the largest unit that divides the duration.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    let (name, unit) = UNITS
        .iter()
        .rev()
        .filter(|(name, _)| *name != "µs")
        .find(|(_, unit)| nanos % unit == 0)
        .copied()
        .unwrap_or(("ns", 1));
    format!("{}{name}", nanos / unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<Duration, ()>) {
        assert_eq!(parse_duration(input).map_err(|_| ()), expected, "{input}");
    }

    #[test]
    fn parses() {
        check("10ms", Ok(Duration::from_millis(10)));
        check("1.5s", Ok(Duration::from_millis(1500)));
        check(".5us", Ok(Duration::from_nanos(500)));
        check("2m", Ok(Duration::from_secs(120)));
        check("1h", Ok(Duration::from_secs(3600)));
        check("0s", Ok(Duration::ZERO));
        check("7 ns", Ok(Duration::from_nanos(7)));
        check("10", Err(()));
        check("ms", Err(()));
        check("1.2.3s", Err(()));
        check("-1s", Err(()));
        check("10days", Err(()));
        check("99999999999999999999999h", Err(()));
    }

    #[test]
    fn formats_exactly() {
        for nanos in [0, 1, 999, 1_000, 1_500_000, 2_000_000_000, 90_000_000_000, 3_600_000_000_000, 12_345_678_901] {
            let d = Duration::from_nanos(nanos);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }
}
