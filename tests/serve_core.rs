//! `ServeCore` in virtual time: the server's continuous batching, with no socket and no clock.

use std::time::Duration;

use batchlab::engine::sim::{CostModel, SimConfig, SimEngine};
use batchlab::engine::{Engine, EngineRequest, FinishReason};
use batchlab::serve::ServeConfig;
use batchlab::serve::core::{Event, NewSequence, RequestId, ServeCore, SubmitError};
use batchlab::serve::metrics::{ServeMetrics, render};
use batchlab::time::{Clock, Timestamp};

fn example() -> SimConfig {
    ServeConfig::example().sim
}

fn core(sim: &SimConfig, max_waiting: usize) -> (ServeCore, prometheus_client::registry::Registry) {
    let (metrics, registry) = ServeMetrics::new("m");
    (ServeCore::new(sim.cost.clone(), sim.scheduler, max_waiting, metrics), registry)
}

fn seq(prompt: u32, output: u32, salt: u32) -> NewSequence {
    NewSequence {
        prompt_ids: (0..prompt).map(|i| i * 7 + salt * 100_003).collect(),
        output_tokens: output,
        max_tokens: output,
        images: Vec::new(),
    }
}

/// Every event from driving the core until idle, from `now`: (id, index, finish, at).
fn drain(core: &mut ServeCore, mut now: Timestamp, until: Option<Timestamp>) -> (Vec<Event>, Timestamp) {
    let mut events = Vec::new();
    for _ in 0..1_000_000 {
        let Some(t) = core.poll_timeout() else { break };
        if until.is_some_and(|u| t > u) {
            now = until.unwrap();
            break;
        }
        now = now.max(t);
        core.handle_timeout(now);
        while let Some(e) = core.poll_event() {
            events.push(e);
        }
    }
    (events, now)
}

fn token_times(events: &[Event], id: RequestId) -> Vec<Timestamp> {
    events.iter().filter_map(|Event::Token { id: i, at, .. }| (*i == id).then_some(*at)).collect()
}

#[test]
fn a_request_alone_takes_what_one_generate_call_of_it_takes() {
    let sim = example();
    for (prompt, output) in [(1, 1), (128, 16), (700, 40), (3000, 5)] {
        let (mut c, _) = core(&sim, 10);
        let t0 = Timestamp::from_nanos(5_000_000_000);
        let ids = c.submit(t0, vec![seq(prompt, output, 1)]).unwrap();
        let (events, _) = drain(&mut c, t0, None);
        let served: Vec<f64> =
            token_times(&events, ids[0]).iter().map(|t| t.saturating_since(t0).as_secs_f64()).collect();

        let (mut engine, clock) = SimEngine::virtual_time(sim.clone());
        engine.start().unwrap();
        let start = clock.now();
        let req = EngineRequest::tokens(seq(prompt, output, 1).prompt_ids, output).with_id(1);
        let out = engine.generate(&[req]).unwrap();
        let simulated: Vec<f64> =
            out[0].stats.token_steps.as_ref().unwrap().times().map(|t| t - start.as_secs_f64()).collect();
        assert_eq!(served.len(), simulated.len(), "{prompt}/{output}");
        for (a, b) in served.iter().zip(&simulated) {
            assert!((a - b).abs() < 1e-6, "{prompt}/{output}: served {a} vs generate {b}");
        }
    }
}

#[test]
fn a_request_joins_the_running_batch_between_steps() {
    let sim = example();
    let (mut c, _) = core(&sim, 10);
    let t0 = Timestamp::from_nanos(1_000_000_000);
    let a = c.submit(t0, vec![seq(64, 50, 1)]).unwrap()[0];
    // Let `a` decode for a while, then `b` arrives mid-step.
    let (mut events, now) = drain(&mut c, t0, Some(t0.saturating_add(Duration::from_millis(40))));
    let b_arrives = now.saturating_add(Duration::from_micros(700));
    let b = c.submit(b_arrives, vec![seq(64, 5, 2)]).unwrap()[0];
    let (more, _) = drain(&mut c, now, None);
    events.extend(more);
    let (ta, tb) = (token_times(&events, a), token_times(&events, b));
    assert_eq!((ta.len(), tb.len()), (50, 5));
    // b is admitted at the next step boundary after it arrived, long before a finishes, and
    // its tokens come at a's step ends: one batch.
    let boundary = *ta.iter().find(|&&t| t >= b_arrives).unwrap();
    assert!(tb[0] > boundary && tb[4] < *ta.last().unwrap(), "{tb:?}");
    assert!(tb.iter().all(|t| ta.contains(t)), "b's tokens at a's step ends");
    let finishes: Vec<_> = events.iter().filter(|Event::Token { finish, .. }| finish.is_some()).collect();
    assert_eq!(finishes.len(), 2);
    assert!(matches!(finishes[0], Event::Token { finish: Some(FinishReason::Length), .. }));
}

