//! `[workload.images]`: its keys (rows of `keys::IMAGE_KEYS`), then the rules between them and
//! the rest of the scenario, each refused at the line of the key that breaks it.

use super::keys;
use super::plan::{EnginePlan, RequestFormat, WorkloadSpec};
use super::reader::{Field, LocatedTable, ReadContext};
use super::schema;
use crate::engine::openai::{Api, OpenAiConfig};
use crate::loadgen::images::ImageSpec;

/// Reads `[workload.images]` into a synthetic workload; refuses it where images cannot go.
pub(crate) fn lower_images(cx: &mut ReadContext, top: LocatedTable, engine: &EnginePlan, workload: &mut WorkloadSpec) {
    let Some(workload_table) = table_of(cx, top, "workload", "workload") else { return };
    let Some(field) = cx.field(workload_table, "images") else { return };
    let Some(t) = cx.as_table(&field, "workload.images", schema::names(&["workload", "images"])) else { return };
    let mut spec = ImageSpec::default();
    keys::read(cx, t, keys::IMAGE_KEYS, &mut spec);
    let mut refused = false;
    let mut refuse = |cx: &mut ReadContext, at: &Field, message: String, help: &str| {
        cx.report_at(at, message, Some(help.to_owned()));
        refused = true;
    };
    match workload {
        WorkloadSpec::File { .. } => refuse(
            cx,
            &field,
            "`[workload.images]` only applies with `workload.source = \"synthetic\"`".to_owned(),
            "synthetic images go after a synthetic chat turn's text",
        ),
        WorkloadSpec::Synthetic { chat, request_format, .. } => {
            if !chat.enabled {
                refuse(
                    cx,
                    &field,
                    "`[workload.images]` needs chat prompts, but `workload.chat` is false".to_owned(),
                    "set `workload.chat = true`: images go after the user turn's text",
                );
            } else if *request_format == RequestFormat::Plain {
                refuse(
                    cx,
                    &field,
                    "`[workload.images]` cannot go with `workload.request_format = \"plain\"`, which sends text"
                        .to_owned(),
                    "use the model's chat template (`\"chat-template\"`, the default)",
                );
            }
        }
    }
    if let EnginePlan::OpenAi(OpenAiConfig { api: api @ (Api::Completions | Api::Embeddings), .. }) = engine {
        let api = if *api == Api::Embeddings { "embeddings" } else { "completions" };
        refuse(
            cx,
            &field,
            format!("`[workload.images]` needs `engine.openai.api = \"chat\"`: the {api} API takes no images"),
            "set `engine.openai.api = \"chat\"` (with `batching.batch_size = 1`)",
        );
    }
    if spec.limit < spec.base_items {
        let message = format!(
            "`workload.images.limit_per_prompt` ({}) is below `workload.images.base_items_per_request` ({})",
            spec.limit, spec.base_items
        );
        let at = cx.field(t, "limit_per_prompt").or_else(|| cx.field(t, "base_items_per_request"));
        if let Some(at) = at {
            refuse(cx, &at, message, "vLLM refuses a prompt with more images than its limit: raise the limit");
        }
    }
    if spec.quality > 100 {
        if let Some(at) = cx.field(t, "quality") {
            refuse(
                cx,
                &at,
                format!("`workload.images.quality` is {}, above 100", spec.quality),
                "JPEG quality is 1..=100",
            );
        }
    }
    if refused {
        return;
    }
    if let WorkloadSpec::Synthetic { images, .. } = workload {
        *images = Some(spec);
    }
}

/// The sub-table `key` of `t`, if it is one (its keys are checked by whoever reads it).
fn table_of<'t>(cx: &ReadContext, t: LocatedTable<'t>, key: &str, path: &'t str) -> Option<LocatedTable<'t>> {
    let field = cx.field(t, key)?;
    let table = field.node.table_like()?;
    Some(LocatedTable { path, table, at: field.span().map(|r| (r.start, r.end)) })
}
