//! The rules between keys of `[profile]`, `[workload]` and `[stop]` that arrivals and shared
//! prefixes bring: a trace replays a workload file's timestamps (read here, so `batchlab check`
//! finds a file without them), a ramp-up must end before the run does, and a shared prefix must
//! leave room for the rest of the prompt. Called by the lowering once every section is read.

use toml_edit::TableLike;

use super::plan::{FileFormat, Plan, ProfileSpec, TokenDist, WorkloadSpec};
use super::reader::{Field, LocatedTable, ReadContext};
use crate::loadgen::LoadError;

/// Most shared prefixes: assigning a request to one shuffles all of them (`loadgen::Workload`).
pub(crate) const MAX_PREFIX_GROUPS: u32 = 10_000;

/// The field `section.key` of the top level, if written.
fn field<'t>(cx: &ReadContext, top: LocatedTable<'t>, section: &'static str, key: &str) -> Option<Field<'t>> {
    let table: &dyn TableLike = top.table.get(section)?.as_table_like()?;
    cx.field(LocatedTable { path: section, table, at: None }, key)
}

/// Reports `message` at `section.key` (else at the section, else the file).
fn report(
    cx: &mut ReadContext,
    top: LocatedTable,
    section: &'static str,
    key: &str,
    message: String,
    help: Option<String>,
) {
    match field(cx, top, section, key) {
        Some(f) => cx.report_at(&f, message, help),
        None => {
            let span = top.table.get(section).and_then(|s| s.span());
            cx.report(section, span, message, help)
        }
    }
}

pub(crate) fn check(cx: &mut ReadContext, top: LocatedTable, plan: &mut Plan) {
    check_trace(cx, top, plan);
    check_rampup(cx, top, plan);
    check_prefixes(cx, top, &plan.workload);
}

/// A trace profile gets its arrivals from the workload file, which must have a `timestamp` on
/// every line, in time order.
fn check_trace(cx: &mut ReadContext, top: LocatedTable, plan: &mut Plan) {
    let ProfileSpec::Trace { arrivals, .. } = &mut plan.profile else { return };
    let WorkloadSpec::File { path, dataset, .. } = &plan.workload else {
        let message =
            "`profile.kind = \"trace\"` replays a workload file's timestamps, but the workload is synthetic".to_owned();
        let help = "set `workload.source = \"file\"` and a `path` whose lines carry `timestamp`s".to_owned();
        return report(cx, top, "profile", "kind", message, Some(help));
    };
    if !path.is_file() {
        return; // reported where `path` is read
    }
    // Line `i` is request `i`'s arrival: nothing may drop lines or read them otherwise.
    let mut misaligned = Vec::new();
    if dataset.format != FileFormat::Jsonl {
        misaligned.push("format");
    }
    if dataset.skip_bad_lines {
        misaligned.push("skip_bad_lines");
    }
    if dataset.min_prompt_tokens.is_some() {
        misaligned.push("min_prompt_tokens");
    }
    if dataset.max_prompt_tokens.is_some() && !dataset.truncate {
        misaligned.push("max_prompt_tokens");
    }
    for key in misaligned {
        let message = format!(
            "`workload.{key}` cannot go with `profile.kind = \"trace\"`: a trace replays every line of a JSONL \
             file at its own time, so no line may be skipped or dropped"
        );
        report(cx, top, "workload", key, message, None);
    }
    let help = || {
        Some("every line of a trace needs `\"timestamp\": <seconds>`, never earlier than the line before".to_owned())
    };
    let read = cx.files.bytes(path).map_err(|source| LoadError::Io { path: path.to_owned(), source });
    match read.and_then(|bytes| crate::loadgen::trace_of(&bytes, path, &dataset.columns)) {
        Ok(read) => *arrivals = read,
        // One problem per bad line of the trace, each naming its file and line.
        Err(LoadError::BadLines { path, problems, omitted }) => {
            for p in problems {
                let at = match p.column {
                    Some(c) => format!("{}:{}:{c}", path.display(), p.line),
                    None => format!("{}:{}", path.display(), p.line),
                };
                report(cx, top, "workload", "path", format!("trace profile: {at}: {}", p.message), help());
            }
            if omitted > 0 {
                let message = format!("trace profile: {} has {omitted} more bad lines", path.display());
                report(cx, top, "workload", "path", message, None);
            }
        }
        Err(e) => report(cx, top, "workload", "path", format!("trace profile: {e}"), help()),
    }
}