#[test]
fn past_max_waiting_a_request_is_refused_whole() {
    let mut sim = example();
    sim.scheduler.max_num_seqs = 1;
    let (mut c, _) = core(&sim, 2);
    let t0 = Timestamp::from_nanos(1);
    c.submit(t0, vec![seq(8, 4, 1)]).unwrap();
    c.handle_timeout(t0); // admitted: running, not waiting
    c.submit(t0, vec![seq(8, 4, 2)]).unwrap();
    let e = c.submit(t0, vec![seq(8, 4, 3), seq(8, 4, 4)]).unwrap_err();
    assert_eq!(e, SubmitError::Overloaded { waiting: 1, max_waiting: 2 });
    assert_eq!(c.occupancy(), (1, 1));
    c.submit(t0, vec![seq(8, 4, 5)]).unwrap();
    assert!(c.submit(t0, vec![seq(8, 4, 6)]).is_err());
}

#[test]
fn a_request_too_long_for_the_kv_cache_is_refused_and_the_prompt_or_the_output_is_blamed() {
    let sim = example(); // 1024 blocks of 16 tokens: 16,384 tokens
    let (mut c, _) = core(&sim, 10);
    let t0 = Timestamp::from_nanos(1);
    // The prompt alone is too long: no max_tokens could make it fit.
    let e = c.submit(t0, vec![seq(8, 4, 1), seq(16_385, 1, 2)]).unwrap_err();
    assert!(matches!(e, SubmitError::PromptTooLong { index: 1, tokens: 16_385, .. }), "{e}");
    // The prompt fits with one output token, not with its output: the output's fault.
    let e = c.submit(t0, vec![seq(16_384, 1, 3), seq(8, 4, 4), seq(16_000, 400, 5)]).unwrap_err();
    assert!(matches!(e, SubmitError::Unschedulable(_)), "{e}");
    assert_eq!((c.live_requests(), c.occupancy()), (0, (0, 0)), "all or nothing");
    c.submit(t0, vec![seq(16_384, 1, 6)]).unwrap();
}

#[test]
fn a_request_with_more_prompts_than_may_ever_wait_is_refused_as_impossible_not_overloaded() {
    let (mut c, _) = core(&example(), 2);
    let t0 = Timestamp::from_nanos(1);
    let e = c.submit(t0, vec![seq(8, 4, 1), seq(8, 4, 2), seq(8, 4, 3)]).unwrap_err();
    assert_eq!(e, SubmitError::TooManyPrompts { prompts: 3, max_waiting: 2 });
    assert_eq!(c.live_requests(), 0);
    // As many as may wait: taken.
    assert_eq!(c.submit(t0, vec![seq(8, 4, 1), seq(8, 4, 2)]).unwrap().len(), 2);
}

#[test]
fn a_cancelled_request_frees_its_blocks_at_once_and_says_nothing_more() {
    let sim = example();
    let (mut c, registry) = core(&sim, 10);
    let t0 = Timestamp::from_nanos(1);
    let a = c.submit(t0, vec![seq(512, 100, 1)]).unwrap()[0];
    let (events, now) = drain(&mut c, t0, Some(t0.saturating_add(Duration::from_millis(30))));
    assert!(!events.is_empty());
    assert!(render(&registry).contains("vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 1"));
    c.cancel(now, a);
    let text = render(&registry);
    assert!(text.contains("vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 0"), "{text}");
    assert!(text.contains("vllm:kv_cache_usage_perc{model_name=\"m\",engine=\"0\"} 0.0"), "{text}");
    assert!(text.contains("finished_reason=\"abort\"} 1"), "{text}");
    let (after, _) = drain(&mut c, now, None);
    assert!(after.is_empty(), "{after:?}");
    assert_eq!(c.live_requests(), 0);
}

