//! The console's shard table of a merged report: a row per shard (completed, errors, dispatch
//! delay and client lag p99, start lateness, clock offset, verdict), then a line per missing or
//! failed shard.

use std::fmt::Write;

use super::MergeSummary;

/// The table, ending with a newline.
pub fn render_shards(summary: &MergeSummary) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:>9} {:>6} {:>15} {:>14} {:>13} {:>13}  verdict",
        "shard", "host", "completed", "errors", "dispatch p99 ms", "client lag p99", "start late ms", "clock off ms"
    );
    for r in &summary.shards {
        let _ = writeln!(
            out,
            "{:<6} {:<16} {:>9} {:>6} {:>15} {:>14} {:>13} {:>13}  {}",
            format!("{}/{}", r.k, summary.n),
            r.host.as_deref().unwrap_or("-"),
            r.completed,
            r.errors,
            ms(r.dispatch_delay_p99_ms),
            ms(r.client_lag_p99_ms),
            ms(r.start_lateness_ms),
            ms(r.clock_offset_ms),
            r.verdict_label()
        );
    }
    for k in &summary.missing {
        let _ = writeln!(out, "{:<6} MISSING: no output directory was given for it", format!("{k}/{}", summary.n));
    }
    for f in &summary.failed {
        let which = f.k.map_or(f.source.clone(), |k| format!("{k}/{}", summary.n));
        let _ = writeln!(out, "{which:<6} FAILED ({}): {}", f.source, f.reason);
    }
    let b = &summary.bounds;
    let _ = writeln!(
        out,
        "verdict bounds: client lag p99 <= {} ms, start lateness <= {} ms, |clock offset| <= {} ms",
        b.max_client_lag_p99_ms, b.max_start_lateness_ms, b.max_clock_offset_ms
    );
    out
}
