//! [`PlanRunner`]: several plans, each a run of its own (its own report and files), on one engine
//! start. A `[matrix]` plan is the other way to run several plans on one start, as one run with
//! one report (its combinations are segments of the one step loop, [`super::driver`]); use a
//! `PlanRunner` when each plan needs its own report, or when the caller does work of its own
//! between the runs (calibrate's design, the fidelity bench).

use super::{RunError, RunOptions, RunSummary, run_blocking, run_with_blocking};
use crate::engine::TimedEngine;
use crate::engine::shared::SharedEngine;
#[cfg(doc)]
use crate::scenario::plan::EnginePlan;
use crate::scenario::plan::Plan;

/// Runs plans on one engine: a real-time engine started once and shared by every plan
/// ([`SharedEngine`]); a virtual-time engine rebuilt from each plan (it starts in no time).
pub struct PlanRunner {
    shared: Option<SharedEngine>,
}

impl PlanRunner {
    /// A runner for `engine` (from [`EnginePlan::build`]).
    pub fn new(engine: TimedEngine) -> Self {
        match engine {
            TimedEngine::RealTime(e) => PlanRunner { shared: Some(SharedEngine::new(e)) },
            TimedEngine::VirtualTime(_) => PlanRunner { shared: None },
        }
    }

    /// Runs `plan`: on the shared engine, or on the plan's own virtual-time engine.
    pub fn run(&mut self, plan: &Plan, options: RunOptions) -> Result<RunSummary, RunError> {
        match &self.shared {
            Some(shared) => run_with_blocking(plan, shared.handle(), options),
            None => run_blocking(plan, options),
        }
    }

    /// Shuts the shared engine down.
    pub fn finish(mut self) -> Result<(), RunError> {
        match self.shared.take() {
            Some(shared) => shared.shutdown().map_err(RunError::from),
            None => Ok(()),
        }
    }
}
