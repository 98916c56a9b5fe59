//! The fit of a server from outside (sans IO): the design points' inferred steps
//! ([`super::steps`]) to the step-cost coefficients, the frontend's overhead, and the limits the
//! server hides, each said as estimated or assumed.
//!
//! - **Step costs and the frontend, together**: every gap between two tokens of a request is a
//!   step ([`super::steps::gap_steps`]), its duration against `decode_step + prefill_per_token·P + per_seq·S +
//!   context_per_1k_tokens·C/1000`, and a request's gaps summed are one row, its first token to
//!   its last ([`super::steps::span_steps`]: a token read late lengthens one gap and shortens the
//!   next, which a row a gap took for two stalls); every step after an idle engine is a row too, its end minus
//!   the dispatch of the first request it prefilled against the same terms plus
//!   `frontend_overhead` (the request reached the engine a frontend after it was sent, and the
//!   step started then). A closed loop of equal requests runs in waves (all start, all finish,
//!   all send again), so most prefills of a design follow an idle engine: the frontend and the
//!   prefill cost are told apart by prompts of 16 to 2,048 tokens a step. Least squares on
//!   relative errors with every coefficient ≥ 0 (the in-process fit's solver), after a first fit
//!   on absolute errors that finds the rows more than [`OUTLIER_REL`] off (a request the machine
//!   held up) and drops them.
//!   `tokens_squared_per_1m` is not fitted: the design's steps stay far below the sizes where it
//!   shows, so it is 0 and said unidentified. The simulated engine's per-call overheads
//!   (`fixed_overhead`, ...) are 0: a server has no call, and the frontend holds what a request
//!   pays before its first step.
//! - **Hidden limits**: `max_num_seqs` is the 90th percentile of the sequences the steps held at
//!   the design's largest concurrency, when that is fewer than it (the server queued the rest: their TTFT waits), else
//!   not reached and vLLM's default assumed; the KV cache holds at least the largest context any
//!   step attended over when the server's `/metrics` counted no preemption.

use super::steps::{ObservedRequest, Span, Step, coalesced, infer_steps, span_steps};
use crate::calibrate::fit::{Sample, non_negative_least_squares};
use crate::engine::ResolvedEngineConfig;
use crate::engine::sim::DEFAULT_SCHEDULER;
use crate::engine::sim::profile::{Coefficients, Estimate};

/// A step row further off than this (relative) after the first fit is dropped as a stall.
pub const OUTLIER_REL: f64 = 0.25;

/// The fitted columns: the step costs in the order of [`Coefficients::NAMES`] from
/// `decode_step`, then the frontend.
const COLUMNS: [&str; 5] =
    ["decode_step", "prefill_per_token", "per_seq", "context_per_1k_tokens", "frontend_overhead"];

/// One design point's requests as measured.
#[derive(Clone, Debug, PartialEq)]
pub struct PointObservation {
    /// Requests in flight.
    pub concurrency: u32,
    /// The requests, as the client saw them.
    pub requests: Vec<ObservedRequest>,
}

/// What the fit found.
#[derive(Clone, Debug, PartialEq)]
pub struct UrlFit {
    /// The coefficients: the step costs and the frontend; the per-call terms 0.
    pub coefficients: Coefficients,
    /// The scheduler limits the profile replays under.
    pub engine: ResolvedEngineConfig,
    /// How each limit was set.
    pub estimated: Vec<Estimate>,
    /// Coefficients the data did not identify (0).
    pub unidentified: Vec<String>,
    /// Step rows fitted, and rows dropped as stalls.
    pub steps: u64,
    /// Rows dropped.
    pub dropped: u64,
    /// Per design point (in `points` order), the fit's residual on its steps.
    pub residuals: Vec<PointResidual>,
}

/// The fit's residual on one design point's timed steps: |Σ predicted − Σ measured| / Σ measured
/// over its rows (the steps' durations, and for a step after an idle engine its time from the
/// request's dispatch): how far the fitted model is off on the time the point's steps took.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PointResidual {
    /// Its rows fitted.
    pub steps: u64,
    /// The relative error of their sum.
    pub residual: f64,
    /// The point's own noise ([`residual_noise`]); `None` with fewer than two rounds of rows.
    pub noise: Option<f64>,
}

