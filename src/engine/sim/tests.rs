use proptest::prelude::*;

use super::kv::KvCache;
use super::scheduler::{PrefixSource, Schedule, SeqSpec, schedule, schedule_with};
use super::*;
use crate::engine::{Engine, EngineRequest, ResolvedEngineConfig};
use crate::time::Timestamp;

fn batch(n: u64, prompt: usize, out: u32) -> Vec<EngineRequest> {
    (0..n).map(|i| EngineRequest::tokens(unique_prompt(i, prompt), out).with_id(i)).collect()
}

/// A prompt no other request shares (so the prefix cache never hits).
fn unique_prompt(id: u64, len: usize) -> Vec<u32> {
    (0..len).map(|j| (id as u32).wrapping_mul(100_003).wrapping_add(j as u32)).collect()
}

fn engine(config: SimConfig) -> (SimEngine, VirtualClock) {
    let (mut e, c) = SimEngine::virtual_time(config);
    e.start().expect("start");
    (e, c)
}

fn limits(max_num_seqs: u32, budget: u32, blocks: u32) -> ResolvedEngineConfig {
    ResolvedEngineConfig {
        max_num_seqs,
        max_num_batched_tokens: budget,
        num_kv_blocks: blocks,
        block_size: 16,
        prefix_caching: false,
        chunked_prefill: true,
    }
}

fn secs(ms: f64) -> f64 {
    ms / 1e3
}

#[test]
fn step_times_follow_the_formula() {
    let cost = CostModel {
        fixed_overhead: Duration::from_millis(1),
        request_overhead: Duration::from_micros(50),
        decode_step: Duration::from_millis(2),
        prefill_per_token: Duration::from_micros(10),
        per_seq: Duration::from_micros(100),
        context_per_1k_tokens: Duration::from_micros(500),
        tokens_squared_per_1m: Duration::from_millis(1),
        encoder_per_image_token: Duration::ZERO,
        finish_overhead: Duration::from_micros(300),
        finish_per_request: Duration::from_micros(100),
        frontend_overhead: Duration::ZERO,
        frontend_per_request: Duration::ZERO,
        frontend_hands_off_bursts: false,
        eos_probability: 0.0,
    };
    let (mut e, clock) =
        engine(SimConfig { seed: 1, cost, scheduler: limits(256, 8192, 1000), ..SimConfig::default() });
    let t0 = clock.now().as_secs_f64();
    let out = e.generate(&batch(2, 100, 3)).expect("generate");
    // Overhead 1 ms + 2 × 50 µs = 1.1 ms. Step 0: both prompts (P = 200, S = 2, C = 200, T = 200):
    // 2 + 2 + 0.2 + 0.1 + 0.04 = 4.34 ms. Steps 1 and 2 decode both (S = 2, C = 202 then 204,
    // T = 2): 2 + 0.2 + 0.101 + 0.000004 = 2.301004 ms, then 2.302004 ms.
    for o in &out {
        assert_eq!(o.output_tokens, Some(3));
        assert!((o.stats.scheduled_ts.unwrap() - t0 - secs(1.1)).abs() < 1e-9);
        assert!((o.stats.first_token_ts.unwrap() - t0 - secs(5.44)).abs() < 1e-9);
        assert!((o.stats.last_token_ts.unwrap() - t0 - secs(10.043008)).abs() < 1e-9);
        // One time per token: the prefill step's first token, then one per decode step.
        let tokens: Vec<f64> = o.stats.token_steps.as_ref().expect("the simulator times every token").times().collect();
        let expected = [secs(5.44), secs(7.741004), secs(10.043008)];
        assert_eq!(tokens.len(), expected.len());
        assert!(tokens.iter().zip(expected).all(|(t, e)| (t - t0 - e).abs() < 1e-9), "{tokens:?}");
    }
    // The call returns after the tail: 0.3 ms + 2 × 0.1 ms.
    assert_eq!(clock.now(), Timestamp::from_secs_f64(t0 + secs(10.543008)).unwrap());
    // `generate_ns` of the same batch's schedule is that whole call.
    let specs: Vec<SeqSpec> = (0..2)
        .map(|_| SeqSpec { prompt_len: 100, output_len: 3, prefix: PrefixSource::Known(0), encoder_tokens: 0 })
        .collect();
    let replayed = scheduler::replay(&limits(256, 8192, 1000), &specs).expect("replay");
    assert!((e.config.cost.generate_ns(&replayed, 2) - 10.543008e6).abs() < 1e-3);
}

