//! The keys of `[workload]`, one table per `source` (synthetic, file), the rows both sources
//! share, and `[workload.images]`.

use std::path::PathBuf;

use super::super::plan::*;
use super::super::reader::LowerBound;
use super::codec::*;
use super::{Key, KeyDefault, Tag, TagOf, Variant, derive_seed, seed_stream};
use crate::loadgen::images::{Content, ImageFormat, ImageSpec};
use crate::loadgen::sessions::{ContextFull, NextTurn, SessionSpec, ThinkDist};

pub(crate) const WORKLOAD_TAG: Key<Tag> = key!(source: TagOf(WORKLOAD_VARIANTS), KeyDefault::Value, "", Tag(source));

const IGNORE_EOS_ROW: Key<WorkloadSpec> = key!(
    ignore_eos: Bool,
    KeyDefault::Value,
    "",
    WorkloadSpec::Synthetic { ignore_eos, .. } | WorkloadSpec::File { ignore_eos, .. }
);
const TEMPERATURE_ROW: Key<WorkloadSpec> = key!(
    temperature: Float32(LowerBound::AtLeast(0.0), f32::MAX as f64),
    KeyDefault::Value,
    "",
    WorkloadSpec::Synthetic { temperature, .. } | WorkloadSpec::File { temperature, .. }
);

const REQUEST_FORMAT: Key<WorkloadSpec> = key!(
    request_format: ReqFormat,
    KeyDefault::Value,
    "how chat prompts (`messages`) become the model's prompt: `\"plain\"`, `\"chat-template\"` (the model's), \
     or a Jinja template: inline, or a file relative to the scenario",
    WorkloadSpec::Synthetic { request_format, .. } | WorkloadSpec::File { request_format, .. }
);

const TOKENIZER_ROW: Key<WorkloadSpec> = key!(
    tokenizer: Opt(TokenizerPath),
    KeyDefault::Text("none: four bytes a token"),
    "a model directory or a tokenizer.json, beside the scenario or under `$BATCHLAB_HOME`; prompt lengths count its tokens \
     (synthetic prompts of exact length, chat ones after the template; the file length limits)",
    WorkloadSpec::Synthetic { tokenizer, .. } | WorkloadSpec::File { tokenizer, .. }
);
/// `[workload.images]`, a synthetic chat workload's images (vLLM's `random-mm` conventions,
/// `loadgen::images`).
pub(crate) const IMAGE_KEYS: &[Key<ImageSpec>] = &[
    key!(
        buckets: Buckets,
        KeyDefault::Text("`\"{(256, 256, 1): 1}\"`"),
        "vLLM's `--random-mm-bucket-config` verbatim, `\"{(height, width, 1): probability, …}\"` (probabilities \
         sum to 1, no side of 0), or a guidellm preset: `\"240p\"` … `\"2160p\"`, `\"4k\"` (16:9, width even)",
        in ImageSpec
    ),
    key!(
        base_items_per_request: U32(0),
        KeyDefault::Value,
        "vLLM's `--random-mm-base-items-per-request`",
        ImageSpec { base_items: base_items_per_request, .. }
    ),
    key!(
        range_ratio: Float(LowerBound::AtLeast(0.0), 1.0),
        KeyDefault::Value,
        "vLLM's `--random-mm-num-mm-items-range-ratio`: images per request uniform over ⌊n(1−r)⌋..=⌈n(1+r)⌉",
        in ImageSpec
    ),
    key!(
        limit_per_prompt: U32(0),
        KeyDefault::Value,
        "vLLM's `--random-mm-limit-mm-per-prompt` image limit; not below `base_items_per_request`",
        ImageSpec { limit: limit_per_prompt, .. }
    ),
    key!(
        content: Choice(&[("noise", Content::Noise), ("gradient", Content::Gradient), ("solid", Content::Solid)]),
        KeyDefault::Value,
        "`noise` (vLLM's), `gradient` (guidellm's default; compresses like real media) or `solid`",
        in ImageSpec
    ),
    key!(
        format: Choice(&[("jpeg", ImageFormat::Jpeg), ("png", ImageFormat::Png)]),
        KeyDefault::Value,
        "sent as `data:image/jpeg` or `data:image/png` URLs",
        in ImageSpec
    ),
    key!(quality: U32(1), KeyDefault::Value, "JPEG quality, 1..=100 (PIL's default, as vLLM's)", in ImageSpec),
    key!(
        pool: U32(0),
        KeyDefault::Value,
        "distinct pool images, reused to test a server's image cache; 0: every image differs",
        in ImageSpec
    ),
    key!(
        pool_rate: Float(LowerBound::AtLeast(0.0), 1.0),
        KeyDefault::Value,
        "with `pool`: the share of images drawn from the pool (the designed reuse)",
        in ImageSpec
    ),
    key!(
        tokens_per_image: U32(1),
        KeyDefault::Value,
        "prompt tokens an image costs (guidellm's mock server's), when `patch_size` is 0",
        in ImageSpec
    ),
    key!(
        patch_size: U32(0),
        KeyDefault::Value,
        "> 0: an image costs ⌈height/p⌉·⌈width/p⌉ tokens instead",
        in ImageSpec
    ),
    key!(
        count_in_prompt: Bool,
        KeyDefault::Value,
        "`workload.prompt_tokens` is the whole prompt, template and images included, as batchlab counts it: \
         the text is sized to hit it (docs/workloads.md)",
        in ImageSpec
    ),
];