/// The half-width of the 95 % interval of a point's measured-to-predicted ratio `Σ m / Σ p`, over
/// its `rounds` of (Σ predicted, Σ measured) (the ratio estimator's variance, rounds as the
/// unit: a round's steps share the machine of their minute): the residual below which the point
/// cannot tell the model from its own noise. `None` under two rounds.
pub fn residual_noise(rounds: &[(f64, f64)]) -> Option<f64> {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let n = rounds.len();
    let predicted: f64 = rounds.iter().map(|r| r.0).sum();
    let measured: f64 = rounds.iter().map(|r| r.1).sum();
    if n < 2 || predicted <= 0.0 {
        return None;
    }
    let ratio = measured / predicted;
    let mean_p = predicted / n as f64;
    let var = rounds.iter().map(|(p, m)| (m - ratio * p).powi(2)).sum::<f64>() / (n - 1) as f64;
    let se = (var / n as f64).sqrt() / mean_p;
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).ok()?.inverse_cdf(0.975);
    Some(t * se / ratio)
}

/// A fitted row: its design point, its round, its load (the columns of [`COLUMNS`]) and its time.
type Row = (usize, u32, Vec<f64>, f64);

/// Why a fit from a URL failed.
#[derive(Debug, thiserror::Error)]
pub enum UrlFitError {
    /// Too few steps that followed one another to fit the step costs.
    #[error(
        "only {found} engine steps could be timed from the token arrivals (at least {needed} needed): \
         did the server stream each token as it was made?"
    )]
    TooFewSteps {
        /// Steps found.
        found: usize,
        /// Steps needed.
        needed: usize,
    },
}

