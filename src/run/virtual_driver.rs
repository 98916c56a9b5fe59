//! Runs a plan's steps on the virtual-time driver: one thread, no sleeping, deterministic.

use tokio::sync::watch;

use super::step::{Action, StepRun};
use super::{DriverResult, RunError};
use crate::batcher::virtual_time::VirtualDriver;
use crate::engine::Engine;
use crate::engine::faults::FaultyEngine;
use crate::engine::sim::{SimConfig, SimEngine};
use crate::load::{StepPlanner, Workload};
use crate::metrics::WallAnchor;
use crate::report::RequestsJsonl;
use crate::scenario::plan::Plan;

use super::progress::Progress;

/// Outcomes handled between looks at the interrupt flag and the progress display.
const CHECK_EVERY: u32 = 4096;

pub(super) fn run(
    plan: &Plan,
    config: SimConfig,
    workload: &Workload,
    jsonl: &mut Option<RequestsJsonl>,
    progress: &mut Progress,
    interrupt: &watch::Receiver<bool>,
) -> Result<DriverResult, RunError> {
    let seed = config.seed;
    let (engine, clock) = SimEngine::virtual_time(config);
    let engine = FaultyEngine::new(engine, plan.faults.clone(), seed, std::sync::Arc::new(clock.clone()));
    let domain = engine.clock_domain();
    let mut driver = VirtualDriver::new(engine, plan.batching.clone(), clock);
    progress.phase("loading engine", "");
    let info = driver.start()?;
    let anchor = Some(WallAnchor { wall_secs: 0.0, mono: driver.now() });

    let mut planner = StepPlanner::new(&plan.profile);
    let mut last_rps = None;
    let mut benchmarks = Vec::new();
    let mut next_request = 0;
    let mut interrupted = false;
    let mut incomplete = false;
    let mut ticks = 0u32;

    while let Some(step) = planner.next_step(last_rps) {
        let mut run = StepRun::for_plan(step, plan, driver.now(), domain, anchor)?;
        loop {
            // Batches before outcomes: a batch is judged while its requests are still in flight.
            for batch in driver.take_batches() {
                run.on_batch(&batch);
            }
            while let Some((id, outcome)) = driver.poll_outcome() {
                run.on_outcome(id, &outcome, driver.now(), jsonl.as_mut())?;
            }
            ticks = ticks.wrapping_add(1);
            if ticks % CHECK_EVERY == 0 {
                if *interrupt.borrow() && !interrupted {
                    interrupted = true;
                    run.interrupt(driver.now());
                    let ids: Vec<_> = run.in_flight_ids().collect();
                    for id in ids {
                        driver.cancel(id);
                    }
                }
                run.show(progress, driver.now());
            }
            match run.poll(driver.now()) {
                Action::Submit(phase) => {
                    let request = workload.request(next_request);
                    next_request += 1;
                    let id = request.id;
                    match driver.submit(request) {
                        Ok(()) => run.on_submitted(id, phase, driver.now()),
                        Err(e) => run.on_rejected(&e, driver.now()),
                    }
                }
                Action::Wait(until) => {
                    let next = match (driver.next_event(), until) {
                        (Some(a), Some(b)) => a.min(b),
                        (a, b) => match a.or(b) {
                            Some(t) => t,
                            None => {
                                return Err(RunError::Internal(format!(
                                    "benchmark {} is waiting with nothing scheduled ({} in flight)",
                                    run.name(),
                                    run.in_flight()
                                )));
                            }
                        },
                    };
                    driver.advance_to(next);
                }
                Action::Done => break,
            }
        }
        run.show(progress, driver.now());
        if run.finish_into(driver.now(), jsonl.as_mut(), &mut benchmarks)? {
            incomplete = true;
            break;
        }
        last_rps = benchmarks.last().and_then(|b| b.requests_per_s);
    }
    progress.phase("stopping engine", "");
    driver.shutdown()?;
    Ok(DriverResult { engine: info, benchmarks, interrupted, incomplete })
}