/// `[workload.sessions]`, live multi-turn sessions (`loadgen::sessions`).
pub(crate) const SESSION_KEYS: &[Key<SessionSpec>] = &[
    key!(
        turns: Dist,
        KeyDefault::Value,
        "user turns per session, an integer >= 1 or a distribution like `prompt_tokens`; each user turn is \
         `workload.prompt_tokens` long and asks for `workload.output_tokens`",
        in SessionSpec
    ),
    key!(
        think_time: Dur { zero: true },
        KeyDefault::Value,
        "the mean wait between a reply and the session's next turn; not counted as client lag",
        in SessionSpec
    ),
    key!(
        think_time_dist: Choice(&[("fixed", ThinkDist::Fixed), ("exponential", ThinkDist::Exponential)]),
        KeyDefault::Value,
        "`fixed` (vLLM's `--multi-turn-delay-ms`) or `exponential` with mean `think_time`",
        in SessionSpec
    ),
    key!(
        max_context_tokens: Opt(U32(1)),
        KeyDefault::Value,
        "the longest history plus new user turn plus `max_tokens` a turn may have; not below the first turn",
        in SessionSpec
    ),
    key!(
        context_full: Choice(&[("end_session", ContextFull::EndSession), ("drop_oldest", ContextFull::DropOldest)]),
        KeyDefault::Value,
        "a turn that would not fit: `end_session` (vLLM's bench; counted cut) or `drop_oldest` user/reply pairs \
         (inference-perf; counted dropped)",
        in SessionSpec
    ),
    key!(
        next_turn: Choice(&[("after_reply", NextTurn::AfterReply), ("rate_tick", NextTurn::RateTick)]),
        KeyDefault::Value,
        "`after_reply`: when the think time ends (vLLM, guidellm); `rate_tick`: queued then, sent at the profile's \
         next arrival before a new session (AIPerf)",
        in SessionSpec
    ),
];