/// Fits `points`; `preemptions` is the server's `vllm:num_preemptions_total` over the design when
/// its `/metrics` gave it.
pub fn fit_url(points: &[PointObservation], preemptions: Option<f64>) -> Result<UrlFit, UrlFitError> {
    let steps: Vec<(usize, Vec<Step>)> =
        points.iter().enumerate().map(|(i, p)| (i, infer_steps(&p.requests))).collect();
    let row = |s: &Step, frontend: f64| vec![1.0, s.prefill_tokens, s.seqs, s.context_tokens / 1000.0, frontend];
    // Decode steps: each request's gaps between its tokens, summed over its span (one row a
    // request); steps after an idle engine: the clusters'.
    let spans: Vec<(usize, Vec<Span>)> = points.iter().enumerate().map(|(i, p)| (i, span_steps(&p.requests))).collect();
    let timed: Vec<Row> = spans
        .iter()
        .flat_map(|(i, spans)| spans.iter().map(move |s| (*i, s)))
        .filter_map(|(i, s)| {
            // The step's fixed cost once per step summed.
            let x = [s.steps, s.load.prefill_tokens, s.load.seqs, s.load.context_tokens / 1000.0, 0.0];
            s.load.duration_ns.map(|d| (i, points[i].requests[s.request].round, x.to_vec(), d))
        })
        .chain(steps.iter().flat_map(|(i, steps)| steps.iter().map(move |s| (*i, s))).filter_map(|(i, s)| {
            match s.duration_ns {
                Some(_) => None,
                None if !s.first_of.is_empty() => {
                    let sent =
                        s.first_of.iter().map(|&r| points[i].requests[r].dispatched_ns).fold(f64::INFINITY, f64::min);
                    // Sent before the previous step ended: it waited in the frontend or in the queue
                    // of an engine that was busy, which the arrivals cannot tell apart: no row.
                    let previous = s.previous_end_ns.unwrap_or(f64::NEG_INFINITY);
                    // Not alone in the frontend (another request sent before the step ended): the
                    // server's frontend works on them together (vLLM's is one event loop), and the
                    // first waits on the others' work, which a delay per request does not hold.
                    let alone = points[i]
                        .requests
                        .iter()
                        .filter(|r| r.dispatched_ns > previous && r.dispatched_ns < s.end_ns)
                        .count()
                        == 1;
                    // A request whose tokens the server merged into chunks: its first one timed
                    // the frontend's catching up too.
                    let merged = s.first_of.iter().any(|&r| coalesced(&points[i].requests[r]));
                    let round = s.first_of.first().map_or(0, |&r| points[i].requests[r].round);
                    (sent > previous && alone && !merged).then(|| (i, round, row(s, 1.0), s.end_ns - sent))
                }
                None => None,
            }
        }))
        .filter(|(_, _, _, y)| *y > 0.0)
        .collect();
    let needed = COLUMNS.len() * 4;
    if timed.len() < needed {
        return Err(UrlFitError::TooFewSteps { found: timed.len(), needed });
    }
    // Relative errors (`relative`), or absolute ones: a first fit on absolute errors is not
    // pulled by a near-zero gap (two tokens of consecutive steps that reached the client
    // together after one was held up), which relative weights would make the heaviest row.
    let solve = |rows: &[&Row], relative: bool| {
        let samples: Vec<Sample> = rows
            .iter()
            .map(|(_, _, x, y)| {
                let w = if relative { 1.0 / y } else { 1.0 };
                Sample { x: x.iter().map(|v| v * w).collect(), y: y * w, metric: 0 }
            })
            .collect();
        non_negative_least_squares(&samples, COLUMNS.len(), &[])
    };
    let predict = |theta: &[f64], x: &[f64]| x.iter().zip(theta).map(|(a, b)| a * b).sum::<f64>();
    let all: Vec<&Row> = timed.iter().collect();
    let (first, _) = solve(&all, false);
    let kept: Vec<&Row> = timed
        .iter()
        .filter(|(_, _, x, y)| {
            let p = predict(&first, x);
            p > 0.0 && ((p - y) / p).abs() <= OUTLIER_REL
        })
        .collect();
    let rows = if kept.len() >= needed { kept } else { all };
    let (theta, dependent) = solve(&rows, true);
    let unidentified: Vec<String> =
        dependent.iter().map(|&j| COLUMNS[j].to_owned()).chain(["tokens_squared_per_1m".to_owned()]).collect();
    let coefficients = Coefficients {
        frontend_overhead_ns: Some(theta[4]),
        ..Coefficients::from_array([0.0, 0.0, theta[0], theta[1], theta[2], theta[3], 0.0, 0.0, 0.0])
    };
    let residuals = (0..points.len())
        .map(|i| {
            let mine: Vec<&Row> = rows.iter().copied().filter(|(p, _, _, _)| *p == i).collect();
            // (Σ predicted, Σ measured) per round, each row predicted once.
            let mut by_round: std::collections::BTreeMap<u32, (f64, f64)> = std::collections::BTreeMap::new();
            for (_, round, x, y) in &mine {
                let sums = by_round.entry(*round).or_default();
                sums.0 += predict(&theta, x);
                sums.1 += y;
            }
            let (predicted, measured) = by_round.values().fold((0.0, 0.0), |(p, m), (rp, rm)| (p + rp, m + rm));
            let by_round: Vec<(f64, f64)> = by_round.into_values().collect();
            PointResidual {
                steps: mine.len() as u64,
                residual: if measured > 0.0 { (predicted - measured).abs() / measured } else { 0.0 },
                noise: residual_noise(&by_round),
            }
        })
        .collect();
    // The limit shows where the most requests were in flight.
    let top = points.iter().map(|p| p.concurrency).max().unwrap_or(1);
    let top_steps: Vec<&Step> =
        steps.iter().filter(|(i, _)| points[*i].concurrency == top).flat_map(|(_, s)| s.iter()).collect();
    let all_steps: Vec<&Step> = steps.iter().flat_map(|(_, s)| s.iter()).collect();
    let (engine, estimated) = hidden_limits(points, &top_steps, &all_steps, preemptions);
    Ok(UrlFit {
        coefficients,
        engine,
        estimated,
        unidentified,
        steps: rows.len() as u64,
        dropped: (timed.len() - rows.len()) as u64,
        residuals,
    })
}

