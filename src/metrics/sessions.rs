//! A benchmark's sessions (`[workload.sessions]`): how they ended, their turns and durations,
//! the think times drawn, and TTFT and prefix-cache hit rate by turn index. Absent from a
//! benchmark without sessions.
//!
//! Sessions are counted over the whole benchmark (a session may begin in the warmup and end in
//! the measurement); the per-turn rows count measured completions only, like every latency.
//! Turn indices from [`LAST_TURN_ROW`] on share one row, so memory stays constant.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::distribution::{Distribution, Summary};
use crate::loadgen::sessions::{Ended, SessionEnd};

/// Turn indices at or above this share its row of [`SessionsResult::by_turn`].
pub const LAST_TURN_ROW: u32 = 32;

/// One turn index's measured completions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnRow {
    /// The 0-based turn index ([`LAST_TURN_ROW`]: that one and every later one).
    pub turn: u32,
    /// Measured turns of this index that completed.
    pub requests: u64,
    /// Their time to first token, ms.
    pub ttft_ms: Summary,
    /// Cached prompt tokens over prompt tokens, over those whose engine reported both.
    pub cache_hit_rate: Option<f64>,
}

/// A benchmark's sessions; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionsResult {
    /// Sessions started.
    pub started: u64,
    /// Sessions whose every turn was answered.
    pub completed: u64,
    /// Sessions ended by a failed (or refused) turn.
    pub failed: u64,
    /// Sessions ended because the next turn would not fit `max_context_tokens` (`end_session`).
    pub cut: u64,
    /// Sessions still going when the benchmark ended.
    pub unfinished: u64,
    /// User/reply pairs dropped from histories (`drop_oldest`), over every turn sent.
    pub dropped_turns: u64,
    /// Turns sent per ended session (completed, failed or cut), on average.
    pub turns_per_session: Option<f64>,
    /// The most turns one session sent.
    pub max_turns: u32,
    /// From a session's first submit to its last outcome, ms, over ended sessions.
    pub duration_ms: Summary,
    /// The think times drawn: their count and mean, ms.
    pub think_times: u64,
    /// See `think_times`.
    pub think_time_mean_ms: Option<f64>,
    /// By turn index.
    pub by_turn: Vec<TurnRow>,
}

#[derive(Clone, Debug, Default)]
struct TurnTally {
    ttft: Distribution,
    requests: u64,
    cached: u64,
    prompt: u64,
}

/// Sums a [`SessionsResult`].
#[derive(Clone, Debug, Default)]
pub struct SessionTally {
    ended: [u64; 3],
    turns_sum: u64,
    max_turns: u32,
    durations: Distribution,
    by_turn: Vec<TurnTally>,
}

impl SessionTally {
    /// A session that ended.
    pub fn record_ended(&mut self, ended: Ended) {
        let i = match ended.end {
            SessionEnd::Completed => 0,
            SessionEnd::Failed => 1,
            SessionEnd::Cut => 2,
        };
        self.ended[i] += 1;
        self.turns_sum += u64::from(ended.turns);
        self.max_turns = self.max_turns.max(ended.turns);
        self.durations.record(ended.duration);
    }

    /// A measured turn of index `turn` completed: its TTFT, and its cached and prompt tokens as
    /// the engine reported them.
    pub fn record_turn(&mut self, turn: u32, ttft: Option<Duration>, cached: Option<u32>, prompt: Option<u32>) {
        let row = turn.min(LAST_TURN_ROW) as usize;
        if self.by_turn.len() <= row {
            self.by_turn.resize_with(row + 1, TurnTally::default);
        }
        let t = &mut self.by_turn[row];
        t.requests += 1;
        if let Some(ttft) = ttft {
            t.ttft.record(ttft);
        }
        if let (Some(cached), Some(prompt)) = (cached, prompt) {
            t.cached += u64::from(cached);
            t.prompt += u64::from(prompt);
        }
    }

    /// The result: `started` sessions, `unfinished` still going, `dropped` user/reply pairs, and
    /// the think times drawn (their sum in seconds and count).
    pub fn finish(&self, started: u64, unfinished: u64, dropped: u64, think: (f64, u64)) -> SessionsResult {
        let ended: u64 = self.ended.iter().sum();
        let mut duration_ms = self.durations.summary();
        duration_ms.histogram = None;
        SessionsResult {
            started,
            completed: self.ended[0],
            failed: self.ended[1],
            cut: self.ended[2],
            unfinished,
            dropped_turns: dropped,
            turns_per_session: (ended > 0).then(|| self.turns_sum as f64 / ended as f64),
            max_turns: self.max_turns,
            duration_ms,
            think_times: think.1,
            think_time_mean_ms: (think.1 > 0).then(|| think.0 / think.1 as f64 * 1e3),
            by_turn: self
                .by_turn
                .iter()
                .enumerate()
                .filter(|(_, t)| t.requests > 0)
                .map(|(i, t)| {
                    let mut ttft_ms = t.ttft.summary();
                    ttft_ms.histogram = None;
                    TurnRow {
                        turn: i as u32,
                        requests: t.requests,
                        ttft_ms,
                        cache_hit_rate: (t.prompt > 0).then(|| t.cached as f64 / t.prompt as f64),
                    }
                })
                .collect(),
        }
    }
}
