use super::*;
use crate::engine::chat::{ChatPrompt, Template};
use crate::loadgen::SyntheticChat;

fn workload(chat: bool) -> WorkloadSpec {
    WorkloadSpec::Synthetic {
        prompt_tokens: TokenDist::Uniform { min: 8, max: 16 },
        output_tokens: TokenDist::Fixed { value: 5 },
        seed: 11,
        unique_prefix: true,
        prefix_groups: 0,
        prefix_tokens: 0,
        vocab_size: 32000,
        ignore_eos: true,
        temperature: 0.0,
        chat: SyntheticChat { enabled: chat, system_prompt: chat.then(|| "Be brief.".to_owned()) },
        request_format: RequestFormat::ChatTemplate,
        tokenizer: None,
        images: None,
    }
}

fn new_sessions(spec: &SessionSpec, chat: bool, base: u64) -> Result<Sessions, LoadError> {
    let plan = workload(chat);
    Sessions::new(spec, &plan, &Workload::from_plan(&plan).unwrap(), base)
}

fn spec(turns: u32) -> SessionSpec {
    SessionSpec { turns: TokenDist::Fixed { value: turns }, ..SessionSpec::default() }
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_nanos(ms * 1_000_000)
}

fn ids_of(turn: &Turn) -> Vec<u32> {
    match &turn.request.prompt {
        Prompt::Tokens(t) => t.clone(),
        other => panic!("token prompt expected, got {other:?}"),
    }
}

#[test]
fn each_turn_is_the_previous_prompt_its_exact_reply_and_a_new_user_turn() {
    let mut s = new_sessions(&spec(3), false, 100).unwrap();
    let first = s.start().unwrap();
    assert_eq!((first.session, first.turn, first.history_tokens), (100, 0, 0));
    let p0 = ids_of(&first);
    assert!(first.request.max_tokens == 5 && (8..=16).contains(&p0.len()));
    s.on_submitted(100, 0, at(0));
    // An engine that returns its ids: those very ids are the history.
    let reply = [7, 8, 9, 10, 11];
    assert!(s.on_reply(0, Reply { text: None, token_ids: Some(&reply), output_tokens: Some(5) }, at(10)));
    let second = s.take_due(at(10)).unwrap();
    let p1 = ids_of(&second);
    assert_eq!(second.history_tokens as usize, p0.len() + 5);
    assert_eq!(&p1[..p0.len()], &p0[..]);
    assert_eq!(&p1[p0.len()..p0.len() + 5], &reply);
    assert!((8..=16).contains(&(p1.len() - p0.len() - 5)));
    s.on_submitted(100, 1, at(10));
    // An engine without ids or text (the simulator): a stand-in of exactly its count.
    s.on_reply(1, Reply { text: None, token_ids: None, output_tokens: Some(3) }, at(20));
    let third = s.take_due(at(20)).unwrap();
    assert_eq!(ids_of(&third)[..p1.len()], p1[..]);
    assert_eq!(third.history_tokens as usize, p1.len() + 3);
    s.on_submitted(100, 2, at(20));
    s.on_reply(2, Reply { text: None, token_ids: None, output_tokens: Some(5) }, at(35));
    assert_eq!(s.active(), 0);
    assert_eq!(
        s.poll_ended(),
        Some(Ended { end: SessionEnd::Completed, turns: 3, duration: Duration::from_millis(35) })
    );
}

#[test]
fn a_chat_turn_carries_the_reply_text_the_engine_returned() {
    let mut s = new_sessions(&spec(2), true, 0).unwrap();
    let first = s.start().unwrap();
    s.on_submitted(first.session, 0, at(0));
    s.on_reply(0, Reply { text: Some(" sim token of"), token_ids: None, output_tokens: Some(3) }, at(1));
    let second = s.take_due(at(1)).unwrap();
    let Prompt::Chat(ChatPrompt { messages, template: Template::Model }) = &second.request.prompt else {
        panic!("{:?}", second.request.prompt)
    };
    let roles: Vec<_> = messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(messages[2].content, " sim token of");
    let Prompt::Chat(ChatPrompt { messages: asked, .. }) = &first.request.prompt else { panic!() };
    assert_eq!(messages[1].content, asked[1].content);
}

#[test]
fn a_failed_turn_ends_its_session_failed_and_think_time_holds_the_next_turn() {
    let spec = SessionSpec { think_time: Duration::from_millis(500), ..spec(4) };
    let mut s = new_sessions(&spec, false, 0).unwrap();
    let a = s.start().unwrap();
    let b = s.start().unwrap();
    s.on_submitted(a.session, 0, at(0));
    s.on_submitted(b.session, 1, at(0));
    s.on_reply(0, Reply { text: None, token_ids: None, output_tokens: Some(5) }, at(100));
    assert!(s.take_due(at(599)).is_none(), "the think time is not over");
    assert_eq!(s.next_due(), Some(at(600)));
    assert!(s.on_failed(1, at(50)));
    assert_eq!(s.poll_ended().map(|e| (e.end, e.turns)), Some((SessionEnd::Failed, 1)));
    assert_eq!(s.take_due(at(600)).map(|t| (t.session, t.turn, t.due)), Some((a.session, 1, Some(at(600)))));
    assert!(!s.on_failed(99, at(1)), "not a turn");
}

