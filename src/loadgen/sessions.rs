//! Live multi-turn sessions (`[workload.sessions]`): chains of turns whose prompts carry the
//! history, as a sans-IO state machine.
//!
//! A session is a chain of turns. Turn `k`'s prompt is the session's history (the system prompt,
//! then each earlier user turn and the reply the engine *actually* returned for it) followed by
//! the new user turn. The next turn exists only once the previous reply is complete, so a
//! session's turns never share a batch.
//!
//! [`Sessions`] never reads a clock and never does IO. The step that drives it says when a
//! session may start ([`Sessions::start`]) and when a queued turn may go ([`Sessions::take_due`],
//! [`Sessions::take_queued`]); it reports what became of each turn ([`Sessions::on_submitted`],
//! [`Sessions::on_reply`], [`Sessions::on_failed`]), with `now`.
//!
//! **Turns.** A synthetic session draws its number of user turns from `turns` and each user
//! turn's length from the workload's `prompt_tokens`, its `max_tokens` from `output_tokens`, all
//! from a random stream of `(workload seed, session)`, so a session is the same whatever order its
//! turns run in. A token workload sends token ids (the first turn's first ids spell the session's
//! number, so sessions share no prefix); a chat workload (`chat = true`) sends messages of
//! pseudo-words through `request_format`. A file workload's conversations (ShareGPT, JSONL
//! `messages`) are replayed instead: session `i` takes conversation `i mod n`, its leading system
//! messages and then its user turns one by one (the file's assistant turns are left out), each
//! asking for the entry's `max_tokens`.
//!
//! **Replies.** The reply appended is the engine's own: its token ids (a token workload) or its
//! text (a chat workload). An engine that returns neither (the simulator has no vocabulary) gets
//! a stand-in of exactly its `output_tokens`, drawn from the session's stream, so the history
//! grows by what the engine counted.
//!
//! **Context.** With `max_context_tokens`, a turn whose prompt plus its `max_tokens` would not
//! fit either ends the session there (`end_session`, vLLM's bench; counted as cut) or drops the
//! oldest user/reply pairs until it fits (`drop_oldest`, inference-perf; counted in
//! `dropped_turns`). Tokens are counted as the session sends them: token ids one each, text by
//! batchlab's four-byte rule (the template's own tokens are the engine's).
//!
//! **Think time.** After a reply, the next turn waits a think time drawn from `think_time`
//! (fixed or exponential with that mean). `after_reply` sends it when the think time is over;
//! `rate_tick` queues it then, and it goes at the profile's next arrival, before a new session.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde::Serialize;

use super::error::LoadError;
use super::jsonl::LinePrompt;
use super::workload::{TokenDist, Workload, WorkloadSpec, draw_tokens, generated_request};
use crate::engine::chat::{Message, RequestFormat};
use crate::engine::tokens::text_tokens;
use crate::engine::{EngineRequest, Prompt, RequestId};
use crate::rng::SplitMix64;
use crate::time::Timestamp;

/// When a session's next turn is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NextTurn {
    /// When the reply is complete and the think time over (vLLM's bench, guidellm).
    #[default]
    AfterReply,
    /// Queued after the reply and the think time, sent at the profile's next arrival before any
    /// new session (AIPerf's request-rate mode).
    RateTick,
}

/// What a turn that would overflow `max_context_tokens` does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextFull {
    /// The session ends before that turn (vLLM's bench cuts conversations at `--max-model-len`).
    #[default]
    EndSession,
    /// The oldest user/reply pairs leave the history until the turn fits (inference-perf).
    DropOldest,
}

/// How think times are drawn around their mean.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkDist {
    /// Always the mean (vLLM's `--multi-turn-delay-ms`).
    #[default]
    Fixed,
    /// Exponential with that mean (a user who acts at random).
    Exponential,
}

