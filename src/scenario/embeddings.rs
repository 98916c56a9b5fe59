//! `engine.openai.api = "embeddings"` and vLLM in process with `engine_args.runner = "pooling"`
//! (`LLM.embed`): the keys that make no sense for a pooling request, each refused at its line. An embedding generates no tokens, so an output length, an `[slo]` on the
//! first token or the gaps between tokens, and images (the embeddings API takes text or token
//! ids) are refused; `[workload.images]` is refused in `images.rs`, chat prompts in `lower.rs`.
//! A printed embeddings plan leaves those keys out, so it reads back.

use super::plan::EnginePlan;
use super::reader::{LocatedTable, ReadContext};
use crate::engine::openai::{Api, OpenAiConfig};

/// Keys of `[workload]` about what is generated, and why each means nothing for an embedding.
const OUTPUT_KEYS: &[(&str, &str)] = &[
    ("output_tokens", "an output length"),
    ("ignore_eos", "how generation stops"),
    ("temperature", "how tokens are sampled"),
];

/// `[slo]` objectives on generated tokens.
const TOKEN_OBJECTIVES: &[(&str, &str)] =
    &[("ttft_ms", "a first token"), ("tpot_ms", "a time per output token"), ("itl_ms", "gaps between tokens")];

/// How the plan's engine embeds, as a message names it; `None` for an engine that generates.
pub(crate) fn pooling(engine: &EnginePlan) -> Option<&'static str> {
    match engine {
        EnginePlan::OpenAi(OpenAiConfig { api: Api::Embeddings, .. }) => Some("`engine.openai.api` is \"embeddings\""),
        EnginePlan::Vllm(v) if v.engine_args.get("runner").and_then(|r| r.as_str()) == Some("pooling") => {
            Some("`engine.vllm.engine_args` has `runner = \"pooling\"` (`LLM.embed`)")
        }
        _ => None,
    }
}

/// Refuses, at its line, every key a pooling run cannot honour.
pub(crate) fn check_embeddings(cx: &mut ReadContext, top: LocatedTable, engine: &EnginePlan) {
    let Some(how) = pooling(engine) else { return };
    let help = "an embedding is one pass over the prompt and generates no tokens: leave the key out (the \
                report gives embeddings/s and input tokens/s instead)";
    for (section, keys) in [("workload", OUTPUT_KEYS), ("slo", TOKEN_OBJECTIVES)] {
        let Some(t) = table(cx, top, section) else { continue };
        for &(key, what) in keys {
            if let Some(field) = cx.field(t, key) {
                let message = format!("`{section}.{key}` sets {what}, but {how}, which generates no tokens");
                cx.report_at(&field, message, Some(help.to_owned()));
            }
        }
    }
}

/// Leaves the generation keys out of a printed embeddings plan's `[workload]`: they are refused
/// when written, so the printed text must not hold them (it reads back as the same plan, their
/// values being the defaults it was read with).
pub(crate) fn unprint_output_keys(engine: &EnginePlan, workload: &mut toml_edit::Table) {
    if pooling(engine).is_some() {
        for (key, _) in OUTPUT_KEYS {
            workload.remove(key);
        }
    }
}

fn table<'t>(cx: &ReadContext, top: LocatedTable<'t>, key: &'t str) -> Option<LocatedTable<'t>> {
    let field = cx.field(top, key)?;
    let table = field.node.table_like()?;
    Some(LocatedTable { path: key, table, at: field.span().map(|r| (r.start, r.end)) })
}