#[test]
fn a_full_context_ends_the_session_or_drops_the_oldest_pairs() {
    // Turns of 8..=16 tokens and replies of 5: the third turn needs at least 8+5+8+5+8+5 = 39.
    let limit = Some(38);
    for (policy, expect_cut) in [(ContextFull::EndSession, true), (ContextFull::DropOldest, false)] {
        let spec = SessionSpec { max_context_tokens: limit, context_full: policy, ..spec(3) };
        let mut s = new_sessions(&spec, false, 0).unwrap();
        let mut turn = s.start().unwrap();
        let mut sent = vec![turn.clone()];
        for id in 0..3 {
            s.on_submitted(turn.session, id, at(id));
            s.on_reply(id, Reply { text: None, token_ids: None, output_tokens: Some(5) }, at(id));
            match s.take_due(at(id)) {
                Some(t) => turn = t,
                None => break,
            }
            sent.push(turn.clone());
        }
        for t in &sent {
            assert!(ids_of(t).len() as u32 + 5 <= 38, "{policy:?}: turn {} is {} tokens", t.turn, ids_of(t).len());
        }
        let ended = s.poll_ended().unwrap();
        if expect_cut {
            assert_eq!((ended.end, ended.turns), (SessionEnd::Cut, 2));
        } else {
            assert_eq!((ended.end, ended.turns), (SessionEnd::Completed, 3));
            assert!(sent[2].dropped_turns >= 1, "{:?}", sent[2].dropped_turns);
        }
    }
}

#[test]
fn exponential_think_times_have_their_mean_and_the_same_seed_the_same_sessions() {
    let spec = SessionSpec { think_time: Duration::from_secs(2), think_time_dist: ThinkDist::Exponential, ..spec(41) };
    let run = || {
        let mut s = new_sessions(&spec, false, 0).unwrap();
        let mut prompts = Vec::new();
        let mut id = 0;
        let mut now = at(0);
        for _ in 0..50 {
            let mut turn = s.start();
            while let Some(t) = turn {
                prompts.push(ids_of(&t));
                s.on_submitted(t.session, id, now);
                s.on_reply(id, Reply { text: None, token_ids: None, output_tokens: Some(5) }, now);
                id += 1;
                now = s.next_due().unwrap_or(now);
                turn = s.take_due(now);
            }
        }
        (prompts, s.think_times())
    };
    let (prompts, (mean, n)) = run();
    assert_eq!(n, 50 * 40);
    let mean = mean / n as f64;
    assert!((mean - 2.0).abs() < 0.1, "mean think time {mean}");
    assert_eq!(run().0, prompts);
}

#[test]
fn rate_tick_queues_turns_whose_think_time_is_over() {
    let spec = SessionSpec { next_turn: NextTurn::RateTick, think_time: Duration::from_millis(10), ..spec(2) };
    let mut s = new_sessions(&spec, false, 0).unwrap();
    let a = s.start().unwrap();
    s.on_submitted(a.session, 0, at(0));
    s.on_reply(0, Reply { text: None, token_ids: None, output_tokens: Some(5) }, at(5));
    assert!(!s.has_queued(at(14)));
    assert!(s.has_queued(at(15)));
    assert_eq!(s.take_queued(at(40)).map(|t| (t.turn, t.due)), Some((1, Some(at(15)))));
}

#[test]
fn a_files_conversations_are_replayed_user_turn_by_user_turn() {
    let path = std::env::temp_dir().join(format!("batchlab-sessions-unit-{}.jsonl", std::process::id()));
    let line = |sys: &str, users: [&str; 2]| {
        serde_json::json!({"messages": [
            {"role": "system", "content": sys}, {"role": "user", "content": users[0]},
            {"role": "assistant", "content": "recorded"}, {"role": "user", "content": users[1]}],
            "max_tokens": 7})
        .to_string()
    };
    let text = format!("{}\n{}\n{}\n", line("A", ["a1", "a2"]), line("B", ["b1", "b2"]), "{\"prompt\": \"plain\"}");
    std::fs::write(&path, text).unwrap();
    let plan = |path: &std::path::Path| WorkloadSpec::File {
        path: path.to_owned(),
        default_max_tokens: 4,
        ignore_eos: true,
        temperature: 0.0,
        dataset: Default::default(),
        request_format: RequestFormat::ChatTemplate,
        tokenizer: None,
    };
    // A plain prompt among them: no conversation to replay.
    let workload = Workload::from_plan(&plan(&path)).unwrap();
    assert!(matches!(
        Sessions::new(&spec(9), &plan(&path), &workload, 0),
        Err(LoadError::SessionsNeedConversations { entry: 2 })
    ));
    let two = format!("{}\n{}\n", line("A", ["a1", "a2"]), line("B", ["b1", "b2"]));
    std::fs::write(&path, two).unwrap();
    let workload = Workload::from_plan(&plan(&path)).unwrap();
    let mut s = Sessions::new(&spec(9), &plan(&path), &workload, 10).unwrap();
    let contents = |t: &Turn| match &t.request.prompt {
        Prompt::Chat(ChatPrompt { messages, .. }) => messages.iter().map(|m| m.content.clone()).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let (a, b, c) = (s.start().unwrap(), s.start().unwrap(), s.start().unwrap());
    assert_eq!(
        (contents(&a), contents(&b), contents(&c)),
        (vec!["A".into(), "a1".into()], vec!["B".into(), "b1".into()], vec!["A".into(), "a1".into()])
    );
    assert_eq!(a.request.max_tokens, 7);
    s.on_submitted(b.session, 0, at(0));
    s.on_reply(0, Reply { text: Some("live"), token_ids: None, output_tokens: Some(1) }, at(1));
    let second = s.take_due(at(1)).unwrap();
    assert_eq!(contents(&second), ["B", "b1", "live", "b2"]);
    s.on_submitted(b.session, 1, at(1));
    s.on_reply(1, Reply { text: Some("end"), token_ids: None, output_tokens: Some(1) }, at(2));
    assert_eq!(s.poll_ended().map(|e| (e.end, e.turns)), Some((SessionEnd::Completed, 2)), "its two user turns");
    std::fs::remove_file(&path).unwrap();
}