#[test]
fn the_core_holds_nothing_after_many_requests() {
    // Zero cost, vLLM's limits: the server's scale configuration.
    let sim = SimConfig {
        cost: CostModel::free(),
        scheduler: batchlab::engine::sim::DEFAULT_SCHEDULER,
        ..SimConfig::default()
    };
    let (mut c, _) = core(&sim, 100_000);
    let mut now = Timestamp::from_nanos(1);
    let mut tokens = 0;
    for round in 0..200u32 {
        for i in 0..100 {
            c.submit(now, vec![seq(16, 16, round * 100 + i)]).unwrap();
        }
        let (events, t) = drain(&mut c, now, None);
        tokens += events.len();
        now = t.saturating_add(Duration::from_micros(1));
        assert_eq!(c.live_requests(), 0);
    }
    assert_eq!(tokens, 200 * 100 * 16);
}

/// A chat prompt whose user turn, `text`, carries images of `(hash, tokens)`.
fn chat_with_images(text: &str, images: &[(u64, u32)]) -> batchlab::engine::Prompt {
    use batchlab::engine::chat::{Message, RequestFormat};
    use batchlab::engine::image::Image;
    let images = images
        .iter()
        .map(|&(hash, tokens)| Image {
            url: "data:".into(),
            width: 4,
            height: 4,
            bytes: 1,
            hash,
            pooled: false,
            tokens,
        })
        .collect();
    RequestFormat::ChatTemplate.prompt(vec![Message::new("user", text).with_images(images)])
}

/// The encoder cost is the simulated engine's: a request's images that miss the encoder cache cost
/// their tokens in the step that first schedules it, a hit nothing, and a request alone gets the
/// token times one generate call of it gets.
#[test]
fn images_cost_the_encoder_as_in_the_simulated_engine() {
    use batchlab::engine::sim::encoder::EncoderInput;
    let sim = SimConfig {
        cost: CostModel { encoder_per_image_token: Duration::from_micros(2), ..example().cost },
        ..example()
    };
    let (mut c, registry) = core(&sim, 10);
    let (mut engine, clock) = SimEngine::virtual_time(sim.clone());
    engine.start().unwrap();
    let mut t0 = Timestamp::from_nanos(5_000_000_000);
    let mut firsts = Vec::new();
    // The same picture twice (a miss, then a hit), then another one; texts that differ in their
    // first block, so the prefix cache never hits.
    for (id, images) in [(1, [(7, 576)]), (2, [(7, 576)]), (3, [(8, 100)])] {
        let prompt = chat_with_images(&format!("{id} says hi"), &images);
        let prompt_ids = batchlab::engine::sim::prompt::prompt_ids(&prompt).unwrap();
        let images = images.iter().map(|&(hash, tokens)| EncoderInput { hash, tokens }).collect();
        let ids = c.submit(t0, vec![NewSequence { prompt_ids, output_tokens: 4, max_tokens: 4, images }]).unwrap();
        let (events, end) = drain(&mut c, t0, None);
        let served: Vec<f64> =
            token_times(&events, ids[0]).iter().map(|t| t.saturating_since(t0).as_secs_f64()).collect();
        let start = clock.now();
        let out = engine.generate(&[EngineRequest::new(prompt, 4).with_id(id)]).unwrap();
        let simulated: Vec<f64> =
            out[0].stats.token_steps.as_ref().unwrap().times().map(|t| t - start.as_secs_f64()).collect();
        assert_eq!(served.len(), simulated.len());
        for (a, b) in served.iter().zip(&simulated) {
            assert!((a - b).abs() < 1e-6, "request {id}: served {a} vs generate {b}");
        }
        firsts.push(served[0]);
        t0 = end.saturating_add(Duration::from_secs(1));
    }
    // The miss paid 576 × 2 µs more than the hit of the same length.
    assert!((firsts[0] - firsts[1] - 576.0 * 2e-6).abs() < 1e-9, "{firsts:?}");
    let text = render(&registry);
    let counter =
        |name: &str| text.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!((counter("vllm:mm_cache_queries_total"), counter("vllm:mm_cache_hits_total")), (Some(3.0), Some(1.0)));
}

