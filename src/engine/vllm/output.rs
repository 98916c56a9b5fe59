//! vLLM's outputs, flattened by `glue.py`, mapped onto [`EngineOutput`]. Pure: no Python here, so
//! the mapping is tested by the default test suite.

use crate::engine::{EngineOutput, EngineStats, FinishReason};

/// One `RequestOutput` as `glue.py` flattens it: plain values, every one optional where vLLM may
/// omit it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawOutput {
    /// vLLM's request id (its own counter, not ours).
    pub request_id: String,
    pub prompt_tokens: Option<usize>,
    pub token_ids: Option<Vec<u32>>,
    pub text: Option<String>,
    /// `"length"`, `"stop"`, `"abort"` or `None` while unfinished.
    pub finish_reason: Option<String>,
    /// Wall-clock seconds since the epoch.
    pub arrival_time: Option<f64>,
    /// `CLOCK_MONOTONIC` seconds.
    pub queued_ts: Option<f64>,
    pub scheduled_ts: Option<f64>,
    pub first_token_ts: Option<f64>,
    pub last_token_ts: Option<f64>,
}

/// Maps one flattened output. `request_id` stays `None`: vLLM numbers requests itself and returns
/// them in input order, so the batcher matches outputs by position.
pub(crate) fn map_output(raw: RawOutput) -> EngineOutput {
    let output_tokens = raw.token_ids.as_ref().map(|ids| u32::try_from(ids.len()).unwrap_or(u32::MAX));
    EngineOutput {
        request_id: None,
        prompt_tokens: raw.prompt_tokens.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        output_tokens,
        output_token_ids: raw.token_ids,
        text: raw.text,
        finish_reason: finish_reason(raw.finish_reason.as_deref()),
        stats: EngineStats {
            arrival_wall: set(raw.arrival_time),
            queued_ts: set(raw.queued_ts),
            scheduled_ts: set(raw.scheduled_ts),
            first_token_ts: set(raw.first_token_ts),
            last_token_ts: set(raw.last_token_ts),
        },
    }
}

fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("stop") => FinishReason::Stop,
        Some("abort") => FinishReason::Abort,
        Some(other) => FinishReason::Other(other.to_owned()),
        None => FinishReason::Unknown,
    }
}

/// vLLM's `RequestStateStats` starts every timestamp at `0.0` and leaves it there when the event
/// never happened: that is "absent", not the epoch of the clock. Anything else (NaN included) is
/// passed on as sent, for the metrics mapper to judge.
fn set(value: Option<f64>) -> Option<f64> {
    value.filter(|v| *v != 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: RawOutput, expected: EngineOutput) {
        assert_eq!(map_output(raw), expected);
    }

    #[test]
    fn a_full_output_maps_every_field() {
        check(
            RawOutput {
                request_id: "7".into(),
                prompt_tokens: Some(3),
                token_ids: Some(vec![5, 6]),
                text: Some("ab".into()),
                finish_reason: Some("length".into()),
                arrival_time: Some(1.7e9),
                queued_ts: Some(10.0),
                scheduled_ts: Some(10.5),
                first_token_ts: Some(11.0),
                last_token_ts: Some(12.0),
            },
            EngineOutput {
                request_id: None,
                prompt_tokens: Some(3),
                output_tokens: Some(2),
                output_token_ids: Some(vec![5, 6]),
                text: Some("ab".into()),
                finish_reason: FinishReason::Length,
                stats: EngineStats {
                    arrival_wall: Some(1.7e9),
                    queued_ts: Some(10.0),
                    scheduled_ts: Some(10.5),
                    first_token_ts: Some(11.0),
                    last_token_ts: Some(12.0),
                },
            },
        );
    }

    #[test]
    fn missing_values_stay_missing_and_zero_timestamps_are_absent() {
        let raw = RawOutput {
            finish_reason: None,
            queued_ts: Some(0.0),
            first_token_ts: Some(f64::NAN),
            ..RawOutput::default()
        };
        let out = map_output(raw);
        assert_eq!(out.finish_reason, FinishReason::Unknown);
        assert_eq!((out.prompt_tokens, out.output_tokens, out.output_token_ids), (None, None, None));
        assert_eq!(out.stats.queued_ts, None);
        assert!(out.stats.first_token_ts.is_some_and(f64::is_nan), "NaN is passed on for the mapper to judge");
    }

    #[test]
    fn finish_reasons() {
        for (given, expected) in [
            (Some("stop"), FinishReason::Stop),
            (Some("abort"), FinishReason::Abort),
            (Some("repetition"), FinishReason::Other("repetition".into())),
            (None, FinishReason::Unknown),
        ] {
            assert_eq!(finish_reason(given), expected, "{given:?}");
        }
    }
}
