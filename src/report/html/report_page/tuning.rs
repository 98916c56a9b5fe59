//! The section of a `batchlab tune` run: what it recommends, the front of its search as a chart
//! and a table, and the confirmation on the real engine.

use super::super::chart::{self, Chart, Series, format_value};
use super::super::page::{Cell, Section, Table};
use super::num;
use crate::report::tuning::{Point, TuneReport};
use crate::scenario::units::format_duration;

/// `batchlab tune`: what it recommends, the front of its search as a chart and a table, and the
/// confirmation on the real engine.
pub(super) fn tuning(tune: &TuneReport) -> Section {
    let r = &tune.result;
    let knob = r.space.load;
    let short = |p: &Point| {
        let mut s = format!("{} / {}", p.batch_size, format_duration(p.batch_timeout));
        if let Some(l) = p.load {
            s.push_str(&format!(" / {}", format_value(l)));
        }
        s
    };
    let xy = |p: &Point| Some((p.score?, p.latency_p99_ms?));
    let mut front: Vec<&Point> = r.points.iter().filter(|p| p.front && xy(p).is_some()).collect();
    front.sort_by(|a, b| a.score.unwrap_or(f64::MIN).total_cmp(&b.score.unwrap_or(f64::MIN)));
    front.dedup_by(|a, b| a.result() == b.result());
    // The latency axis shows the front's range (with room): a point whose queue ran away would
    // squash the rest flat, so such points are counted instead of drawn.
    let y_max = front.iter().filter_map(|p| p.latency_p99_ms).fold(0.0, f64::max) * 3.0;
    let all: Vec<(f64, f64)> = r.points.iter().filter(|p| !p.front).filter_map(xy).collect();
    let off_chart = all.iter().filter(|p| p.1 > y_max).count();
    let others: Vec<(f64, f64)> = all.into_iter().filter(|p| p.1 <= y_max).collect();
    let best: Vec<(f64, f64)> = r.best_point().and_then(xy).into_iter().collect();
    let chart = Chart::new("Search: objective against latency p99", &tune.objective, "latency p99 (ms)");
    let ends: Vec<String> = front
        .iter()
        .enumerate()
        .map(|(i, p)| if i == 0 || i + 1 == front.len() { short(p) } else { String::new() })
        .collect();
    let svg = chart::scatter_svg(
        &chart,
        &[
            Series::dots("evaluated", others),
            Series::new("front", front.iter().filter_map(|p| xy(p)).collect()),
            Series::new("recommended", best),
        ],
        &[Vec::new(), ends, r.best_point().map(short).into_iter().collect()],
    );
    let mut table = Table::new(&[
        "point",
        "objective",
        "out tok/s",
        "latency p99 ms",
        "at 1.5x load",
        "same result",
        "front",
        "found",
    ]);
    let rows = r.distinct(|p| p.front || p.plateau);
    for p in rows {
        let mark = if r.best_point() == Some(p) { " (recommended)" } else { "" };
        let same = r.points.iter().filter(|q| q.result() == p.result()).count();
        table.row(vec![
            Cell::Text(format!("{}{mark}", p.label(knob))),
            Cell::Num(num(p.score)),
            Cell::Num(num(p.throughput)),
            Cell::Num(num(p.latency_p99_ms)),
            Cell::Num(if p.plateau { num(p.stress_score) } else { String::new() }),
            Cell::Num(if same > 1 { format!("{same} points") } else { String::new() }),
            Cell::Text(if p.front { "yes".into() } else { String::new() }),
            Cell::Text(if p.grid { "grid".into() } else { "refine".into() }),
        ]);
    }
    let mut s = Section::new("tuning", "Tuning")
        .text(&format!(
            "batchlab tune searched {} points in the simulator in {:.2} s for the best {}.",
            r.points.len(),
            tune.search_s,
            tune.objective
        ))
        .html(format!(
            "<pre>{}</pre>",
            super::super::page::escape(&r.snippet().unwrap_or_else(|| "no point met the objective".into()))
        ))
        .charts(vec![svg])
        .table(&table)
        .note(
            "The front: no other point has a higher objective and a lower latency p99. The plateau: points within \
             2 % of the highest objective; of these, the recommendation is the one with the highest objective at \
             1.5x its load (its headroom). Method: docs/tuning.md.",
        );
    if off_chart > 0 {
        s = s.note(&format!(
            "{off_chart} evaluated point(s) with a latency p99 above {} ms (3x the front's) are left off the chart.",
            format_value(y_max)
        ));
    }
    if !tune.confirmed.is_empty() {
        let mut t = Table::new(&["point", "predicted", "measured", "error %", "predicted p99 ms", "measured p99 ms"]);
        for c in &tune.confirmed {
            t.row(vec![
                Cell::Text(c.point.clone()),
                Cell::Num(num(c.predicted)),
                Cell::Num(num(c.measured)),
                Cell::Num(c.error_pct().map_or_else(|| "-".into(), |e| format!("{e:+.1}"))),
                Cell::Num(num(c.predicted_latency_p99_ms)),
                Cell::Num(num(c.measured_latency_p99_ms)),
            ]);
        }
        s = s
            .text("Confirmed on the real engine in one engine start: predicted (simulator) against measured.")
            .table(&t);
    }
    s
}