#[test]
fn continuous_batching_admits_waiting_requests_as_others_finish() {
    let cost = CostModel { decode_step: Duration::from_millis(1), ..CostModel::free() };
    let (mut e, _) = engine(SimConfig { seed: 1, cost, scheduler: limits(2, 8192, 1000), ..SimConfig::default() });
    // Two slots; request 0 is short, so request 2 takes its slot while request 1 still runs.
    let mut b = batch(3, 8, 10);
    b[0].max_tokens = 2;
    let out = e.generate(&b).expect("generate");
    let ts = |i: usize| (out[i].stats.scheduled_ts.unwrap(), out[i].stats.last_token_ts.unwrap());
    assert_eq!(ts(0).0, ts(1).0, "the first two start together");
    assert!(ts(2).0 > ts(0).0 && ts(2).0 < ts(1).1, "the third joins before the second finishes");
    assert!((ts(2).0 - ts(0).1).abs() < 1e-9, "in the step after the first finished");
}

#[test]
fn continuous_batching_beats_waves() {
    // Eight requests, four slots, outputs alternating 4 and 64 tokens: waves of four wait for
    // their longest member; continuous batching refills a slot as soon as it frees.
    let cost = CostModel::default();
    let config = SimConfig { seed: 1, cost, scheduler: limits(4, 8192, 10_000), ..SimConfig::default() };
    let mut b = batch(8, 32, 64);
    for r in b.iter_mut().step_by(2) {
        r.max_tokens = 4;
    }
    let (mut continuous, clock) = engine(config.clone());
    let t0 = clock.now();
    continuous.generate(&b).expect("generate");
    let continuous_time = clock.now().saturating_since(t0);

    let (mut waves, clock) = engine(config);
    let t0 = clock.now();
    for wave in b.chunks(4) {
        waves.generate(wave).expect("generate");
    }
    let wave_time = clock.now().saturating_since(t0);
    assert!(continuous_time < wave_time, "continuous {continuous_time:?} vs waves {wave_time:?}");
}

fn spec(prompt: u32, output: u32, ids: Vec<u32>) -> SeqSpec {
    SeqSpec { prompt_len: prompt, output_len: output, prefix: PrefixSource::Tokens(ids), encoder_tokens: 0 }
}

/// The invariants of any schedule: budget, sequences and KV cache never exceeded, every
/// sequence produces exactly its tokens, in order.
fn check_schedule(config: &ResolvedEngineConfig, specs: &[SeqSpec], s: &Schedule) {
    for (k, step) in s.steps.iter().enumerate() {
        let tokens = step.load.prefill_tokens + step.load.decode_seqs;
        assert!(tokens <= u64::from(config.max_num_batched_tokens), "step {k}: {tokens} tokens");
        assert!(step.running <= config.max_num_seqs as usize, "step {k}: {} running", step.running);
        assert!(step.kv_blocks_used <= u64::from(config.num_kv_blocks), "step {k}: {} blocks", step.kv_blocks_used);
        assert!(step.scheduled > 0, "step {k} schedules nothing");
    }
    for (i, (sp, seq)) in specs.iter().zip(&s.seqs).enumerate() {
        if sp.output_len == 0 {
            assert_eq!(seq.first_token, None);
            continue;
        }
        let (Some(start), Some(first), Some(last)) = (seq.first_scheduled, seq.first_token, seq.last_token) else {
            panic!("request {i} never finished: {seq:?}");
        };
        assert!(start <= first && first <= last, "request {i}: {seq:?}");
        // One token per step at most after the first.
        assert!(last - first >= (sp.output_len - 1) as usize, "request {i}: {seq:?}");
        if seq.preemptions == 0 {
            assert_eq!(last - first, (sp.output_len - 1) as usize, "request {i} was never preempted: {seq:?}");
        }
    }
}

