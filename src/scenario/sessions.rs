//! `[workload.sessions]`: its keys (rows of `keys::SESSION_KEYS`), then the rules between them and
//! the rest of the scenario, each refused at the line of the key that breaks it.

use super::keys;
use super::plan::{EnginePlan, FileFormat, SessionSpec, WorkloadSpec};
use super::reader::{LocatedTable, ReadContext};
use super::schema;
use crate::engine::tokens::text_tokens;

/// Reads `[workload.sessions]`; `None` when absent or refused.
pub(crate) fn lower_sessions(
    cx: &mut ReadContext,
    top: LocatedTable,
    engine: &EnginePlan,
    workload: &WorkloadSpec,
) -> Option<SessionSpec> {
    let workload_field = cx.field(top, "workload")?;
    let workload_table = workload_field.node.table_like()?;
    let w =
        LocatedTable { path: "workload", table: workload_table, at: workload_field.span().map(|r| (r.start, r.end)) };
    let field = cx.field(w, "sessions")?;
    let t = cx.as_table(&field, "workload.sessions", schema::names(&["workload", "sessions"]))?;
    let mut spec = SessionSpec::default();
    keys::read(cx, t, keys::SESSION_KEYS, &mut spec);
    if let Some(how) = super::embeddings::pooling(engine) {
        cx.report_at(
            &field,
            format!("`[workload.sessions]` chains turns through the engine's replies, but {how}, which replies with no text"),
            Some("leave `[workload.sessions]` out of an embeddings scenario, or use `api = \"chat\"` or `\"completions\"`".to_owned()),
        );
        return None;
    }
    let (prompt_tokens, output_tokens, chat, tokenizer, images, prefix_groups) = match workload {
        WorkloadSpec::Synthetic { prompt_tokens, output_tokens, chat, tokenizer, images, prefix_groups, .. } => {
            (prompt_tokens, output_tokens, chat, tokenizer, images, prefix_groups)
        }
        // A file's conversations are replayed; their entries are checked when it is read.
        WorkloadSpec::File { dataset, .. } if dataset.format == FileFormat::Text => {
            cx.report_at(
                &field,
                "`[workload.sessions]` replays conversations, but `workload.format = \"text\"` has none".to_owned(),
                Some("use `format = \"sharegpt\"`, or `\"jsonl\"` lines with `messages`".to_owned()),
            );
            return None;
        }
        WorkloadSpec::File { .. } => return Some(spec),
    };
    if tokenizer.is_some() || images.is_some() || *prefix_groups > 0 {
        let what = if tokenizer.is_some() {
            "`workload.tokenizer`"
        } else if images.is_some() {
            "`[workload.images]`"
        } else {
            "`workload.prefix_groups`"
        };
        cx.report_at(
            &field,
            format!("`[workload.sessions]` cannot go with {what} yet"),
            Some(
                "sessions count their turns by four bytes a token and share no prefix but the system prompt".to_owned(),
            ),
        );
        return None;
    }
    if let Some(limit) = spec.max_context_tokens {
        let system = chat.system_prompt.as_deref().filter(|_| chat.enabled).map_or(0, text_tokens);
        let system = u32::try_from(system).unwrap_or(u32::MAX);
        let first = system.saturating_add(prompt_tokens.largest()).saturating_add(output_tokens.largest());
        if limit < first {
            if let Some(at) = cx.field(t, "max_context_tokens") {
                let message = format!(
                    "`workload.sessions.max_context_tokens` ({limit}) is below the first turn: up to {first} tokens \
                     (system prompt {system} + largest prompt_tokens {} + largest output_tokens {})",
                    prompt_tokens.largest(),
                    output_tokens.largest()
                );
                cx.report_at(&at, message, Some(format!("set it to at least {first}")));
                return None;
            }
        }
    }
    Some(spec)
}
