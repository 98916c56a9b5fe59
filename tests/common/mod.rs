//! Helpers shared by the integration tests.

use batchlab::engine::{EngineOutput, EngineRequest, FinishReason};

/// What a well-behaved engine answers: one output per request, in order, with its id and
/// `max_tokens` generated tokens, and no stats.
pub fn echo(batch: &[EngineRequest]) -> Vec<EngineOutput> {
    batch
        .iter()
        .map(|r| {
            EngineOutput::new(Some(r.id), FinishReason::Length).with_prompt_tokens(1).with_output_tokens(r.max_tokens)
        })
        .collect()
}
