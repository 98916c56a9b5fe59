//! The deterministic simulated engine.
//!
//! It exists so that everything above the [`Engine`] boundary can be tested and benchmarked
//! without Python or a model: a cost model (fixed overhead, prefill per prompt token, decode per
//! step and per running sequence, a `max_num_seqs` limit) produces timings in the same shape vLLM
//! reports, and fault injection produces every failure a real engine can. All randomness comes from
//! the seed, the batch number and the request id, so a seed always gives the same run. With a
//! [`VirtualClock`](crate::time::VirtualClock) no wall time passes at all.

pub mod config;
mod cost;

use std::sync::Arc;
use std::time::Duration;

pub use config::{CostModel, FaultTrigger, Faults, SimConfig, TimeMode};

use crate::engine::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats, FinishReason, TimedEngine,
    VirtualTimeEngine,
};
use crate::rng::SplitMix64;
use crate::time::{Clock, MonotonicClock, VirtualClock, WallAnchor};

/// Which injected fault a batch gets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum BatchFault {
    None,
    Panic,
    Hang,
    Fail,
    ShortOutput,
    ExtraOutput,
    WrongId,
}

/// The simulated engine. See the module docs.
pub struct SimEngine {
    config: SimConfig,
    clock: Arc<dyn Clock>,
    anchor: WallAnchor,
    batches: u64,
    started: bool,
}

impl SimEngine {
    /// An engine in real time: it sleeps on [`MonotonicClock`], anchored on the wall clock now.
    /// `config.time` is not looked at; [`SimEngine::timed`] honours it.
    pub fn new(config: SimConfig) -> Self {
        SimEngine::on_clock(config, Arc::new(MonotonicClock), WallAnchor::now())
    }

    /// An engine that passes time on `clock`, whose wall-clock times derive from `anchor`.
    pub fn on_clock(config: SimConfig, clock: Arc<dyn Clock>, anchor: WallAnchor) -> Self {
        SimEngine { config, clock, anchor, batches: 0, started: false }
    }

    /// An engine in the time `config.time` names.
    pub fn timed(config: SimConfig) -> TimedEngine {
        match config.time {
            TimeMode::Real => TimedEngine::real_time(SimEngine::new(config)),
            TimeMode::Virtual => TimedEngine::virtual_time(SimEngine::new(config)),
        }
    }

    /// An engine on a fresh virtual clock, and that clock.
    pub fn virtual_time(config: SimConfig) -> (Self, VirtualClock) {
        let clock = VirtualClock::new();
        let mut engine = SimEngine::new(config);
        engine.use_virtual_clock(clock.clone());
        (engine, clock)
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    fn fires(trigger: &FaultTrigger, batch_no: u64, rng: &mut SplitMix64) -> bool {
        let by_count = trigger.every.is_some_and(|n| n > 0 && batch_no % n == 0);
        // Draw even when the count fires, so one trigger's settings never shift another's draws.
        let by_chance = rng.chance(trigger.probability);
        by_count || by_chance
    }

    fn pick_fault(&self, batch_no: u64, rng: &mut SplitMix64) -> (BatchFault, bool) {
        let f = &self.config.faults;
        let order = [
            (&f.panic, BatchFault::Panic),
            (&f.hang, BatchFault::Hang),
            (&f.fail_batch, BatchFault::Fail),
            (&f.short_output, BatchFault::ShortOutput),
            (&f.extra_output, BatchFault::ExtraOutput),
            (&f.wrong_id, BatchFault::WrongId),
        ];
        let mut chosen = BatchFault::None;
        for (trigger, fault) in order {
            if Self::fires(trigger, batch_no, rng) && chosen == BatchFault::None {
                chosen = fault;
            }
        }
        let slow = Self::fires(&f.slow, batch_no, rng);
        (chosen, slow)
    }
}

impl Engine for SimEngine {
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        if !self.config.faults.start_delay.is_zero() {
            self.clock.sleep(self.config.faults.start_delay);
        }
        if self.config.faults.start_fails {
            return Err(EngineError::Start("injected start failure".into()));
        }
        self.started = true;
        Ok(EngineInfo { name: "sim".into(), version: env!("CARGO_PKG_VERSION").into() })
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        if !self.started {
            return Err(EngineError::Generate("generate before start".into()));
        }
        self.batches += 1;
        let batch_no = self.batches;
        let mut rng = SplitMix64::derive(self.config.seed, batch_no);
        let (fault, slow) = self.pick_fault(batch_no, &mut rng);
        match fault {
            BatchFault::Panic => panic!("injected panic (generate call {batch_no})"),
            BatchFault::Hang => {
                self.clock.sleep(self.config.faults.hang_for);
                return Err(EngineError::Generate(format!(
                    "injected hang of {:?} (generate call {batch_no})",
                    self.config.faults.hang_for
                )));
            }
            BatchFault::Fail => {
                return Err(EngineError::Generate(format!("injected failure (generate call {batch_no})")));
            }
            _ => {}
        }

        let start = self.clock.now();
        let scale = if slow { self.config.faults.slow_factor.max(1.0) } else { 1.0 };
        let timeline = cost::simulate(&self.config.cost, self.config.seed, batch, scale);
        let secs = |offset: Duration| start.saturating_add(offset).as_secs_f64();
        let arrival_wall = self.anchor.wall_secs + start.saturating_since(self.anchor.mono).as_secs_f64();

        let mut outputs: Vec<EngineOutput> = batch
            .iter()
            .zip(&timeline.requests)
            .map(|(req, t)| EngineOutput {
                request_id: Some(req.id),
                prompt_tokens: Some(t.prompt_tokens),
                output_tokens: Some(t.output_tokens),
                output_token_ids: None,
                text: None,
                finish_reason: if t.output_tokens >= req.max_tokens {
                    FinishReason::Length
                } else {
                    FinishReason::Stop
                },
                stats: EngineStats {
                    arrival_wall: Some(arrival_wall),
                    queued_ts: Some(secs(Duration::ZERO)),
                    scheduled_ts: Some(secs(t.scheduled)),
                    first_token_ts: t.first_token.map(secs),
                    last_token_ts: t.last_token.map(secs),
                },
            })
            .collect();
        self.clock.sleep(timeline.total);

        match fault {
            BatchFault::ShortOutput => {
                outputs.pop();
            }
            BatchFault::ExtraOutput => {
                if let Some(last) = outputs.last().cloned() {
                    outputs.push(last);
                }
            }
            BatchFault::WrongId => {
                let stranger = batch.iter().map(|r| r.id).max().unwrap_or(0).wrapping_add(1);
                if let Some(first) = outputs.first_mut() {
                    first.request_id = Some(stranger);
                }
            }
            _ => {}
        }
        Ok(outputs)
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.started = false;
        Ok(())
    }
}

impl VirtualTimeEngine for SimEngine {
    fn use_virtual_clock(&mut self, clock: VirtualClock) {
        self.clock = Arc::new(clock);
        self.anchor = WallAnchor::VIRTUAL;
    }
}

#[cfg(test)]
mod tests;
