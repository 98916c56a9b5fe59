//! The environment section: batchlab and the engine, the machine (with its speed probe), the
//! seeds and the scenario as it ran.

use super::super::page::{Cell, Section, Table};
use crate::report::Report;

/// The machine-speed probe in one line: `7.51 → 7.75 ms, load 0.50 → 1.25, steal 0.0 %`.
fn machine_probe(probe: Option<&crate::report::MachineProbe>) -> String {
    let Some(p) = probe else { return "not measured (virtual time, or an older batchlab)".into() };
    let load = |l: Option<f64>| l.map_or_else(|| "?".into(), |l| format!("{l:.2}"));
    let steal = p.steal_share.map_or_else(|| "unknown".into(), |s| format!("{:.1} %", s * 100.0));
    format!(
        "{:.2} → {:.2} ms, load {} → {}, steal {steal}",
        p.probe_start_ms,
        p.probe_end_ms,
        load(p.load_start),
        load(p.load_end)
    )
}

pub(super) fn environment(report: &Report) -> Section {
    let env = &report.environment;
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    let mut table = Table::new(&["", ""]);
    let rows = [
        ("batchlab", report.batchlab_version.clone()),
        ("engine", format!("{} {}", env.engine_name, env.engine_version)),
        ("CPU", opt(&env.cpu_model)),
        ("cores", env.cores.map_or_else(|| "unknown".into(), |n| n.to_string())),
        ("CPU affinity", opt(&env.cpu_affinity)),
        ("OS", env.os.clone()),
        ("host", opt(&env.hostname)),
        ("machine probe", machine_probe(env.machine.as_ref())),
        ("report schema", report.schema_version.to_string()),
    ];
    for (k, v) in rows {
        table.row(vec![Cell::text(k), Cell::text(v)]);
    }
    let mut seeds = Table::new(&["seed", "value"]);
    for (k, v) in &env.seeds {
        seeds.row(vec![Cell::text(k.clone()), Cell::num(v.to_string())]);
    }
    let scenario = toml::to_string(&report.scenario).unwrap_or_else(|_| report.scenario.to_string());
    Section::new("environment", "Environment and seeds").table(&table).table(&seeds).details(
        "The scenario as it ran (every default filled in)",
        format!("<pre>{}</pre>", super::super::page::escape(&scenario)),
    )
}
