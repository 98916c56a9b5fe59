use super::*;
use crate::engine::{Engine, EngineRequest};

fn batch(n: u64, prompt: usize, out: u32) -> Vec<EngineRequest> {
    (0..n).map(|i| EngineRequest::tokens(i, vec![1; prompt], out)).collect()
}

fn engine(config: SimConfig) -> (SimEngine, VirtualClock) {
    let (mut e, c) = SimEngine::virtual_time(config);
    e.start().expect("start");
    (e, c)
}

#[test]
fn cost_model_timings_follow_the_formula() {
    let cost = CostModel {
        fixed_overhead: Duration::from_millis(1),
        prefill_per_token: Duration::from_micros(10),
        decode_step: Duration::from_millis(2),
        decode_per_seq: Duration::from_micros(100),
        max_num_seqs: 256,
        eos_probability: 0.0,
    };
    let (mut e, clock) = engine(SimConfig { seed: 1, cost, ..SimConfig::default() });
    let t0 = clock.now();
    let out = e.generate(&batch(2, 100, 3)).expect("generate");
    // prefill: 1 ms + 200 tokens × 10 µs = 3 ms; two decode steps of 2 ms + 2 × 100 µs = 2.2 ms.
    let at = |ms: f64| t0.as_secs_f64() + ms / 1e3;
    for o in &out {
        assert_eq!(o.output_tokens, Some(3));
        assert!((o.stats.first_token_ts.unwrap() - at(3.0)).abs() < 1e-9);
        assert!((o.stats.last_token_ts.unwrap() - at(7.4)).abs() < 1e-9);
        // One time per token: the first token, then one per decode step.
        let tokens = o.stats.token_ts.as_deref().expect("the simulator times every token");
        let expected = [at(3.0), at(5.2), at(7.4)];
        assert_eq!(tokens.len(), expected.len());
        assert!(tokens.iter().zip(expected).all(|(t, e)| (t - e).abs() < 1e-9), "{tokens:?}");
        assert_eq!((tokens.first(), tokens.last()), (o.stats.first_token_ts.as_ref(), o.stats.last_token_ts.as_ref()));
    }
    assert_eq!(clock.now(), t0.saturating_add(Duration::from_micros(7_400)));
}

#[test]
fn waves_respect_max_num_seqs() {
    let cost = CostModel { max_num_seqs: 2, ..CostModel::default() };
    let (mut e, _) = engine(SimConfig { seed: 1, cost, ..SimConfig::default() });
    let out = e.generate(&batch(5, 8, 4)).expect("generate");
    let sched: Vec<f64> = out.iter().map(|o| o.stats.scheduled_ts.unwrap()).collect();
    assert_eq!(sched[0], sched[1]);
    assert!(sched[2] > sched[1]);
    assert_eq!(sched[2], sched[3]);
    assert!(sched[4] > sched[3]);
    // A later wave starts when the previous one produced its last token.
    assert_eq!(out[2].stats.scheduled_ts, out[1].stats.last_token_ts);
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
