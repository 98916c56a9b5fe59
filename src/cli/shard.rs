//! `batchlab run`'s shard flags (`--shard K/N`, `--start-at`, `--clock-offset-ms`), parsed into a
//! [`ShardRun`]; the rule of what a shard sends is `loadgen::shard`'s (docs/distributed.md).

use std::time::{Duration, SystemTime};

use batchlab::loadgen::shard::Shard;
use batchlab::run::shard::ShardRun;

/// The flags that make a run one shard of a distributed run.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ShardArgs {
    /// Run shard K of N (K 0-based, so Kubernetes' `$JOB_COMPLETION_INDEX/N` works) of the one
    /// seeded schedule: arrival i is shard i mod N's, at its single-process time; concurrency is
    /// split. Always writes requests.jsonl, for `batchlab merge` (docs/distributed.md).
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// With --shard: start the schedule at this wall-clock time (RFC 3339, `2026-12-07T09:30:00Z`,
    /// or unix seconds, `1796635800.25`), once the engine is loaded; how late it woke is recorded.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at, requires = "shard")]
    start_at: Option<SystemTime>,
    /// With --shard: this host's clock offset a launcher measured (ms), recorded in the report.
    #[arg(long, value_name = "MS", requires = "shard", allow_hyphen_values = true)]
    clock_offset_ms: Option<f64>,
}

impl ShardArgs {
    /// The run's shard, if it is one.
    pub(crate) fn shard_run(&self) -> Option<ShardRun> {
        let shard = self.shard?;
        Some(ShardRun { shard, start_at: self.start_at, clock_offset_ms: self.clock_offset_ms })
    }
}

/// `--start-at`: unix seconds (with a fraction), or an RFC 3339 time with `Z` or an offset.
pub(crate) fn parse_start_at(text: &str) -> Result<SystemTime, String> {
    let text = text.trim();
    let unix = match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Some(s),
        Ok(_) => return Err(format!("{text:?} is not a time after 1970")),
        Err(_) => rfc3339_unix_s(text),
    };
    let unix = unix.ok_or_else(|| {
        format!("expected RFC 3339 (2026-12-07T09:30:00Z, 2026-12-07T10:30:00.5+01:00) or unix seconds, found {text:?}")
    })?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs_f64(unix))
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` in unix seconds; `None` when it is not that.
fn rfc3339_unix_s(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let rest = &text[19..];
    let frac_len = rest.strip_prefix('.').map_or(0, |f| f.bytes().take_while(u8::is_ascii_digit).count() + 1);
    let fraction = if frac_len > 1 { format!("0{}", &rest[..frac_len]).parse::<f64>().ok()? } else { 0.0 };
    let zone = &rest[frac_len..];
    let offset_s = match zone {
        "Z" | "z" => 0,
        _ if zone.len() == 6 && zone.as_bytes()[3] == b':' => {
            let sign = match zone.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (h, m) = (zone[1..3].parse::<i64>().ok()?, zone[4..6].parse::<i64>().ok()?);
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    (seconds >= 0).then_some(seconds as f64 + fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(text: &str) -> Result<f64, String> {
        parse_start_at(text).map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64())
    }

    #[test]
    fn start_at_reads_rfc3339_and_unix_seconds() {
        // `date -u -d 2026-12-07T09:30:00Z +%s` = 1796635800.
        assert_eq!(unix("2026-12-07T09:30:00Z"), Ok(1_796_635_800.0));
        assert_eq!(unix("2026-12-07T10:30:00.25+01:00"), Ok(1_796_635_800.25));
        assert_eq!(unix("2026-12-07T04:30:00-05:00"), Ok(1_796_635_800.0));
        assert_eq!(unix("1970-01-01T00:00:00Z"), Ok(0.0));
        assert_eq!(unix("2000-03-01T00:00:00Z"), Ok(951_868_800.0));
        assert_eq!(unix("1796635800.5"), Ok(1_796_635_800.5));
        for bad in ["2026-13-07T09:30:00Z", "2026-12-07T09:30:00", "tomorrow", "-5", "2026-12-07T09:30:00+0100"] {
            assert!(parse_start_at(bad).is_err(), "{bad:?}");
        }
    }
}
