use std::time::Duration;

use super::*;
use crate::engine::sim::{CostModel, SimConfig, SimEngine};
use crate::time::{Timestamp, VirtualClock};

fn batch(n: u64) -> Vec<EngineRequest> {
    (0..n).map(|i| EngineRequest::tokens(i, vec![1; 4], 4)).collect()
}

/// A started sim engine in virtual time with `faults` around it, and its clock.
fn engine(faults: Faults) -> (FaultyEngine<SimEngine>, VirtualClock) {
    let (sim, clock) =
        SimEngine::virtual_time(SimConfig { seed: 1, cost: CostModel::default(), ..SimConfig::default() });
    let mut e = FaultyEngine::new(sim, faults, 1, Arc::new(clock.clone()));
    e.start().expect("start");
    (e, clock)
}

type Check = fn(&Result<Vec<EngineOutput>, EngineError>, usize) -> bool;

#[test]
fn each_batch_fault_fires_on_schedule() {
    let cases: [(Faults, Check); 5] = [
        (Faults { fail_batch: FaultTrigger::every(1), ..Faults::default() }, |r, _| r.is_err()),
        (Faults { short_output: FaultTrigger::every(1), ..Faults::default() }, |r, n| {
            r.as_ref().is_ok_and(|o| o.len() == n - 1)
        }),
        (Faults { extra_output: FaultTrigger::every(1), ..Faults::default() }, |r, n| {
            r.as_ref().is_ok_and(|o| o.len() == n + 1)
        }),
        (Faults { wrong_id: FaultTrigger::every(1), ..Faults::default() }, |r, n| {
            r.as_ref().is_ok_and(|o| o[0].request_id == Some(n as u64))
        }),
        (Faults { hang: FaultTrigger::every(1), hang_for: Duration::from_secs(7), ..Faults::default() }, |r, _| {
            r.is_err()
        }),
    ];
    for (i, (faults, check)) in cases.into_iter().enumerate() {
        let (mut e, _) = engine(faults);
        let r = e.generate(&batch(4));
        assert!(check(&r, 4), "case {i}: {r:?}");
    }
}

#[test]
fn every_nth_batch_fails() {
    let (mut e, _) = engine(Faults { fail_batch: FaultTrigger::every(3), ..Faults::default() });
    let failed: Vec<bool> = (0..7).map(|_| e.generate(&batch(1)).is_err()).collect();
    assert_eq!(failed, [false, false, true, false, false, true, false]);
}

#[test]
fn same_seed_same_faults() {
    let faults = Faults { fail_batch: FaultTrigger::probability(0.3), ..Faults::default() };
    let run = || {
        let (mut e, _) = engine(faults.clone());
        (0..64).map(|_| e.generate(&batch(1)).is_err()).collect::<Vec<_>>()
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert!(a.contains(&true) && a.contains(&false), "{a:?}");
}

#[test]
fn panic_panics_and_hang_takes_virtual_time() {
    let (mut e, _) = engine(Faults { panic: FaultTrigger::every(1), ..Faults::default() });
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.generate(&batch(1))));
    assert!(r.is_err());

    let (mut e, clock) =
        engine(Faults { hang: FaultTrigger::every(1), hang_for: Duration::from_secs(3600), ..Faults::default() });
    let t0 = clock.now();
    // The hour passes on the virtual clock (a real one would make this test hang for an hour).
    assert!(e.generate(&batch(1)).is_err());
    assert_eq!(clock.now(), t0.saturating_add(Duration::from_secs(3600)));
}

#[test]
fn slow_returns_factor_times_later_with_the_engines_own_timestamps() {
    let (mut plain, clock) = engine(Faults::default());
    let t0 = clock.now();
    let fast = plain.generate(&batch(2)).expect("generate");
    let took = clock.now().saturating_since(t0);
    assert!(took > Duration::ZERO);

    let (mut slow, clock) = engine(Faults { slow: FaultTrigger::every(1), slow_factor: 4.0, ..Faults::default() });
    let t0 = clock.now();
    let late = slow.generate(&batch(2)).expect("generate");
    assert_eq!(clock.now().saturating_since(t0), took * 4);
    assert_eq!(late, fast, "the outputs (and their engine timestamps) are the engine's");
}

#[test]
fn start_faults() {
    let (sim, clock) =
        SimEngine::virtual_time(SimConfig { seed: 1, cost: CostModel::default(), ..SimConfig::default() });
    let faults = Faults { start_fails: true, start_delay: Duration::from_secs(2), ..Faults::default() };
    let mut e = FaultyEngine::new(sim, faults, 1, Arc::new(clock.clone()));
    assert!(e.start().is_err());
    assert_eq!(clock.now(), Timestamp::from_nanos(VirtualClock::ORIGIN.as_nanos() + 2_000_000_000));
    assert!(e.generate(&batch(1)).is_err(), "generate before a successful start fails");
    assert!(e.shutdown().is_ok(), "nothing to shut down");
}

#[test]
fn the_table_covers_every_field_once() {
    let names = fault_names();
    let unique: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
    // Setting each key to a non-default value changes exactly that key.
    for key in FAULT_KEYS {
        let other = match key.default_value() {
            FaultValue::Trigger(_) => FaultValue::Trigger(FaultTrigger::every(2)),
            FaultValue::Factor(f) => FaultValue::Factor(f + 1.0),
            FaultValue::Duration(d) => FaultValue::Duration(d + Duration::from_secs(1)),
            FaultValue::Flag(b) => FaultValue::Flag(!b),
            FaultValue::Process(_) => FaultValue::Process(Some(ProcessFault { after_batches: 3 })),
        };
        let mut f = Faults::default();
        (key.set)(&mut f, other.clone());
        assert_eq!((key.get)(&f), other, "{}", key.name);
        for k in FAULT_KEYS.iter().filter(|k| k.name != key.name) {
            assert_eq!((k.get)(&f), k.default_value(), "setting {} changed {}", key.name, k.name);
        }
        assert_eq!(f.has_process_faults(), key.kind == FaultKind::Process, "{}", key.name);
    }
    assert_eq!(
        trigger_names(),
        [
            "fail_batch",
            "short_output",
            "extra_output",
            "wrong_id",
            "panic",
            "slow",
            "hang",
            "http_429",
            "http_503",
            "drop_stream",
            "stall_stream",
            "exit_server"
        ]
    );
}

#[test]
fn process_targets_match_vllm_argv0() {
    assert!(process::Target::EngineCore.matches("VLLM::EngineCore"));
    assert!(process::Target::Worker.matches("VLLM::Worker_TP0"));
    assert!(!process::Target::EngineCore.matches("VLLM::Worker"));
    assert!(!process::Target::Worker.matches("python3"));
}

/// docs/scenarios.md's `[faults]` table documents exactly the table's keys, in its order, with
/// its types and doc lines.
#[test]
fn docs_document_exactly_the_fault_keys() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/scenarios.md")).expect("docs");
    let section = docs.split("\n## `[faults]`").nth(1).expect("a [faults] section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let rows: Vec<(String, String, String)> = section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").map(str::trim).collect();
            let name = cells.first()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_owned(), cells.get(1)?.to_string(), cells.get(3)?.to_string()))
        })
        .collect();
    let expected: Vec<(String, String, String)> = FAULT_KEYS
        .iter()
        .map(|k| (k.name.to_owned(), k.default_value().type_name().to_owned(), k.doc.to_owned()))
        .collect();
    assert_eq!(rows, expected);
}