proptest! {
    #[test]
    fn schedules_respect_every_limit(
        lens in proptest::collection::vec((1u32..200, 0u32..40), 1..40),
        max_num_seqs in 1u32..16,
        budget in 16u32..512,
        spare_blocks in 0u32..64,
        prefix_caching: bool,
        shared_prefix in 0usize..64,
    ) {
        let longest = lens.iter().map(|(p, o)| p + o).max().unwrap_or(1);
        let config = ResolvedEngineConfig {
            max_num_seqs,
            max_num_batched_tokens: budget,
            num_kv_blocks: longest.div_ceil(16) + spare_blocks,
            block_size: 16,
            prefix_caching,
            chunked_prefill: true,
        };
        let specs: Vec<SeqSpec> = lens
            .iter()
            .enumerate()
            .map(|(i, &(p, o))| {
                let ids = (0..p).map(|j| if (j as usize) < shared_prefix { j } else { 1_000_000 + i as u32 * 1000 + j }).collect();
                spec(p, o, ids)
            })
            .collect();
        let mut kv = KvCache::new(config.num_kv_blocks);
        let s = schedule(&config, &mut kv, &specs).expect("schedulable");
        check_schedule(&config, &specs, &s);
        // Everything is freed at the end: the whole cache is free again.
        prop_assert_eq!(kv.used_blocks(), 0);
        // Without prefix caching, the calibration replay of the batch gives the same schedule,
        // preemptions included (the fit relies on it).
        if !prefix_caching {
            let known: Vec<SeqSpec> = specs.iter().zip(&s.seqs)
                .map(|(sp, q)| SeqSpec { prefix: PrefixSource::Known(q.cached_tokens), ..sp.clone() })
                .collect();
            prop_assert_eq!(&scheduler::replay(&config, &known).expect("replay"), &s);
        }
    }
}

proptest! {
    /// Decode steps run at once give exactly the schedule of running them one by one, and leave
    /// the KV cache (blocks, eviction order, prefix cache) exactly as they do, over several
    /// calls: preemptions, chunked prefill, shared prefixes and block sizes included.
    #[test]
    fn decode_runs_are_exactly_steps_one_by_one(
        calls in proptest::collection::vec(proptest::collection::vec((1u32..120, 1u32..60), 1..24), 1..4),
        max_num_seqs in 1u32..32,
        budget in 8u32..600,
        spare_blocks in 0u32..80,
        block_size in prop_oneof![Just(1u32), Just(4), Just(16)],
        prefix_caching: bool,
        chunked_prefill: bool,
        shared_prefix in 0usize..64,
    ) {
        let longest = calls.iter().flatten().map(|(p, o)| p + o).max().unwrap_or(1);
        let config = ResolvedEngineConfig {
            max_num_seqs,
            max_num_batched_tokens: if chunked_prefill { budget } else { budget.max(longest) },
            num_kv_blocks: longest.div_ceil(block_size) + spare_blocks,
            block_size,
            prefix_caching,
            chunked_prefill,
        };
        let (mut at_once, mut one_by_one) = (KvCache::new(config.num_kv_blocks), KvCache::new(config.num_kv_blocks));
        for (c, lens) in calls.iter().enumerate() {
            let specs: Vec<SeqSpec> = lens
                .iter()
                .enumerate()
                .map(|(i, &(p, o))| {
                    let ids = (0..p)
                        .map(|j| if (j as usize) < shared_prefix { j } else { 1_000_000 + (c * 100 + i) as u32 * 1000 + j })
                        .collect();
                    spec(p, o, ids)
                })
                .collect();
            let fast = schedule_with(&config, &mut at_once, specs.clone(), true).expect("schedulable");
            let slow = schedule_with(&config, &mut one_by_one, specs.clone(), false).expect("schedulable");
            prop_assert_eq!(&fast, &slow, "call {}", c);
            prop_assert_eq!(format!("{at_once:?}"), format!("{one_by_one:?}"), "call {}", c);
        }
    }
}

#[test]
fn a_full_kv_cache_preempts_the_newest_and_everyone_finishes() {
    // Four requests of 64 + 64 tokens need 8 blocks each at the end; 20 blocks hold two.
    let config = limits(4, 8192, 20);
    let specs: Vec<SeqSpec> = (0..4).map(|i| spec(64, 64, unique_prompt(i, 64))).collect();
    let s = schedule(&config, &mut KvCache::new(20), &specs).expect("schedulable");
    check_schedule(&config, &specs, &s);
    assert!(s.steps.iter().any(|st| st.preempted > 0), "a preemption");
    assert_eq!(s.seqs[0].preemptions, 0, "the oldest is never the victim");
    assert!(s.seqs[3].preemptions > 0, "the newest is: {:?}", s.seqs);
    // A preempted request recomputes its prompt and generated tokens.
    let prefill: u64 = s.steps.iter().map(|st| st.load.prefill_tokens).sum();
    assert!(prefill > 4 * 64, "recomputation shows as prefill: {prefill}");
}