/// `[workload.sessions]`: see the module docs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionSpec {
    /// User turns per synthetic session.
    pub turns: TokenDist,
    /// Mean think time between a reply and the next turn.
    pub think_time: Duration,
    /// How think times are drawn around `think_time`.
    pub think_time_dist: ThinkDist,
    /// The longest prompt plus `max_tokens` a turn may have; `None`: unbounded.
    pub max_context_tokens: Option<u32>,
    /// What a turn that would not fit does.
    pub context_full: ContextFull,
    /// When the next turn goes.
    pub next_turn: NextTurn,
}

impl Default for SessionSpec {
    fn default() -> Self {
        SessionSpec {
            turns: TokenDist::Fixed { value: 4 },
            think_time: Duration::ZERO,
            think_time_dist: ThinkDist::Fixed,
            max_context_tokens: None,
            context_full: ContextFull::EndSession,
            next_turn: NextTurn::AfterReply,
        }
    }
}

/// One turn to submit: its request and where it stands in its session.
#[derive(Clone, Debug)]
pub struct Turn {
    /// The session's number (unique over the engine's life: the step's first request id plus
    /// its 0-based session index).
    pub session: u64,
    /// The turn's 0-based index in its session.
    pub turn: u32,
    /// Tokens of the history before the new user turn, as the session counts them.
    pub history_tokens: u32,
    /// User/reply pairs dropped from the history so far (`drop_oldest`).
    pub dropped_turns: u32,
    /// When the turn was meant to go: the reply's end plus the think time; `None` for a first
    /// turn (the profile dates it).
    pub due: Option<Timestamp>,
    /// The request.
    pub request: EngineRequest<()>,
}

/// What an engine returned for a turn.
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    /// Its text, if it returns text.
    pub text: Option<&'a str>,
    /// Its token ids, if it returns them.
    pub token_ids: Option<&'a [u32]>,
    /// Its count of generated tokens.
    pub output_tokens: Option<u32>,
}

/// How a session ended, for the report.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// Every turn was answered.
    Completed,
    /// A turn failed (or was refused).
    Failed,
    /// The next turn would not fit `max_context_tokens` (`end_session`).
    Cut,
}

/// A session that ended, with its turns and its duration (first submit to last outcome).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// How.
    pub end: SessionEnd,
    /// Turns submitted.
    pub turns: u32,
    /// From its first turn's submit to its last outcome.
    pub duration: Duration,
}

/// The sessions' content: drawn token ids or pseudo-words, or a file's conversations.
#[derive(Clone, Debug)]
enum Content {
    Tokens {
        vocab: u32,
    },
    Chat {
        system: Vec<Message>,
        format: RequestFormat,
    },
    /// Session `i` replays conversation `i mod n`: its system messages, then its user turns.
    File {
        conversations: Vec<Conversation>,
        format: RequestFormat,
    },
}

/// A file's conversation as a session replays it.
#[derive(Clone, Debug)]
struct Conversation {
    system: Vec<Message>,
    users: Vec<String>,
    max_tokens: u32,
}

/// One piece of history: a user turn and its reply, as sent.
#[derive(Clone, Debug)]
enum Piece {
    Ids(Vec<u32>),
    Text(String),
}

