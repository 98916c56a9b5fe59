//! A generate's result fanned out to its batch's requests: the batch found by its [`BatchId`], the
//! outputs matched to the requests by id or by position, never to the wrong one.

use super::super::error::RequestError;
use super::{BatchId, BatcherCore, Completion, Event, GenerateResult, RequestTimes};
use crate::engine::{EngineError, EngineOutput, RequestId};
use crate::time::Timestamp;

impl BatcherCore {
    /// The generate for `batch_id` returned (or failed, or panicked). Fans out one outcome to
    /// every request of that batch, whichever of the batches in flight it is and in whatever order
    /// they return. A result for a batch that is not in flight is ignored.
    pub fn handle_generate_result(&mut self, batch_id: BatchId, result: GenerateResult, now: Timestamp) {
        let Some(at) = self.in_flight.iter().position(|f| f.batch_id == batch_id) else { return };
        let f = self.in_flight.remove(at);
        self.stall.generate_returned(now);
        if f.abandoned {
            let late = now.saturating_since(f.dispatched_at);
            if self.failure.is_some() {
                tracing::warn!(batch_id, ?late, "the unusable engine returned from an abandoned generate");
            } else {
                tracing::warn!(batch_id, ?late, "the engine returned from an abandoned generate; batching resumes");
            }
            return;
        }
        self.stall.generate_took(now.saturating_since(f.dispatched_at));
        let batch_size = f.members.len();
        let failure = match result {
            GenerateResult::Outputs(outputs) => match match_outputs(batch_id, &f.members, outputs) {
                Ok(matched) => {
                    self.record(|| Event::BatchCompleted { at: now.as_nanos(), batch: batch_id });
                    for ((id, submitted), mut output) in f.members.iter().zip(matched) {
                        // A request that failed alone (one of an HTTP batch's several requests).
                        if let Some(error) = output.failure.take() {
                            self.outcomes.push_back((*id, Err(RequestError::Remote { batch_id, batch_size, error })));
                            continue;
                        }
                        let times = RequestTimes { submitted: *submitted, dispatched: f.dispatched_at, completed: now };
                        self.outcomes.push_back((*id, Ok(Completion { output, times, batch_id, batch_size })));
                    }
                    return;
                }
                Err(e) => e,
            },
            GenerateResult::Error(EngineError::Died(death)) => RequestError::EngineDied(death),
            GenerateResult::Error(EngineError::Remote(error)) => RequestError::Remote { batch_id, batch_size, error },
            GenerateResult::Error(e) => RequestError::Engine { batch_id, batch_size, message: e.to_string() },
            GenerateResult::Panicked(message) => RequestError::EnginePanicked { batch_id, batch_size, message },
        };
        tracing::error!(batch_id, batch_size, cause = %failure, "batch failed");
        self.record(|| Event::BatchFailed { at: now.as_nanos(), batch: batch_id, error: failure.to_string() });
        for (id, _) in f.members {
            self.outcomes.push_back((id, Err(failure.clone())));
        }
        if matches!(failure, RequestError::EngineDied(_)) {
            self.fail_for_good(failure, now);
        }
    }
}

/// Outputs in request order. By id when every output has one, else by position when none has;
/// anything else fails the whole batch: an output is never given to the wrong request.
fn match_outputs(
    batch_id: BatchId,
    members: &[(RequestId, Timestamp)],
    outputs: Vec<EngineOutput>,
) -> Result<Vec<EngineOutput>, RequestError> {
    if outputs.len() != members.len() {
        return Err(RequestError::OutputCountMismatch { batch_id, expected: members.len(), got: outputs.len() });
    }
    let with_ids = outputs.iter().filter(|o| o.request_id.is_some()).count();
    if with_ids == 0 {
        return Ok(outputs);
    }
    if with_ids != outputs.len() {
        return Err(RequestError::OutputIdMismatch {
            batch_id,
            detail: format!("{with_ids} of {} outputs carry a request id", outputs.len()),
        });
    }
    // Fast path: engines such as vLLM return outputs in input order.
    if outputs.iter().zip(members).all(|(o, m)| o.request_id == Some(m.0)) {
        return Ok(outputs);
    }
    let mut slots: Vec<Option<EngineOutput>> = (0..members.len()).map(|_| None).collect();
    let index: std::collections::HashMap<RequestId, usize> =
        members.iter().enumerate().map(|(i, m)| (m.0, i)).collect();
    for o in outputs {
        let id = o.request_id.unwrap_or_default();
        let Some(&i) = index.get(&id) else {
            return Err(RequestError::OutputIdMismatch {
                batch_id,
                detail: format!("output for unknown request {id}"),
            });
        };
        if slots[i].is_some() {
            return Err(RequestError::OutputIdMismatch { batch_id, detail: format!("two outputs for request {id}") });
        }
        slots[i] = Some(o);
    }
    // Equal counts and no duplicates: every slot is filled.
    slots
        .into_iter()
        .map(|s| s.ok_or_else(|| RequestError::OutputIdMismatch { batch_id, detail: "a request got no output".into() }))
        .collect()
}