/// An embeddings request (`submit_pooling`) is its prefill alone: one event per input, at the end
/// of the step that prefills it, the time a generation's first token of the same prompt comes,
/// and no decode step; no generated token in `/metrics`.
#[test]
fn an_embedding_is_its_prefill_alone() {
    let sim = example();
    let t0 = Timestamp::from_nanos(5_000_000_000);
    let inputs = [seq(128, 1, 1).prompt_ids, seq(700, 1, 2).prompt_ids];
    let (mut pooled, registry) = core(&sim, 10);
    let ids = pooled.submit_pooling(t0, inputs.to_vec()).unwrap();
    let (events, _) = drain(&mut pooled, t0, None);
    let (mut generated, _) = core(&sim, 10);
    let gen_ids = generated
        .submit(t0, inputs.iter().map(|p| NewSequence { prompt_ids: p.clone(), ..seq(1, 16, 0) }).collect())
        .unwrap();
    let (gen_events, _) = drain(&mut generated, t0, None);
    for (id, gen_id) in ids.iter().zip(&gen_ids) {
        let mine: Vec<&Event> = events.iter().filter(|Event::Token { id: i, .. }| i == id).collect();
        assert_eq!(mine.len(), 1, "one event per input: {mine:?}");
        let Event::Token { index, finish, at, .. } = mine[0];
        assert_eq!((*index, finish.clone()), (0, Some(FinishReason::Stop)));
        assert_eq!(Some(at), token_times(&gen_events, *gen_id).first(), "at the end of its prefill");
    }
    let text = render(&registry);
    let line = text.lines().find(|l| l.starts_with("vllm:generation_tokens_total")).unwrap();
    assert!(line.ends_with(" 0"), "{line}");
    assert_eq!(pooled.live_requests(), 0);
}

/// A profile fitted from a URL delays each request by its frontend before the engine sees it:
/// alone, its first token comes the frontend plus one step after it arrived; two requests overlap
/// in the frontend (each is delayed once, not one after the other), and one that is still in the
/// frontend when a step starts joins the step after it is due, not the one running.
#[test]
fn the_frontend_delays_each_request_before_it_joins_the_waiting_queue() {
    let ms = Duration::from_millis;
    let cost = CostModel { decode_step: ms(5), frontend_overhead: ms(12), ..CostModel::free() };
    let sim = SimConfig { cost, ..example() };
    let (mut c, registry) = core(&sim, 10);
    let t0 = Timestamp::from_nanos(1_000_000_000);
    let at = |t: Timestamp| t.saturating_since(t0).as_millis();
    let a = c.submit(t0, vec![seq(8, 3, 1)]).unwrap()[0];
    assert_eq!(c.occupancy(), (0, 0), "in the frontend, not yet waiting");
    assert_eq!(c.live_requests(), 1);
    assert_eq!(c.poll_timeout(), Some(t0.saturating_add(ms(12))), "the engine wakes when it is due");
    let b = c.submit(t0.saturating_add(ms(1)), vec![seq(8, 3, 2)]).unwrap()[0];
    let (events, now) = drain(&mut c, t0, Some(t0.saturating_add(ms(20))));
    // a: due at 12, steps end at 17 (its first token); b, due at 13, joins the step from 17.
    assert_eq!(token_times(&events, a).iter().map(|t| at(*t)).collect::<Vec<_>>(), [17]);
    let late = c.submit(now, vec![seq(8, 2, 3)]).unwrap()[0];
    let (events, _) = drain(&mut c, now, None);
    assert_eq!(token_times(&events, a).iter().map(|t| at(*t)).collect::<Vec<_>>(), [22, 27]);
    assert_eq!(token_times(&events, b).iter().map(|t| at(*t)).collect::<Vec<_>>(), [22, 27, 32]);
    // Arrived at 20, due at 32: the step from 27 to 32 runs without it.
    assert_eq!(token_times(&events, late).iter().map(|t| at(*t)).collect::<Vec<_>>(), [37, 42]);
    assert_eq!(c.live_requests(), 0);
    // TTFT counts from arrival, the frontend included: 17, 22 - 1 and 37 - 20 ms.
    let text = render(&registry);
    let value = |name: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("vllm:time_to_first_token_seconds_count"), 3.0);
    assert!((value("vllm:time_to_first_token_seconds_sum") - 0.055).abs() < 1e-9, "{text}");
}