/// `[workload]`, by `source`.
pub(crate) const WORKLOAD_VARIANTS: &[Variant<WorkloadSpec>] = &[
    Variant {
        name: "synthetic",
        is: |s| matches!(s, WorkloadSpec::Synthetic { .. }),
        keys: &[
            key!(prompt_tokens: Dist, KeyDefault::Value, "synthetic only", in WorkloadSpec::Synthetic),
            key!(output_tokens: Dist, KeyDefault::Value, "synthetic only", in WorkloadSpec::Synthetic),
            key!(seed: U64(0), KeyDefault::Text("derived (stream 3)"), "synthetic only", in WorkloadSpec::Synthetic),
            key!(
                unique_prefix: Bool,
                KeyDefault::Value,
                "synthetic only; defeats prefix caching",
                in WorkloadSpec::Synthetic
            ),
            key!(
                prefix_groups: U32(0),
                KeyDefault::Value,
                "synthetic only; every prompt starts with one of this many shared prefixes, 0 for none",
                in WorkloadSpec::Synthetic
            ),
            key!(
                prefix_tokens: U32(0),
                KeyDefault::Value,
                "synthetic only; tokens of each shared prefix, fewer than the shortest prompt",
                in WorkloadSpec::Synthetic
            ),
            key!(vocab_size: U32(2), KeyDefault::Value, "synthetic only", in WorkloadSpec::Synthetic),
            key!(
                chat: Bool,
                KeyDefault::Value,
                "synthetic only; each prompt is a conversation: `system_prompt`, then a user turn of `prompt_tokens` words",
                WorkloadSpec::Synthetic { chat: SyntheticChat { enabled: chat, .. }, .. }
            ),
            key!(
                system_prompt: Opt(Str),
                KeyDefault::Value,
                "synthetic only, with `chat = true`; the system turn, the same for every prompt",
                WorkloadSpec::Synthetic { chat: SyntheticChat { system_prompt, .. }, .. }
            ),
            IGNORE_EOS_ROW,
            TEMPERATURE_ROW,
            REQUEST_FORMAT,
            TOKENIZER_ROW,
        ],
        default: |master_seed| WorkloadSpec::Synthetic {
            prompt_tokens: TokenDist::Fixed { value: 128 },
            output_tokens: TokenDist::Fixed { value: 64 },
            seed: derive_seed(master_seed, seed_stream::WORKLOAD),
            unique_prefix: true,
            prefix_groups: 0,
            prefix_tokens: 0,
            vocab_size: 32000,
            ignore_eos: true,
            temperature: 0.0,
            chat: SyntheticChat::default(),
            request_format: RequestFormat::default(),
            tokenizer: None,
            images: None,
        },
    },
    Variant {
        name: "file",
        is: |s| matches!(s, WorkloadSpec::File { .. }),
        keys: &[
            key!(
                path: ExistingFile,
                KeyDefault::Required("\"prompts.jsonl\""),
                "relative to the scenario file; must exist",
                in WorkloadSpec::File
            ),
            key!(
                default_max_tokens: U32(1),
                KeyDefault::Value,
                "file only; for lines without `max_tokens`",
                in WorkloadSpec::File
            ),
            IGNORE_EOS_ROW,
            TEMPERATURE_ROW,
            REQUEST_FORMAT,
            TOKENIZER_ROW,
            key!(
                format: Choice(&[("jsonl", FileFormat::Jsonl), ("sharegpt", FileFormat::ShareGpt), ("text", FileFormat::Text)]),
                KeyDefault::Value,
                "file only; `jsonl` (`prompt`, `prompt_token_ids` or `messages`), `sharegpt` (a JSON array or JSONL of `conversations`), `text` (one prompt per line)",
                WorkloadSpec::File { dataset: DatasetOptions { format, .. }, .. }
            ),
            key!(
                columns: ColumnMap,
                KeyDefault::Text("each field's own name"),
                "file only; the JSON key of each field, e.g. `{ prompt = \"question\", max_tokens = \"answer_len\" }`",
                WorkloadSpec::File { dataset: DatasetOptions { columns, .. }, .. }
            ),
            key!(
                skip_bad_lines: Bool,
                KeyDefault::Value,
                "file only; skip bad entries and count them in the report, instead of failing",
                WorkloadSpec::File { dataset: DatasetOptions { skip_bad_lines, .. }, .. }
            ),
            key!(
                min_prompt_tokens: Opt(U32(1)),
                KeyDefault::Value,
                "file only; drop shorter prompts (in `tokenizer`'s tokens, else 4 bytes a token)",
                WorkloadSpec::File { dataset: DatasetOptions { min_prompt_tokens, .. }, .. }
            ),
            key!(
                max_prompt_tokens: Opt(U32(1)),
                KeyDefault::Value,
                "file only; drop longer prompts, or cut them with `truncate`",
                WorkloadSpec::File { dataset: DatasetOptions { max_prompt_tokens, .. }, .. }
            ),
            key!(
                truncate: Bool,
                KeyDefault::Value,
                "file only, with `max_prompt_tokens`; cut longer prompts to it instead of dropping them",
                WorkloadSpec::File { dataset: DatasetOptions { truncate, .. }, .. }
            ),
            key!(
                reply_max_tokens: Bool,
                KeyDefault::Value,
                "`sharegpt` only; the recorded reply's length is the request's `max_tokens`",
                WorkloadSpec::File { dataset: DatasetOptions { reply_max_tokens, .. }, .. }
            ),
        ],
        default: |_| WorkloadSpec::File {
            path: PathBuf::new(),
            default_max_tokens: 64,
            ignore_eos: true,
            temperature: 0.0,
            dataset: DatasetOptions::default(),
            request_format: RequestFormat::default(),
            tokenizer: None,
        },
    },
];
