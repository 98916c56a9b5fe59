//! The load generator: what to send ([`Workload`]) and when to send it ([`Scheduler`]).
//!
//! A file workload is read by `dataset` (JSONL lines parsed by `jsonl`, ShareGPT conversations,
//! text lines), filtered to the scenario's lengths, and replayed.
//!
//! Both are deterministic and sans-IO. A workload is a pure function from a request's index `k`
//! to a request (without an id: the batcher gives it one, `k` in a run); a scheduler never reads a clock and never sleeps, it is told `now` and how many
//! requests are in flight and says whether to submit now, at a later time, or after a completion.
//! The runner owns the clock, the stop conditions and the metrics; this module owns no threads.
//!
//! With `[workload.sessions]`, requests are turns of sessions instead ([`sessions`]): a turn's
//! prompt depends on the replies before it, so the step asks the session machine, not the
//! workload, for it.
//!
//! A scenario's profile expands into benchmark steps ([`expand`], [`StepPlanner`]); a sweep's
//! later steps depend on rates measured in its first two, so the runner asks for them one by one.

mod dataset;
mod error;
mod file;
pub mod images;
mod jsonl;
mod profile;
mod scheduler;
pub mod sessions;
pub mod shard;
mod tokenizer;
mod workload;

pub use dataset::DatasetOptions;
pub use error::{LineProblem, LoadError, MAX_REPORTED_LINES};
pub use file::{DatasetStats, FileFormat};
pub use jsonl::{Columns, LinePrompt, PromptLine};
pub use profile::{
    Expansion, ProfileSpec, Step, StepKind, StepPlanner, TraceArrivals, duplicate_name, expand, format_rate,
    rate_labels, sweep_rates,
};
pub use scheduler::{Lateness, Poll, Scheduler, Skip};
pub(crate) use workload::trace_of;
pub use workload::{CHAT_PREFIX_WORDS, PrefixDesign, SyntheticChat, TokenDist, Workload, WorkloadSpec, read_trace};