#[test]
fn chunked_prefill_mixes_prefill_chunks_with_decodes() {
    // A 1000-token prompt arrives behind a decoding request; with 256 tokens a step it is
    // prefilled in chunks, and the decode goes on in the same steps.
    let config = limits(4, 256, 1000);
    let specs = vec![spec(10, 20, unique_prompt(0, 10)), spec(1000, 2, unique_prompt(1, 1000))];
    let s = schedule(&config, &mut KvCache::new(1000), &specs).expect("schedulable");
    check_schedule(&config, &specs, &s);
    // Step 0: request 0's 10 tokens + 246 of the long prompt; steps 1 and 2: one decode + 255;
    // step 3: one decode + the last 244, which yields the long request's first token.
    let loads: Vec<(u64, u64)> = s.steps[..4].iter().map(|st| (st.load.prefill_tokens, st.load.decode_seqs)).collect();
    assert_eq!(loads, [(256, 0), (255, 1), (255, 1), (244, 1)]);
    assert_eq!(s.seqs[1].first_token, Some(3));
    // Without chunked prefill the long prompt cannot fit a step at all.
    let whole = ResolvedEngineConfig { chunked_prefill: false, ..config };
    assert!(schedule(&whole, &mut KvCache::new(1000), &specs).is_err());
}

#[test]
fn prefix_cache_hits_cut_prefill_within_and_across_generate_calls() {
    let cost = CostModel::default();
    let cached = |prefix_caching: bool| {
        let scheduler = ResolvedEngineConfig { prefix_caching, ..limits(256, 8192, 10_000) };
        let (mut e, clock) = engine(SimConfig { seed: 1, cost: cost.clone(), scheduler, ..SimConfig::default() });
        // Eight requests share a 256-token system prompt, then differ.
        let shared: Vec<u32> = (0..256).collect();
        let reqs: Vec<EngineRequest> = (0..8)
            .map(|i| {
                let mut p = shared.clone();
                p.extend(unique_prompt(i + 1, 32));
                EngineRequest::tokens(p, 4).with_id(i)
            })
            .collect();
        let t0 = clock.now();
        let first = e.generate(&reqs[..1]).expect("generate");
        let rest = e.generate(&reqs[1..]).expect("generate");
        let again = e.generate(&reqs[..1]).expect("generate");
        let hits: Vec<u32> = first.iter().chain(&rest).chain(&again).map(|o| o.stats.cached_tokens.unwrap()).collect();
        (hits, clock.now().saturating_since(t0))
    };
    let (hits, with) = cached(true);
    assert_eq!(hits[0], 0, "nothing cached yet");
    assert!(hits[1..8].iter().all(|&h| h == 256), "the shared prefix hits across calls: {hits:?}");
    // 288 tokens are 18 full blocks, but the last token is always computed: 17 blocks hit.
    assert_eq!(hits[8], 272, "a repeated prompt hits its full blocks");
    let (no_hits, without) = cached(false);
    assert!(no_hits.iter().all(|&h| h == 0));
    assert!(with < without, "hits cut prefill time: {with:?} vs {without:?}");
}

#[test]
fn the_prefix_cache_evicts_least_recently_used_blocks() {
    // 40 blocks: prompt A (8 blocks) is cached, then 8 other prompts push it out.
    let config = ResolvedEngineConfig { prefix_caching: true, ..limits(1, 8192, 40) };
    let mut kv = KvCache::new(40);
    let a = spec(129, 1, unique_prompt(0, 129));
    assert_eq!(schedule(&config, &mut kv, std::slice::from_ref(&a)).unwrap().seqs[0].cached_tokens, 0);
    assert_eq!(
        schedule(&config, &mut kv, std::slice::from_ref(&a)).unwrap().seqs[0].cached_tokens,
        128,
        "still cached"
    );
    let others: Vec<SeqSpec> = (1..9).map(|i| spec(129, 1, unique_prompt(i, 129))).collect();
    schedule(&config, &mut kv, &others).unwrap();
    assert_eq!(schedule(&config, &mut kv, std::slice::from_ref(&a)).unwrap().seqs[0].cached_tokens, 0, "evicted");
}