/// A ramp-up must end before the benchmark does: before `max_duration`, and before
/// `max_requests` arrivals (a ramp of `T` at `rate` brings `rate · T / 2` of them).
fn check_rampup(cx: &mut ReadContext, top: LocatedTable, plan: &Plan) {
    let (rampup, rates): (_, Vec<f64>) = match &plan.profile {
        ProfileSpec::Concurrent { rampup, .. } => (*rampup, Vec::new()),
        ProfileSpec::Constant { rampup, rates, .. } => (*rampup, rates.clone()),
        ProfileSpec::Poisson { rampup, rate, .. } | ProfileSpec::Gamma { rampup, rate, .. } => (*rampup, vec![*rate]),
        _ => return,
    };
    let Some(rampup) = rampup else { return };
    let shown = super::units::format_duration(rampup);
    if let Some(d) = plan.stop.max_duration.filter(|d| rampup >= *d) {
        let message = format!(
            "`profile.rampup` ({shown}) is not shorter than `stop.max_duration` ({}): the benchmark would end \
             before its ramp-up does",
            super::units::format_duration(d)
        );
        report(cx, top, "profile", "rampup", message, Some("shorten the ramp-up or run longer".to_owned()));
        return;
    }
    let Some(max_requests) = plan.stop.max_requests else { return };
    let most = rates.iter().copied().fold(0.0, f64::max);
    let during_ramp = most * rampup.as_secs_f64() / 2.0;
    if during_ramp >= max_requests as f64 {
        let message = format!(
            "`profile.rampup` ({shown}) at {most} requests/s brings {during_ramp:.0} arrivals, but \
             `stop.max_requests` is {max_requests}: the benchmark would end before its ramp-up does"
        );
        report(cx, top, "profile", "rampup", message, Some("shorten the ramp-up or raise max_requests".to_owned()));
    }
}

/// The shortest prompt a token distribution can draw (draws are at least 1).
fn shortest(dist: &TokenDist) -> u32 {
    match *dist {
        TokenDist::Fixed { value } => value,
        TokenDist::Uniform { min, .. } | TokenDist::Normal { min, .. } => min,
    }
    .max(1)
}

/// `prefix_groups` and `prefix_tokens` go together, and a prefix is shorter than every prompt.
fn check_prefixes(cx: &mut ReadContext, top: LocatedTable, workload: &WorkloadSpec) {
    let WorkloadSpec::Synthetic { prefix_groups, prefix_tokens, prompt_tokens, chat, .. } = workload else { return };
    let (groups, tokens) = (*prefix_groups, *prefix_tokens);
    if chat.enabled && (groups > 0 || tokens > 0) {
        let message = "`workload.prefix_groups` shares token ids, but `workload.chat` prompts are text".to_owned();
        let help = "use `chat = false`, or a `system_prompt`, which every chat prompt shares".to_owned();
        report(cx, top, "workload", "prefix_groups", message, Some(help));
        return;
    }
    if groups > MAX_PREFIX_GROUPS {
        let message = format!("`workload.prefix_groups` must be at most {MAX_PREFIX_GROUPS}, found {groups}");
        report(cx, top, "workload", "prefix_groups", message, None);
    }
    match (groups, tokens) {
        (0, 0) => {}
        (0, _) => {
            let message = "`workload.prefix_tokens` is set but `workload.prefix_groups` is 0".to_owned();
            report(cx, top, "workload", "prefix_tokens", message, Some("set `prefix_groups = 1` or more".to_owned()));
        }
        (_, 0) => {
            let message = "`workload.prefix_groups` is set but `workload.prefix_tokens` is 0".to_owned();
            report(cx, top, "workload", "prefix_groups", message, Some("set `prefix_tokens = 1` or more".to_owned()));
        }
        (_, tokens) if tokens >= shortest(prompt_tokens) => {
            let message = format!(
                "`workload.prefix_tokens` ({tokens}) must be less than the shortest prompt ({} tokens by \
                 `prompt_tokens`): the rest of each prompt is what tells requests apart",
                shortest(prompt_tokens)
            );
            report(cx, top, "workload", "prefix_tokens", message, None);
        }
        _ => {}
    }
}