/// The scheduler limits, from what the steps show (`top`: those at the largest concurrency);
/// each with how it was set.
fn hidden_limits(
    points: &[PointObservation],
    top: &[&Step],
    steps: &[&Step],
    preemptions: Option<f64>,
) -> (ResolvedEngineConfig, Vec<Estimate>) {
    let mut engine = DEFAULT_SCHEDULER;
    let concurrency = points.iter().map(|p| u64::from(p.concurrency)).max().unwrap_or(1);
    // The 90th percentile of the steps' sizes: a step's cluster can take a token of the next one
    // (a request admitted as another finished), so the largest alone overstates it.
    let mut sizes: Vec<u64> = top.iter().map(|s| s.seqs as u64).collect();
    sizes.sort_unstable();
    let most_seqs = sizes.get((sizes.len() * 9 / 10).min(sizes.len().saturating_sub(1))).copied().unwrap_or(0);
    let seqs = if most_seqs > 0 && most_seqs < concurrency {
        engine.max_num_seqs = most_seqs as u32;
        Estimate {
            key: "max_num_seqs".into(),
            value: most_seqs,
            source: "estimated".into(),
            how: format!(
                "9 in 10 steps held at most {most_seqs} sequences with {concurrency} requests in flight: the rest waited"
            ),
        }
    } else {
        Estimate {
            key: "max_num_seqs".into(),
            value: u64::from(engine.max_num_seqs),
            source: "assumed".into(),
            how: format!("not reached: steps held all {concurrency} requests in flight; vLLM's default kept"),
        }
    };
    let largest_step = steps.iter().map(|s| s.prefill_tokens + s.seqs).fold(0.0, f64::max) as u64;
    let budget = Estimate {
        key: "max_num_batched_tokens".into(),
        value: u64::from(engine.max_num_batched_tokens),
        source: "assumed".into(),
        how: format!("not reached: the largest step computed {largest_step} tokens; vLLM's default kept"),
    };
    let context = steps.iter().map(|s| s.context_tokens).fold(0.0, f64::max);
    let blocks_held = (context / f64::from(engine.block_size)).ceil() as u64;
    let kv = match preemptions {
        Some(p) if p > 0.0 => {
            // Preempted at about the most context the steps held.
            engine.num_kv_blocks = u32::try_from(blocks_held.max(1)).unwrap_or(u32::MAX);
            Estimate {
                key: "num_kv_blocks".into(),
                value: u64::from(engine.num_kv_blocks),
                source: "estimated".into(),
                how: format!("the server preempted {p} times; the most context a step held was {context} tokens"),
            }
        }
        Some(_) => Estimate {
            key: "num_kv_blocks".into(),
            value: u64::from(engine.num_kv_blocks),
            source: "assumed".into(),
            how: format!(
                "no preemption (/metrics): at least {blocks_held} blocks (the most context a step held); the \
                 default kept"
            ),
        },
        None => Estimate {
            key: "num_kv_blocks".into(),
            value: u64::from(engine.num_kv_blocks),
            source: "assumed".into(),
            how: "the server gave no preemption counter (/metrics): the default kept".into(),
        },
    };
    (engine, vec![seqs, budget, kv])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: f64 = 1e6;

    /// Requests of one point, served by a known engine in lockstep: `c` start at `t0`, each step
    /// costs `decode + prefill·P + per_seq·S`, at most `limit` run; the rest wait, joining as
    /// others finish. `frontend` after dispatch a request reaches the engine.
    fn served(c: usize, prompt: u32, output: usize, limit: usize, frontend: f64) -> Vec<ObservedRequest> {
        served_at(1.0, c, prompt, output, limit, frontend)
    }

    /// [`served`] by an engine `slower` times as slow.
    fn served_at(
        slower: f64,
        c: usize,
        prompt: u32,
        output: usize,
        limit: usize,
        frontend: f64,
    ) -> Vec<ObservedRequest> {
        let (decode, prefill, per_seq) = (4.0 * MS * slower, 0.02 * MS * slower, 0.5 * MS * slower);
        let mut requests: Vec<ObservedRequest> = (0..c)
            .map(|_| ObservedRequest { dispatched_ns: 0.0, prompt_tokens: prompt, token_ns: Vec::new(), round: 0 })
            .collect();
        let mut now = frontend;
        let mut running: Vec<usize> = Vec::new();
        let mut next = 0;
        while requests.iter().any(|r| r.token_ns.len() < output) {
            while running.len() < limit && next < c {
                running.push(next);
                next += 1;
            }
            let prefills = running.iter().filter(|&&r| requests[r].token_ns.is_empty()).count() as f64;
            now += decode + prefill * prefills * f64::from(prompt) + per_seq * running.len() as f64;
            for &r in &running {
                // A client reads the tokens of one step up to 0.2 ms apart.
                requests[r].token_ns.push(now + (r % 3) as f64 * 0.1 * MS);
            }
            running.retain(|&r| requests[r].token_ns.len() < output);
        }
        requests
    }

    /// Five points of one engine (no limit in reach, a 15 ms frontend): one request at a time
    /// with short and long prompts, 4 and 8 in flight.
    fn five_points() -> Vec<PointObservation> {
        [(1, 16), (1, 256), (4, 64), (8, 128), (8, 32)]
            .iter()
            .map(|&(c, p)| PointObservation { concurrency: c as u32, requests: served(c, p, 24, 16, 15.0 * MS) })
            .collect()
    }

    #[test]
    fn a_known_engine_is_recovered_with_its_frontend_and_its_limit() {
        let points: Vec<PointObservation> = [(1, 16), (1, 256), (4, 64), (8, 128), (8, 32)]
            .iter()
            .map(|&(c, p)| PointObservation { concurrency: c as u32, requests: served(c, p, 24, 6, 15.0 * MS) })
            .collect();
        let fit = fit_url(&points, Some(0.0)).unwrap();
        let c = &fit.coefficients;
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.05;
        assert!(close(c.decode_step_ns, 4.0 * MS), "{c:?}");
        assert!(close(c.prefill_per_token_ns, 0.02 * MS), "{c:?}");
        assert!(close(c.per_seq_ns, 0.5 * MS), "{c:?}");
        assert!(c.context_per_1k_tokens_ns < 0.05 * MS, "{c:?}");
        assert!(close(c.frontend_overhead_ns.unwrap(), 15.0 * MS), "{c:?}");
        assert_eq!(fit.engine.max_num_seqs, 6);
        assert_eq!((fit.estimated[0].key.as_str(), fit.estimated[0].source.as_str()), ("max_num_seqs", "estimated"));
        assert_eq!(fit.estimated[2].source, "assumed", "no preemption: the KV cache is not measured");

        // Exact arrivals: every point's residual is round-off.
        assert!(fit.residuals.iter().all(|r| r.residual < 1e-6 && r.steps > 0), "{:?}", fit.residuals);

        // Under the limit everywhere: not reached, and said so.
        let under: Vec<PointObservation> = [(1, 16), (1, 256), (4, 64), (4, 128), (4, 32), (5, 16)]
            .iter()
            .map(|&(c, p)| PointObservation { concurrency: c as u32, requests: served(c, p, 24, 6, 15.0 * MS) })
            .collect();
        let fit = fit_url(&under, None).unwrap();
        assert_eq!(fit.engine.max_num_seqs, DEFAULT_SCHEDULER.max_num_seqs);
        assert_eq!(fit.estimated[0].source, "assumed");
    }

    #[test]
    fn the_frontend_is_fitted_where_a_request_was_alone_in_it() {
        // Alone, a request reaches the engine 15 ms after it was sent; in a wave of 4 or 8 sent
        // at once the frontend works on them together, and the first reaches it 25 ms after.
        let points: Vec<PointObservation> =
            [(1, 16, 15.0), (1, 256, 15.0), (4, 64, 25.0), (8, 128, 25.0), (8, 32, 25.0)]
                .iter()
                .map(|&(c, p, f)| PointObservation { concurrency: c as u32, requests: served(c, p, 24, 16, f * MS) })
                .collect();
        let fit = fit_url(&points, None).unwrap();
        let frontend = fit.coefficients.frontend_overhead_ns.unwrap();
        assert!((frontend - 15.0 * MS).abs() < 0.5 * MS, "{frontend}");
    }

    #[test]
    fn a_request_whose_tokens_came_merged_times_no_frontend() {
        // Requests alone, the frontend 15 ms; a second point's were merged into one chunk by a
        // server that fell behind, after 40 ms: they say nothing of the frontend.
        let mut points = five_points();
        let merged = |at: f64| ObservedRequest {
            dispatched_ns: at,
            prompt_tokens: 16,
            token_ns: vec![at + 40.0 * MS; 24],
            round: 0,
        };
        points.push(PointObservation {
            concurrency: 1,
            requests: (0..8).map(|i| merged(f64::from(i) * 100.0 * MS)).collect(),
        });
        let fit = fit_url(&points, None).unwrap();
        let frontend = fit.coefficients.frontend_overhead_ns.unwrap();
        assert!((frontend - 15.0 * MS).abs() < 0.5 * MS, "{frontend}");
    }

    #[test]
    fn a_point_the_model_misses_has_the_residual() {
        // Five points of one engine and a sixth of an engine 30 % slower: the fit follows the
        // five, and the sixth's steps took about 30 % longer than it predicts.
        let mut points = five_points();
        points.push(PointObservation { concurrency: 4, requests: served_at(1.3, 4, 32, 24, 16, 15.0 * MS) });
        let fit = fit_url(&points, None).unwrap();
        let r: Vec<f64> = fit.residuals.iter().map(|r| r.residual).collect();
        assert!(r[5] > 0.15 && r[5] < 0.35, "{r:?}");
        assert!(r[..5].iter().all(|x| *x < 0.08), "{r:?}");
    }

    #[test]
    fn the_noise_is_the_interval_of_the_ratio_over_rounds() {
        // Ratios 1, 1.2, 0.8, 1: the ratio 1, its standard error sqrt(0.08 / 3 / 4), t(3) = 3.182.
        let noise = residual_noise(&[(1.0, 1.0), (1.0, 1.2), (1.0, 0.8), (1.0, 1.0)]).unwrap();
        assert!((noise - 3.182_446 * (0.08_f64 / 12.0).sqrt()).abs() < 1e-5, "{noise}");
        // Rounds that agree: no noise; one round: none known.
        assert_eq!(residual_noise(&[(2.0, 3.0), (4.0, 6.0)]), Some(0.0));
        assert_eq!(residual_noise(&[(2.0, 3.0)]), None);
    }

    #[test]
    fn a_point_whose_rounds_ran_at_different_speeds_has_that_noise() {
        // Five points of one engine, one round each; a sixth run in four rounds minutes apart,
        // the engine 15 % slower or faster by turns: the point's noise covers its residual.
        let mut points = five_points();
        let rounds = (0..4u32).flat_map(|round| {
            let slower = if round % 2 == 0 { 1.15 } else { 0.85 };
            served_at(slower, 4, 32, 24, 16, 15.0 * MS).into_iter().map(move |mut r| {
                let shift = f64::from(round) * 60_000.0 * MS;
                r.dispatched_ns += shift;
                r.token_ns.iter_mut().for_each(|t| *t += shift);
                r.round = round;
                r
            })
        });
        points.push(PointObservation { concurrency: 4, requests: rounds.collect() });
        let fit = fit_url(&points, None).unwrap();
        assert!(fit.residuals[..5].iter().all(|r| r.noise.is_none()), "{:?}", fit.residuals);
        let sixth = fit.residuals[5];
        let noise = sixth.noise.expect("four rounds");
        assert!(noise > 0.15 && sixth.residual < noise, "{sixth:?}");
    }

    #[test]
    fn too_few_timed_steps_is_an_error() {
        let points = [PointObservation { concurrency: 1, requests: served(1, 16, 3, 1, MS) }];
        let err = fit_url(&points, None).unwrap_err().to_string();
        assert!(err.contains("could be timed"), "{err}");
    }
}
