//! Helpers shared by the integration tests.

use batchlab::engine::{EngineOutput, EngineRequest, EngineStats, FinishReason};

/// What a well-behaved engine answers: one output per request, in order, with its id and
/// `max_tokens` generated tokens, and no stats.
pub fn echo(batch: &[EngineRequest]) -> Vec<EngineOutput> {
    batch
        .iter()
        .map(|r| EngineOutput {
            request_id: Some(r.id),
            prompt_tokens: Some(1),
            output_tokens: Some(r.max_tokens),
            output_token_ids: None,
            text: None,
            finish_reason: FinishReason::Length,
            stats: EngineStats::default(),
        })
        .collect()
}