#[test]
fn a_request_larger_than_the_kv_cache_fails_its_batch() {
    let (mut e, _) = engine(SimConfig { seed: 1, scheduler: limits(4, 8192, 4), ..SimConfig::default() });
    let err = e.generate(&batch(1, 100, 10)).unwrap_err();
    assert!(err.to_string().contains("needs 7 KV blocks"), "{err}");
}

#[test]
fn doubling_decode_step_makes_a_run_slower() {
    let run = |decode_step: Duration| {
        let cost = CostModel { decode_step, ..CostModel::default() };
        let (mut e, clock) = engine(SimConfig { seed: 1, cost, ..SimConfig::default() });
        let t0 = clock.now();
        e.generate(&batch(16, 64, 32)).expect("generate");
        clock.now().saturating_since(t0)
    };
    let (once, twice) = (run(Duration::from_millis(1)), run(Duration::from_millis(2)));
    assert!(twice > once + Duration::from_millis(30), "{once:?} vs {twice:?}");
}

#[test]
fn same_seed_same_outputs() {
    let cost = CostModel { eos_probability: 0.1, ..CostModel::default() };
    let run = || {
        let (mut e, _) = engine(SimConfig { seed: 9, cost: cost.clone(), ..SimConfig::default() });
        let mut b = batch(16, 32, 50);
        for r in &mut b {
            r.ignore_eos = false;
        }
        e.generate(&b).expect("generate")
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert!(a.iter().any(|o| o.output_tokens < Some(50)), "some EOS before max_tokens");
}

#[test]
fn start_reports_the_resolved_configuration() {
    let scheduler = limits(7, 99, 123);
    let (mut e, _) = SimEngine::virtual_time(SimConfig { scheduler, ..SimConfig::default() });
    assert_eq!(e.start().unwrap().info.resolved_config, Some(scheduler));
}

#[test]
fn a_prompt_prepared_ahead_gives_exactly_what_the_engine_works_out_itself() {
    use crate::engine::chat::{ChatPrompt, Message, Template};
    let scheduler = ResolvedEngineConfig { prefix_caching: true, ..limits(64, 4096, 200) };
    let config = SimConfig { seed: 7, scheduler, ..SimConfig::default() };
    let (mut itself, _) = engine(config.clone());
    let (mut ahead, _) = engine(config.clone());
    let prep = super::request_prep(scheduler);
    // Shared prefixes (so the cache hits and evicts), text and chat prompts, over several calls.
    let request = |k: u64| -> EngineRequest<()> {
        match k % 3 {
            0 => EngineRequest::tokens(
                (0..40 + k as u32).map(|t| if t < 32 { t } else { t * 7 + k as u32 }).collect(),
                4,
            ),
            1 => EngineRequest::new(Prompt::Text(format!("{} and then {k}", "a shared beginning ".repeat(6))), 3),
            _ => {
                let messages = vec![Message::new("user", format!("question {k}"))];
                EngineRequest::new(Prompt::Chat(ChatPrompt { messages, template: Template::Model }), 5)
            }
        }
    };
    let mut id = 0;
    for call in 0..4u64 {
        let (mut plain, mut prepared) = (Vec::new(), Vec::new());
        for k in call * 10..call * 10 + 10 {
            let mut r = request(k);
            plain.push(r.clone().with_id(id));
            prep(&mut r);
            assert!(r.prepared.is_some(), "request {k} was prepared");
            prepared.push(r.with_id(id));
            id += 1;
        }
        let (a, b) = (itself.generate(&plain).expect("generate"), ahead.generate(&prepared).expect("generate"));
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "call {call}");
    }
    let probe = itself.generate(&[EngineRequest::tokens((0..64).collect(), 2).with_id(id)]).expect("generate");
    assert!(probe[0].stats.cached_tokens > Some(0), "the prefix cache hit along the way");
    // A prompt prepared under other settings is worked out again, not taken.
    let other = SimConfig { scheduler: ResolvedEngineConfig { block_size: 8, ..scheduler }, ..config };
    let (mut wrong, _) = engine(other.clone());
    let (mut right, _) = engine(other);
    // The same prompt twice, so the second call reads what the first cached.
    for call in 0..2 {
        let mut r = request(0);
        prep(&mut r);
        let taken = wrong.generate(&[r.with_id(call)]).expect("generate");
        let own = right.generate(&[request(0).with_id(call)]).expect("generate");
        assert_eq!(format!("{taken:?}"), format!("{own:?}"), "call {call}");
    }
}