impl Piece {
    fn tokens(&self) -> u32 {
        let n = match self {
            Piece::Ids(ids) => ids.len(),
            Piece::Text(text) => text_tokens(text),
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

#[derive(Clone, Debug)]
struct Session {
    seed: u64,
    turns: u32,
    /// The next turn's index.
    next: u32,
    /// (user turn, reply) pairs still in the history.
    history: VecDeque<(Piece, Piece)>,
    dropped: u32,
    started: Option<Timestamp>,
    /// The user turn in flight, kept until its reply arrives.
    asked: Option<Piece>,
}

/// Sub-streams of a session's random stream.
const STREAM_TURNS: u64 = 1;
const STREAM_USER_LEN: u64 = 1 << 20;
const STREAM_OUTPUT_LEN: u64 = 2 << 20;
const STREAM_USER_TEXT: u64 = 3 << 20;
const STREAM_REPLY: u64 = 4 << 20;
const STREAM_THINK: u64 = 5 << 20;
/// The workload seed's stream the sessions derive from.
const STREAM_SESSIONS: u64 = 0x5e55;
/// Distinct three-letter pseudo-words (one token each with the following space).
const WORDS: u64 = 26 * 26 * 26;

/// Every session of one benchmark; see the module docs.
#[derive(Clone, Debug)]
pub struct Sessions {
    spec: SessionSpec,
    content: Content,
    prompt_tokens: TokenDist,
    output_tokens: TokenDist,
    seed: u64,
    ignore_eos: bool,
    temperature: f32,
    /// Session numbers start here.
    base: u64,
    started: u64,
    active: BTreeMap<u64, Session>,
    /// Turns waiting for their think time, by due time (then session).
    thinking: BTreeSet<(Timestamp, u64)>,
    /// `rate_tick`: turns whose think time is over, oldest first.
    queued: VecDeque<(Timestamp, u64)>,
    in_flight: BTreeMap<RequestId, u64>,
    /// Sessions that ended, not yet taken by [`Sessions::poll_ended`].
    ended: VecDeque<Ended>,
    think_drawn: (f64, u64),
    /// User/reply pairs dropped from every session's history (`drop_oldest`).
    dropped: u64,
}

impl Sessions {
    /// The sessions of a benchmark of `workload` (built from `plan`) whose first request will be
    /// `base` (session numbers start there, so no two benchmarks on one engine share a session or
    /// a prefix). A file workload's entries must all be conversations (`messages`, ShareGPT).
    pub fn new(spec: &SessionSpec, plan: &WorkloadSpec, workload: &Workload, base: u64) -> Result<Sessions, LoadError> {
        if let (WorkloadSpec::File { ignore_eos, temperature, .. }, Some((lines, default_max, format))) =
            (plan, workload.file_entries())
        {
            let mut conversations = Vec::with_capacity(lines.len());
            for (i, line) in lines.iter().enumerate() {
                let LinePrompt::Chat(messages) = &line.prompt else {
                    return Err(LoadError::SessionsNeedConversations { entry: i });
                };
                let system = messages.iter().take_while(|m| m.role == "system").cloned().collect();
                let users = messages.iter().filter(|m| m.role == "user").map(|m| m.content.clone()).collect();
                conversations.push(Conversation { system, users, max_tokens: line.max_tokens.unwrap_or(default_max) });
            }
            return Ok(Sessions::with_content(
                spec,
                Content::File { conversations, format: format.clone() },
                (TokenDist::Fixed { value: 1 }, TokenDist::Fixed { value: 1 }, 0),
                (*ignore_eos, *temperature),
                base,
            ));
        }
        let WorkloadSpec::Synthetic {
            prompt_tokens,
            output_tokens,
            seed,
            vocab_size,
            ignore_eos,
            temperature,
            chat,
            request_format,
            ..
        } = plan
        else {
            return Err(LoadError::SessionsNeedConversations { entry: 0 });
        };
        if *vocab_size == 0 {
            return Err(LoadError::EmptyVocab);
        }
        let content = if chat.enabled {
            let system = chat.system_prompt.iter().map(|s| Message::new("system", s.clone())).collect();
            Content::Chat { system, format: request_format.clone() }
        } else {
            Content::Tokens { vocab: *vocab_size }
        };
        Ok(Sessions::with_content(
            spec,
            content,
            (prompt_tokens.clone(), output_tokens.clone(), *seed),
            (*ignore_eos, *temperature),
            base,
        ))
    }

    fn with_content(
        spec: &SessionSpec,
        content: Content,
        (prompt_tokens, output_tokens, seed): (TokenDist, TokenDist, u64),
        (ignore_eos, temperature): (bool, f32),
        base: u64,
    ) -> Sessions {
        Sessions {
            spec: spec.clone(),
            content,
            prompt_tokens,
            output_tokens,
            seed: SplitMix64::derive(seed, STREAM_SESSIONS).next_u64(),
            ignore_eos,
            temperature,
            base,
            started: 0,
            active: BTreeMap::new(),
            thinking: BTreeSet::new(),
            queued: VecDeque::new(),
            in_flight: BTreeMap::new(),
            ended: VecDeque::new(),
            think_drawn: (0.0, 0),
            dropped: 0,
        }
    }

    /// The settings.
    pub fn spec(&self) -> &SessionSpec {
        &self.spec
    }

    /// Sessions started and not ended: what `concurrency` counts.
    pub fn active(&self) -> usize {
        self.active.len()
    }

    /// Sessions started so far.
    pub fn started(&self) -> u64 {
        self.started
    }

    /// User/reply pairs dropped from histories so far (`drop_oldest`).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The sum of the think times drawn so far, in seconds, and how many, for the report.
    pub fn think_times(&self) -> (f64, u64) {
        self.think_drawn
    }

    /// A new session's first turn; `None` when it does not fit `max_context_tokens` (the
    /// session is then counted as cut; `batchlab check` refuses such a limit).
    pub fn start(&mut self) -> Option<Turn> {
        let number = self.base + self.started;
        self.started += 1;
        let seed = SplitMix64::derive(self.seed, number).next_u64();
        let turns = match &self.content {
            Content::File { conversations, .. } => {
                conversations.get(self.conversation(number)).map_or(1, |c| c.users.len().max(1) as u32)
            }
            _ => draw_tokens(&self.spec.turns, &mut SplitMix64::derive(seed, STREAM_TURNS)),
        };
        let session =
            Session { seed, turns, next: 0, history: VecDeque::new(), dropped: 0, started: None, asked: None };
        self.active.insert(number, session);
        self.turn_of(number, None)
    }

    /// The conversation session `number` replays (file sessions).
    fn conversation(&self, number: u64) -> usize {
        match &self.content {
            Content::File { conversations, .. } => ((number - self.base) % conversations.len().max(1) as u64) as usize,
            _ => 0,
        }
    }

    /// `after_reply`: the earliest turn whose think time is over at `now`, if any.
    pub fn take_due(&mut self, now: Timestamp) -> Option<Turn> {
        let &(due, number) = self.thinking.first().filter(|(due, _)| *due <= now)?;
        self.thinking.remove(&(due, number));
        self.turn_of(number, Some(due))
    }

    /// `rate_tick`: the oldest turn whose think time is over at `now`, if any (moved to the
    /// queue first).
    pub fn take_queued(&mut self, now: Timestamp) -> Option<Turn> {
        self.queue_thought(now);
        let (due, number) = self.queued.pop_front()?;
        self.turn_of(number, Some(due))
    }

    /// `rate_tick`: whether a turn is queued at `now` (its think time over).
    pub fn has_queued(&mut self, now: Timestamp) -> bool {
        self.queue_thought(now);
        !self.queued.is_empty()
    }

    fn queue_thought(&mut self, now: Timestamp) {
        while let Some(&(due, number)) = self.thinking.first().filter(|(due, _)| *due <= now) {
            self.thinking.remove(&(due, number));
            self.queued.push_back((due, number));
        }
    }

    /// When the next think time ends, if a turn is thinking.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.thinking.first().map(|(due, _)| *due)
    }

    /// The turn of session `number` that is next, or `None` when it does not fit and ends the
    /// session (cut).
    fn turn_of(&mut self, number: u64, due: Option<Timestamp>) -> Option<Turn> {
        let conversation = self.conversation(number);
        let session = self.active.get_mut(&number)?;
        let k = session.next;
        let user_len =
            draw_tokens(&self.prompt_tokens, &mut SplitMix64::derive(session.seed, STREAM_USER_LEN + u64::from(k)));
        let mut max_tokens =
            draw_tokens(&self.output_tokens, &mut SplitMix64::derive(session.seed, STREAM_OUTPUT_LEN + u64::from(k)));
        let mut rng = SplitMix64::derive(session.seed, STREAM_USER_TEXT + u64::from(k));
        let spell = if k == 0 { Some(number) } else { None };
        let user = match &self.content {
            Content::Tokens { vocab } => Piece::Ids(ids(*vocab, user_len as usize, spell, &mut rng)),
            Content::Chat { .. } => Piece::Text(words(user_len as usize, spell, &mut rng)),
            Content::File { conversations, .. } => {
                let c = &conversations[conversation];
                max_tokens = c.max_tokens;
                Piece::Text(c.users.get(k as usize).cloned().unwrap_or_default())
            }
        };
        let system = match &self.content {
            Content::Chat { system, .. } => system.as_slice(),
            Content::File { conversations, .. } => conversations[conversation].system.as_slice(),
            Content::Tokens { .. } => &[],
        };
        let system_tokens = system.iter().map(|m| text_tokens(&m.content)).sum::<usize>();
        let system_tokens = u32::try_from(system_tokens).unwrap_or(u32::MAX);
        let history_len =
            |h: &VecDeque<(Piece, Piece)>| h.iter().map(|(u, r)| u.tokens().saturating_add(r.tokens())).sum::<u32>();
        if let Some(limit) = self.spec.max_context_tokens {
            let needs = |h: &VecDeque<(Piece, Piece)>| {
                system_tokens.saturating_add(history_len(h)).saturating_add(user.tokens()).saturating_add(max_tokens)
            };
            let mut cut = false;
            while needs(&session.history) > limit {
                if self.spec.context_full == ContextFull::DropOldest && !session.history.is_empty() {
                    session.history.pop_front();
                    session.dropped += 1;
                    self.dropped += 1;
                } else {
                    cut = true;
                    break;
                }
            }
            if cut {
                self.end(number, SessionEnd::Cut, due);
                return None;
            }
        }
        let history_tokens = system_tokens.saturating_add(history_len(&session.history));
        let prompt = match &self.content {
            Content::Tokens { .. } => {
                let mut all = Vec::new();
                for (u, r) in &session.history {
                    for piece in [u, r] {
                        if let Piece::Ids(i) = piece {
                            all.extend_from_slice(i);
                        }
                    }
                }
                if let Piece::Ids(i) = &user {
                    all.extend_from_slice(i);
                }
                Prompt::Tokens(all)
            }
            Content::Chat { format, .. } | Content::File { format, .. } => {
                let mut messages = Vec::with_capacity(2 * session.history.len() + 1 + system.len());
                messages.extend_from_slice(system);
                for (u, r) in &session.history {
                    messages.push(Message::new("user", piece_text(u)));
                    messages.push(Message::new("assistant", piece_text(r)));
                }
                messages.push(Message::new("user", piece_text(&user)));
                format.prompt(messages)
            }
        };
        session.asked = Some(user);
        Some(Turn {
            session: number,
            turn: k,
            history_tokens,
            dropped_turns: session.dropped,
            due,
            request: generated_request(prompt, max_tokens, self.ignore_eos, self.temperature, Some(number)),
        })
    }

    /// The turn of session `session` was submitted at `now` as `id`.
    pub fn on_submitted(&mut self, session: u64, id: RequestId, now: Timestamp) {
        if let Some(s) = self.active.get_mut(&session) {
            s.started.get_or_insert(now);
            s.next += 1;
            self.in_flight.insert(id, session);
        }
    }

    /// The turn of session `session` was refused by the batcher at `now`: the session fails.
    pub fn on_refused(&mut self, session: u64, now: Timestamp) {
        self.end(session, SessionEnd::Failed, Some(now));
    }

    /// Request `id`'s reply arrived at `now`: its session goes on after a think time, or ends
    /// when that was its last turn. Returns whether `id` was a session's turn.
    pub fn on_reply(&mut self, id: RequestId, reply: Reply<'_>, now: Timestamp) -> bool {
        let Some(number) = self.in_flight.remove(&id) else { return false };
        let Some(session) = self.active.get_mut(&number) else { return true };
        let k = session.next.saturating_sub(1);
        let count = reply.output_tokens.unwrap_or(0) as usize;
        let mut rng = SplitMix64::derive(session.seed, STREAM_REPLY + u64::from(k));
        let answer = match &self.content {
            Content::Tokens { vocab } => Piece::Ids(match reply.token_ids {
                Some(ids) => ids.to_vec(),
                None => ids(*vocab, count, None, &mut rng),
            }),
            Content::Chat { .. } | Content::File { .. } => Piece::Text(match reply.text {
                Some(text) => text.to_owned(),
                None => words(count, None, &mut rng),
            }),
        };
        if let Some(user) = session.asked.take() {
            session.history.push_back((user, answer));
        }
        if session.next >= session.turns {
            self.end(number, SessionEnd::Completed, Some(now));
            return true;
        }
        let seed = session.seed;
        let think = self.draw_think(seed, k);
        self.think_drawn.0 += think;
        self.think_drawn.1 += 1;
        let due = now.saturating_add(Duration::from_nanos((think * 1e9).round() as u64));
        self.thinking.insert((due, number));
        true
    }

    fn draw_think(&self, seed: u64, k: u32) -> f64 {
        let mean = self.spec.think_time.as_secs_f64();
        let mut rng = SplitMix64::derive(seed, STREAM_THINK + u64::from(k));
        match self.spec.think_time_dist {
            ThinkDist::Fixed => mean,
            ThinkDist::Exponential if mean > 0.0 => rng.exponential(1.0 / mean),
            ThinkDist::Exponential => 0.0,
        }
    }

    /// Request `id` failed at `now`: its session ends, failed. Returns whether it was a turn.
    pub fn on_failed(&mut self, id: RequestId, now: Timestamp) -> bool {
        let Some(number) = self.in_flight.remove(&id) else { return false };
        self.end(number, SessionEnd::Failed, Some(now));
        true
    }

    fn end(&mut self, number: u64, end: SessionEnd, at: Option<Timestamp>) {
        let Some(session) = self.active.remove(&number) else { return };
        let duration = match (session.started, at) {
            (Some(start), Some(at)) => at.saturating_since(start),
            _ => Duration::ZERO,
        };
        self.ended.push_back(Ended { end, turns: session.next, duration });
    }

    /// The next session that ended, oldest first.
    pub fn poll_ended(&mut self) -> Option<Ended> {
        self.ended.pop_front()
    }

    /// Sessions started and not ended (what a benchmark's end leaves unfinished).
    pub fn unfinished(&self) -> u64 {
        self.active.len() as u64
    }
}

fn piece_text(piece: &Piece) -> String {
    match piece {
        Piece::Text(t) => t.clone(),
        Piece::Ids(ids) => ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
    }
}

/// `n` token ids below `vocab`; the first ones spell `spell` in base `vocab` when given.
fn ids(vocab: u32, n: usize, spell: Option<u64>, rng: &mut SplitMix64) -> Vec<u32> {
    let vocab = u64::from(vocab.max(1));
    let mut rest = spell;
    (0..n)
        .map(|_| match rest {
            Some(r) if vocab > 1 => {
                rest = (r >= vocab).then_some(r / vocab);
                (r % vocab) as u32
            }
            _ => rng.range_u64(0, vocab - 1) as u32,
        })
        .collect()
}

/// `n` pseudo-words of three letters, space separated (`n` tokens by the four-byte rule: the
/// text is `4n − 1` bytes); the first ones spell `spell` in base 26³ when given.
fn words(n: usize, spell: Option<u64>, rng: &mut SplitMix64) -> String {
    let mut text = String::with_capacity(4 * n);
    let mut rest = spell;
    for i in 0..n {
        let digit = match rest {
            Some(r) => {
                rest = (r >= WORDS).then_some(r / WORDS);
                r % WORDS
            }
            None => rng.range_u64(0, WORDS - 1),
        };
        if i > 0 {
            text.push(' ');
        }
        for place in [1, 26, 26 * 26] {
            text.push(char::from(b'a' + (digit / place % 26) as u8));
        }
    }
    text
}

#[cfg(test)]
mod tests;
