use super::*;

fn options(format: FileFormat) -> DatasetOptions {
    DatasetOptions { format, ..DatasetOptions::default() }
}

fn read_str(text: &str, options: &DatasetOptions) -> Result<(Vec<PromptLine>, DatasetStats), LoadError> {
    read(text.as_bytes(), Path::new("d.json"), options, &FOUR)
}

const FOUR: TokenCounter = TokenCounter::FourBytes;

/// The bad lines of `text`: `(line, column, text the message contains)`.
fn check_bad(text: &str, options: &DatasetOptions, expected: &[(usize, Option<usize>, &str)]) {
    let err = read_str(text, options).unwrap_err();
    let LoadError::BadLines { path, problems, omitted } = &err else { panic!("{err:?}") };
    assert_eq!((path.as_path(), *omitted), (Path::new("d.json"), 0));
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for (p, (line, column, needle)) in problems.iter().zip(expected) {
        assert_eq!((p.line, p.column), (*line, *column), "{p:?}");
        assert!(p.message.contains(needle), "{:?} should contain {needle:?}", p.message);
    }
}

fn chat(turns: &[(&str, &str)]) -> LinePrompt {
    LinePrompt::Chat(turns.iter().map(|(r, c)| Message::new(*r, *c)).collect())
}

const SHAREGPT: &str = r#"[
  {"id": "a", "conversations": [
    {"from": "system", "value": "Be brief."},
    {"from": "human", "value": "Hi"},
    {"from": "gpt", "value": "Hello there, friend"},
    {"from": "human", "value": "How are you?"},
    {"from": "gpt", "value": "Fine, thanks."}
  ]},
  {"id": "b", "conversations": [{"from": "human", "value": "Only a question"}]}
]
"#;

#[test]
fn sharegpt_prompts_end_at_the_last_human_turn() {
    let (lines, stats) = read_str(SHAREGPT, &options(FileFormat::ShareGpt)).unwrap();
    let first = chat(&[
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello there, friend"),
        ("user", "How are you?"),
    ]);
    assert_eq!(lines, [PromptLine::new(first), PromptLine::new(chat(&[("user", "Only a question")]))]);
    assert_eq!((stats.entries, stats.prompts, stats.format), (2, 2, FileFormat::ShareGpt));
}

#[test]
fn the_recorded_reply_sets_max_tokens_when_asked() {
    let o = DatasetOptions { reply_max_tokens: true, ..options(FileFormat::ShareGpt) };
    let (lines, _) = read_str(SHAREGPT, &o).unwrap();
    // "Fine, thanks." is 13 bytes: 4 tokens by the rule. No reply: the workload's default.
    assert_eq!(lines.iter().map(|l| l.max_tokens).collect::<Vec<_>>(), [Some(4), None]);
}

#[test]
fn sharegpt_as_jsonl_and_renamed_conversations() {
    let text = "{\"items\": [{\"from\": \"human\", \"value\": \"x\"}]}\n\n{\"items\": [{\"from\": \"user\", \"value\": \"y\"}]}\n";
    let mut o = options(FileFormat::ShareGpt);
    *o.columns.key_mut("conversations").unwrap() = "items".into();
    let (lines, stats) = read_str(text, &o).unwrap();
    assert_eq!(lines, [PromptLine::new(chat(&[("user", "x")])), PromptLine::new(chat(&[("user", "y")]))]);
    assert_eq!(stats.entries, 2);
}

#[test]
fn bad_conversations_are_reported_at_their_line() {
    let text = r#"[
  {"conversations": [{"from": "human", "value": "fine"}]},
  {"conversations": [{"from": "gpt", "value": "no question"}]},
  {"conversations": [{"from": "robot", "value": "x"}]},
  {"conversation": []},
  {"conversations": [{"from": "human", "value": 3}]},
  "just text",
  {"conversations": [{"value": "x"}]}
]"#;
    check_bad(
        text,
        &options(FileFormat::ShareGpt),
        &[
            (3, None, "`conversations` has no \"human\" turn"),
            (4, None, "`conversations[0].from` is \"robot\"; expected \"human\", \"gpt\" or \"system\""),
            (5, None, "unknown key `conversation`; did you mean `conversations`?"),
            (6, None, "expected `conversations[0].value` to be a string, found a number"),
            (7, None, "expected a conversation object, found a string"),
            (8, None, "missing `conversations[0].from`"),
        ],
    );
}

#[test]
fn a_broken_json_array_is_one_problem_with_its_position() {
    check_bad(
        "[\n  {\"conversations\": []},\n  {oops}\n]",
        &options(FileFormat::ShareGpt),
        &[(3, Some(4), "invalid JSON")],
    );
    // Never skipped: nothing after it could be read.
    let o = DatasetOptions { skip_bad_lines: true, ..options(FileFormat::ShareGpt) };
    assert!(matches!(read_str("[{]", &o), Err(LoadError::BadLines { .. })));
}