/// A frontend that serves one request at a time (`frontend_per_request`, vLLM's one event loop):
/// three requests that arrive together reach the engine one service apart, after the hop
/// (`frontend_overhead`), so the engine starts on the first alone and the others join later
/// steps; one that arrives after the worker is free waits for no one.
#[test]
fn a_frontend_that_serves_one_request_at_a_time_spreads_a_wave() {
    let ms = Duration::from_millis;
    let cost =
        CostModel { decode_step: ms(5), frontend_overhead: ms(2), frontend_per_request: ms(3), ..CostModel::free() };
    let sim = SimConfig { cost, ..example() };
    let (mut c, _registry) = core(&sim, 10);
    let t0 = Timestamp::from_nanos(1_000_000_000);
    let at = |t: Timestamp| t.saturating_since(t0).as_millis();
    let wave: Vec<_> = (0..3).map(|i| c.submit(t0, vec![seq(8, 2, i)]).unwrap()[0]).collect();
    // Due at 3 + 2 = 5, 6 + 2 = 8 and 9 + 2 = 11 ms.
    assert_eq!(c.poll_timeout(), Some(t0.saturating_add(ms(5))), "the first is due after one service and the hop");
    let (events, now) = drain(&mut c, t0, None);
    let firsts: Vec<u128> = wave.iter().map(|id| at(token_times(&events, *id)[0])).collect();
    // The first's step runs 5..10; the second (due 8) joins the step from 10; the third (due 11)
    // the step from 15.
    assert_eq!(firsts, [10, 15, 20]);
    // Alone, long after: one service and the hop.
    let alone = c.submit(now.saturating_add(ms(100)), vec![seq(8, 1, 9)]).unwrap()[0];
    let (events, _) = drain(&mut c, now.saturating_add(ms(100)), None);
    let first = token_times(&events, alone)[0].saturating_since(now.saturating_add(ms(100)));
    assert_eq!(first, ms(3 + 2 + 5));
}

/// A frontend that hands a burst on together (`frontend_hands_off_bursts`): three requests that
/// arrive together are served one after another (3 ms each) and reach the engine together when
/// the worker has served the last (9 ms, then the 2 ms hop), so one step prefills all three; one
/// that arrives after the worker is free is a burst of its own.
#[test]
fn a_frontend_that_hands_a_burst_on_together_delivers_a_wave_to_one_step() {
    let ms = Duration::from_millis;
    let cost = CostModel {
        decode_step: ms(5),
        frontend_overhead: ms(2),
        frontend_per_request: ms(3),
        frontend_hands_off_bursts: true,
        ..CostModel::free()
    };
    let sim = SimConfig { cost, ..example() };
    let (mut c, _registry) = core(&sim, 10);
    let t0 = Timestamp::from_nanos(1_000_000_000);
    let at = |t: Timestamp| t.saturating_since(t0).as_millis();
    let wave: Vec<_> = (0..3).map(|i| c.submit(t0, vec![seq(8, 2, i)]).unwrap()[0]).collect();
    // One more joins the burst while the worker still serves it (at 4 ms): served 9..12, all due at 14.
    let (events, _) = drain(&mut c, t0, Some(t0.saturating_add(ms(4))));
    assert!(events.is_empty(), "{events:?}");
    let late = c.submit(t0.saturating_add(ms(4)), vec![seq(8, 2, 3)]).unwrap()[0];
    let (events, now) = drain(&mut c, t0.saturating_add(ms(4)), None);
    let firsts: Vec<u128> = wave.iter().chain([&late]).map(|id| at(token_times(&events, *id)[0])).collect();
    // One step from 14 to 19 prefills all four.
    assert_eq!(firsts, [19, 19, 19, 19]);
    // Alone, long after: one service and the hop, as a worker that hands each on gives it.
    let alone = c.submit(now.saturating_add(ms(100)), vec![seq(8, 1, 9)]).unwrap()[0];
    let (events, _) = drain(&mut c, now.saturating_add(ms(100)), None);
    let first = token_times(&events, alone)[0].saturating_since(now.saturating_add(ms(100)));
    assert_eq!(first, ms(3 + 2 + 5));
}
