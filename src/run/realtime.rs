//! Runs a plan's steps in real time: the threaded batcher and its engine thread, driven from a
//! tokio task that sleeps until the next arrival, a completion or Ctrl-C, whichever comes first.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::engine_guard::{AbortAfterGrace, DeathWatch, shutdown_bounded};
use super::progress::Progress;
use super::step::{Action, StepRun};
use super::{DriverResult, RunError};
use crate::batcher::{BatchRun, Batcher, Outcome};
use crate::engine::{Engine, RequestId};
use crate::load::{StepPlanner, Workload};
use crate::metrics::WallAnchor;
use crate::report::RequestsJsonl;
use crate::scenario::plan::Plan;
use crate::time::{Clock, MonotonicClock, Timestamp};

enum Message {
    Outcome(RequestId, Outcome, Timestamp),
    Batch(BatchRun),
}

fn wall_anchor() -> WallAnchor {
    let mono = MonotonicClock::read();
    let wall_secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    WallAnchor { wall_secs, mono }
}

/// A tokio sleep until a monotonic timestamp.
async fn sleep_until(t: Timestamp) {
    let wait = t.saturating_since(MonotonicClock::read());
    tokio::time::sleep(wait).await;
}

pub(super) async fn run<E: Engine + 'static>(
    plan: &Plan,
    engine: E,
    workload: &Workload,
    jsonl: &mut Option<RequestsJsonl>,
    progress: &mut Progress,
    mut interrupt: watch::Receiver<bool>,
) -> Result<DriverResult, RunError> {
    let domain = engine.clock_domain();
    let clock = Arc::new(MonotonicClock);
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let batch_tx = tx.clone();
    let batcher = Batcher::spawn_observed(
        engine,
        plan.batching.clone(),
        clock.clone(),
        Some(Box::new(move |b: &BatchRun| {
            let _ = batch_tx.send(Message::Batch(b.clone()));
        })),
    );

    progress.phase("loading engine", "");
    let b = batcher.clone();
    let started =
        tokio::task::spawn_blocking(move || b.preload()).await.map_err(|e| RunError::Internal(e.to_string()))?;
    let info = match started {
        Ok(info) => info,
        Err(e) => {
            let b = batcher.clone();
            let _ = tokio::task::spawn_blocking(move || b.shutdown()).await;
            return Err(RunError::Engine(crate::engine::EngineError::Start(e.to_string())));
        }
    };
    let death_watch = DeathWatch::arm(plan, &batcher);
    let anchor = Some(wall_anchor());

    let mut planner = StepPlanner::new(&plan.profile);
    let mut last_rps = None;
    let mut benchmarks = Vec::new();
    let mut next_request = 0;
    let mut interrupted = *interrupt.borrow();
    let mut incomplete = false;
    let mut abort_after_grace = interrupted.then(|| AbortAfterGrace::start(&batcher));

    while let Some(step) = planner.next_step(last_rps) {
        let mut run = StepRun::for_plan(step, plan, clock.now(), domain, anchor)?;
        if interrupted {
            run.interrupt(clock.now());
        }
        loop {
            while let Ok(msg) = rx.try_recv() {
                handle(&mut run, msg, jsonl)?;
            }
            let now = clock.now();
            run.show(progress, now);
            match run.poll(now) {
                Action::Submit(phase) => {
                    let request = workload.request(next_request);
                    next_request += 1;
                    let tx = tx.clone();
                    let complete = Box::new(move |id, outcome| {
                        let _ = tx.send(Message::Outcome(id, outcome, MonotonicClock::read()));
                    });
                    match batcher.submit_with(request, complete) {
                        Ok(id) => run.on_submitted(id, phase, now),
                        Err(e) => run.on_rejected(&e, now),
                    }
                }
                Action::Wait(until) => {
                    tokio::select! {
                        msg = rx.recv() => {
                            if let Some(msg) = msg {
                                handle(&mut run, msg, jsonl)?;
                            }
                        }
                        _ = async { if let Some(t) = until { sleep_until(t).await } else { std::future::pending::<()>().await } } => {}
                        changed = interrupt.changed(), if !interrupted => {
                            if changed.is_ok() && *interrupt.borrow() {
                                interrupted = true;
                                tracing::warn!("interrupted: no new requests; cancelling queued ones and draining the rest");
                                run.interrupt(clock.now());
                                let ids: Vec<_> = run.in_flight_ids().collect();
                                for id in ids {
                                    batcher.cancel(id);
                                }
                                abort_after_grace = Some(AbortAfterGrace::start(&batcher));
                            }
                        }
                    }
                }
                Action::Done => break,
            }
        }
        if run.finish_into(clock.now(), jsonl.as_mut(), &mut benchmarks)? {
            incomplete = true;
            break;
        }
        last_rps = benchmarks.last().and_then(|b| b.requests_per_s);
    }

    drop(abort_after_grace);
    death_watch.disarm();
    progress.phase("stopping engine", "");
    if let Err(e) = shutdown_bounded(&batcher).await {
        tracing::error!(error = %e, "engine shutdown failed");
    }
    Ok(DriverResult { engine: info, benchmarks, interrupted, incomplete })
}

fn handle(run: &mut StepRun, msg: Message, jsonl: &mut Option<RequestsJsonl>) -> Result<(), RunError> {
    match msg {
        Message::Outcome(id, outcome, at) => run.on_outcome(id, &outcome, at, jsonl.as_mut())?,
        Message::Batch(b) => run.on_batch(&b),
    }
    Ok(())
}