#[test]
fn text_files_have_one_prompt_per_line() {
    let (lines, stats) = read_str("first prompt\r\n\n  \nsecond one\n", &options(FileFormat::Text)).unwrap();
    let text = |s: &str| PromptLine::new(LinePrompt::Text(s.into()));
    assert_eq!(lines, [text("first prompt"), text("second one")]);
    assert_eq!(stats.entries, 2);
}

#[test]
fn invalid_utf8_is_a_bad_line() {
    let bytes = b"fine\nbad \xff byte\nfine too\n";
    let err = read(bytes, Path::new("t.txt"), &options(FileFormat::Text), &FOUR).unwrap_err();
    let LoadError::BadLines { problems, .. } = &err else { panic!("{err:?}") };
    assert_eq!(problems, &[LineProblem { line: 2, column: Some(5), message: "invalid UTF-8; expected text".into() }]);
    let o = DatasetOptions { skip_bad_lines: true, ..options(FileFormat::Text) };
    let (lines, stats) = read(bytes, Path::new("t.txt"), &o, &FOUR).unwrap();
    assert_eq!((lines.len(), stats.skipped_bad_lines, stats.entries), (2, 1, 3));
}

#[test]
fn bad_lines_are_skipped_and_counted_when_asked() {
    let text = "{\"prompt\": \"a\"}\nnope\n{\"prompt\": 1}\n{\"prompt\": \"b\"}\n";
    check_bad(text, &options(FileFormat::Jsonl), &[(2, Some(2), "invalid JSON"), (3, None, "to be a string")]);
    let o = DatasetOptions { skip_bad_lines: true, ..options(FileFormat::Jsonl) };
    let (lines, stats) = read_str(text, &o).unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!((stats.entries, stats.skipped_bad_lines, stats.prompts), (4, 2, 2));
    // Nothing but bad lines: no prompts left, said with the counts.
    let err = read_str("nope\nnope\n", &o).unwrap_err();
    assert!(err.to_string().contains("has no prompts left: of its 2 entries, 2 were bad lines (skipped)"), "{err}");
}

#[test]
fn many_bad_lines_are_capped_and_counted() {
    let text = "nope\n".repeat(MAX_REPORTED_LINES + 5);
    let err = read(text.as_bytes(), Path::new("p.jsonl"), &options(FileFormat::Jsonl), &FOUR).unwrap_err();
    let LoadError::BadLines { problems, omitted, .. } = &err else { panic!("{err:?}") };
    assert_eq!((problems.len(), *omitted), (MAX_REPORTED_LINES, 5));
    let message = err.to_string();
    assert!(message.starts_with("workload file p.jsonl has 25 bad lines:"), "{message}");
    assert!(message.contains("\n  p.jsonl:1:2: invalid JSON (expected ident); expected a JSON object\n"), "{message}");
    assert!(message.ends_with("... and 5 more"), "{message}");
}

#[test]
fn empty_files_are_errors() {
    for format in [FileFormat::Jsonl, FileFormat::Text, FileFormat::ShareGpt] {
        for text in ["", "\n", "  \n\n"] {
            let err = read(text.as_bytes(), Path::new("e.jsonl"), &options(format), &FOUR).unwrap_err();
            assert!(matches!(err, LoadError::EmptyFile { .. }), "{format:?} {text:?}: {err:?}");
            assert!(err.to_string().contains("e.jsonl has no prompts"), "{err}");
        }
    }
    let err = read_str("[]", &options(FileFormat::ShareGpt)).unwrap_err();
    assert!(matches!(err, LoadError::EmptyFile { .. }), "{err:?}");
}

/// Prompts of 1, 3, 5 and 9 tokens by the rule (4 bytes a token).
const LENGTHS: &str = "abcd\nabcdefghijkl\nabcdefghijklmnopqrst\nabcdefghijklmnopqrstuvwxyz0123456789\n";

fn lengths(lines: &[PromptLine]) -> Vec<usize> {
    lines.iter().map(|l| prompt_len(&l.prompt, &FOUR)).collect()
}

#[test]
fn length_filters_drop_and_count() {
    let o = DatasetOptions { min_prompt_tokens: Some(3), max_prompt_tokens: Some(5), ..options(FileFormat::Text) };
    let (lines, stats) = read_str(LENGTHS, &o).unwrap();
    assert_eq!(lengths(&lines), [3, 5]);
    assert_eq!((stats.dropped_short, stats.dropped_long, stats.truncated, stats.prompts), (1, 1, 0, 2));
    let none = DatasetOptions { min_prompt_tokens: Some(10), ..options(FileFormat::Text) };
    let err = read_str(LENGTHS, &none).unwrap_err();
    assert!(matches!(err, LoadError::NoPromptsLeft { .. }));
    assert!(err.to_string().contains("(lengths by batchlab's rule, 4 bytes a token;"), "{err}");
}