/// A chat request whose user turn carries images of `(hash, tokens)`.
fn with_images(id: u64, images: &[(u64, u32)]) -> EngineRequest {
    use crate::engine::chat::{Message, RequestFormat};
    use crate::engine::image::Image;
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
    let prompt = RequestFormat::ChatTemplate.prompt(vec![Message::new("user", "Hi").with_images(images)]);
    EngineRequest::new(prompt, 2).with_id(id)
}

#[test]
fn an_image_that_misses_the_encoder_cache_costs_its_tokens_and_a_hit_costs_nothing() {
    // Only the encoder costs: 1 µs an image token.
    let cost = CostModel { encoder_per_image_token: Duration::from_micros(1), ..CostModel::free() };
    let (mut e, clock) = engine(SimConfig { cost, scheduler: limits(8, 8192, 1024), ..SimConfig::default() });
    let mut call = |batch: Vec<EngineRequest>| {
        let t0 = clock.now();
        let out = e.generate(&batch).unwrap();
        let hits: Vec<Option<u32>> = out.iter().map(|o| o.stats.image_cache_hits).collect();
        let first_token: Vec<f64> = out.iter().map(|o| o.stats.first_token_ts.unwrap() - t0.as_secs_f64()).collect();
        (clock.now().saturating_since(t0), hits, first_token)
    };
    // A miss: its 576 tokens are encoded, in the step that first schedules it (its first token's).
    let (took, hits, first) = call(vec![with_images(0, &[(1, 576)])]);
    assert_eq!((took, hits), (Duration::from_micros(576), vec![Some(0)]));
    assert!((first[0] - 576e-6).abs() < 1e-12, "{first:?}");
    // The same picture again: a hit, free.
    let (took, hits, _) = call(vec![with_images(1, &[(1, 576)])]);
    assert_eq!((took, hits), (Duration::ZERO, vec![Some(1)]));
    // Two requests admitted in one step: the misses of both (the second's repeat of picture 2 is
    // a hit), none of picture 1; a request without images costs nothing.
    let text = EngineRequest::new(Prompt::Text("no images".into()), 2).with_id(4);
    let (took, hits, _) = call(vec![with_images(2, &[(2, 10), (1, 576)]), with_images(3, &[(2, 10), (3, 7)]), text]);
    assert_eq!((took, hits), (Duration::from_micros(17), vec![Some(1), Some(1), None]));
    // At 0 (the default) images cost their prefill tokens only, as before.
    let (mut e, clock) = engine(SimConfig { cost: CostModel::free(), ..SimConfig::default() });
    let t0 = clock.now();
    e.generate(&[with_images(0, &[(9, 576)])]).unwrap();
    assert_eq!(clock.now().saturating_since(t0), Duration::ZERO);
}

#[test]
fn a_replay_charges_the_encoder_in_the_step_that_first_schedules_a_sequence() {
    // A budget of 64 tokens: the 100-token prompt takes two steps, the encoder only the first.
    let config = limits(4, 64, 64);
    let specs = [SeqSpec { prompt_len: 100, output_len: 2, prefix: PrefixSource::Known(0), encoder_tokens: 30 }];
    let s = super::scheduler::replay(&config, &specs).unwrap();
    let encoded: Vec<u64> = s.steps.iter().map(|st| st.load.encoder_tokens).collect();
    assert_eq!(encoded, vec![30, 0, 0], "{:?}", s.steps);
    let cost = CostModel { encoder_per_image_token: Duration::from_nanos(1000), ..CostModel::free() };
    assert_eq!(cost.generate_ns(&s, 1), 30_000.0);
    // A preempted sequence recomputes its prompt, not its images: each is encoded once.
    let tight = limits(4, 64, 8);
    let specs: Vec<SeqSpec> = (0..3)
        .map(|i| SeqSpec { prompt_len: 40, output_len: 40, prefix: PrefixSource::Known(0), encoder_tokens: 10 + i })
        .collect();
    let s = super::scheduler::replay(&tight, &specs).unwrap();
    assert!(s.seqs.iter().any(|q| q.preemptions > 0), "the data must preempt");
    assert_eq!(s.steps.iter().map(|st| st.load.encoder_tokens).sum::<u64>(), 10 + 11 + 12);
}