#[test]
fn truncation_cuts_to_the_target_length() {
    let o = DatasetOptions { max_prompt_tokens: Some(4), truncate: true, ..options(FileFormat::Text) };
    let (lines, stats) = read_str(LENGTHS, &o).unwrap();
    assert_eq!(lengths(&lines), [1, 3, 4, 4]);
    assert_eq!(lines[3].prompt, LinePrompt::Text("abcdefghijklmnop".into()));
    assert_eq!((stats.truncated, stats.dropped_long), (2, 0));

    let mut ids = LinePrompt::Tokens(vec![1, 2, 3, 4, 5]);
    assert!(truncate(&mut ids, 2, &FOUR));
    assert_eq!(ids, LinePrompt::Tokens(vec![1, 2]));
}

#[test]
fn chat_prompts_are_cut_in_their_last_message() {
    let mut c = chat(&[("system", "12345678"), ("user", "abcdefghijklmnop")]);
    assert_eq!(prompt_len(&c, &FOUR), 6);
    assert!(truncate(&mut c, 3, &FOUR));
    assert_eq!(c, chat(&[("system", "12345678"), ("user", "abcd")]));
    // The system turn alone is over the limit: it cannot be cut, and is dropped.
    let mut c = chat(&[("system", "12345678"), ("user", "abcd")]);
    assert!(!truncate(&mut c, 2, &FOUR));
    let text = "{\"messages\": [{\"role\": \"system\", \"content\": \"123456789\"}, {\"role\": \"user\", \"content\": \"x\"}]}\n";
    let o = DatasetOptions { max_prompt_tokens: Some(2), truncate: true, ..options(FileFormat::Jsonl) };
    assert!(matches!(read_str(text, &o), Err(LoadError::NoPromptsLeft { stats, .. }) if stats.dropped_long == 1));
}

#[test]
fn jsonl_columns_apply() {
    let mut o = options(FileFormat::Jsonl);
    *o.columns.key_mut("prompt").unwrap() = "question".into();
    let (lines, _) = read_str("{\"question\": \"why?\"}\n", &o).unwrap();
    assert_eq!(lines, [PromptLine::new(LinePrompt::Text("why?".into()))]);
}

#[test]
fn positions_are_one_based() {
    assert_eq!(position(b"ab\ncd", 0), (1, 1));
    assert_eq!(position(b"ab\ncd", 4), (2, 2));
    assert_eq!(position(b"ab\n", 3), (2, 1));
}

/// With the model's tokenizer, the limits count its tokens: prompts of 2, 6, 12 and 30 real tokens,
/// whose byte counts say otherwise (the four-byte rule would find 3, 5, 9 and 37).
#[test]
fn with_a_tokenizer_the_limits_count_real_tokens() {
    let tiny = crate::engine::tokenizer::tiny();
    let real = TokenCounter::Tokenizer(tiny.clone());
    let texts = [
        "<s>hello",
        "sounding mystical bytes",
        "stoung kait chaibrer dou tou, fek lick",
        "0123456789 0123456789 0123456789 ",
    ];
    let counts: Vec<usize> = texts.iter().map(|t| tiny.text_tokens(t)).collect();
    let four: Vec<usize> = texts.iter().map(|t| FOUR.text_tokens(t)).collect();
    assert_ne!(counts, four, "the test needs texts the two countings disagree on");
    let file = texts.join("\n") + "\n";
    let (min, max) = (counts[1], counts[2]);
    let o = DatasetOptions {
        min_prompt_tokens: Some(min as u32),
        max_prompt_tokens: Some(max as u32),
        ..options(FileFormat::Text)
    };
    let (lines, stats) = read(file.as_bytes(), Path::new("d.txt"), &o, &real).unwrap();
    assert_eq!(lines.iter().map(|l| prompt_len(&l.prompt, &real)).collect::<Vec<_>>(), [min, max]);
    assert_eq!((stats.dropped_short, stats.dropped_long), (1, 1));
    // Truncated to `max` real tokens, each a prefix of its line with at most that many.
    let o = DatasetOptions { max_prompt_tokens: Some(min as u32), truncate: true, ..options(FileFormat::Text) };
    let (lines, stats) = read(file.as_bytes(), Path::new("d.txt"), &o, &real).unwrap();
    assert_eq!(stats.truncated, 2);
    for (line, text) in lines.iter().zip(&texts) {
        let LinePrompt::Text(cut) = &line.prompt else { panic!("text") };
        assert!(text.starts_with(cut.as_str()));
        let n = tiny.text_tokens(cut.as_str());
        assert!(n <= min && n + 1 >= min.min(tiny.text_tokens(text)), "{text:?} cut to {cut:?}: {n} tokens");
    }
    // A conversation is counted and cut in real tokens too, in its last message.
    let mut c = chat(&[("system", texts[1]), ("user", texts[2])]);
    assert_eq!(prompt_len(&c, &real), tiny.plain_ids(texts[1]).len() + tiny.plain_ids(texts[2]).len());
    assert!(truncate(&mut c, min + 3, &real));
    assert!(prompt_len(&c, &real) <= min + 3 && prompt_len(&c, &real) >= min + 2, "{c:?}");
}
