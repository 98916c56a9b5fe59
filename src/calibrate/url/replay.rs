//! A design point replayed on a fitted profile (sans IO, virtual time): the fit report's
//! residuals per design point.
//!
//! `batchlab serve`'s engine ([`ServeCore`]) under the profile's costs and limits, driven as the
//! design drove the server: `concurrency` clients, each sending its next request when the last
//! one's final token arrived, until `requests` were sent, every prompt distinct. Requests sent
//! at one instant (the first `concurrency`, and the next of clients whose requests ended in one
//! step) go out `stagger` apart in the order sent, as a real client's do (it measured how far
//! apart its first ones went: [`send_stagger`]), so a server that starts a step on the first
//! arrival sees them one by one. The mean TTFT
//! (dispatch to first token, the frontend included) and mean TPOT (first to last token over the
//! tokens between) are compared with the client's: the larger relative error is the point's
//! residual.

use crate::engine::sim::CostModel;
use crate::engine::sim::profile::PointFit;
use crate::engine::{ResolvedEngineConfig, sim::profile::Coefficients};
use crate::serve::core::{Event, NewSequence, ServeCore};
use crate::serve::metrics::ServeMetrics;
use crate::time::Timestamp;

use super::fit::PointResidual;
use super::steps::ObservedRequest;

/// One design point's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointShape {
    /// Its name (`c8-p128-o32`).
    pub name: String,
    /// Requests in flight.
    pub concurrency: u32,
    /// Prompt tokens each.
    pub prompt_tokens: u32,
    /// Output tokens each.
    pub output_tokens: u32,
}

/// Mean TTFT and TPOT in ns of `requests` of `shape` on the profile (`coefficients`, `engine`),
/// sends of one instant `stagger_ns` apart.
pub fn replay(
    coefficients: &Coefficients,
    engine: ResolvedEngineConfig,
    shape: &PointShape,
    requests: usize,
    stagger_ns: f64,
) -> (f64, f64) {
    let stagger = std::time::Duration::from_nanos(stagger_ns.max(0.0).round() as u64);
    let mut cost = CostModel::free();
    coefficients.apply(&mut cost);
    let (metrics, _registry) = ServeMetrics::new("replay");
    let mut core = ServeCore::new(cost, engine, usize::MAX / 2, metrics);
    let mut sent: Vec<(Timestamp, Option<Timestamp>, Option<Timestamp>)> = Vec::new();
    let submit = |core: &mut ServeCore, at: Timestamp, sent: &mut Vec<_>| {
        let salt = sent.len() as u32;
        let prompt = (0..shape.prompt_tokens.max(1)).map(|i| salt.wrapping_mul(100_003).wrapping_add(i)).collect();
        let output = shape.output_tokens.max(1);
        let seq = NewSequence { prompt_ids: prompt, output_tokens: output, max_tokens: output, images: Vec::new() };
        // Refused only past `max_waiting`, which the replay does not bound: then it never answers.
        let _refused = core.submit(at, vec![seq]).is_err();
        sent.push((at, None, None));
    };
    // Sends not yet made, in time order: the core is told of each when its time comes.
    let mut due: std::collections::VecDeque<Timestamp> = std::collections::VecDeque::new();
    let mut at = Timestamp::from_nanos(1_000_000_000);
    for _ in 0..shape.concurrency.max(1).min(requests as u32) {
        due.push_back(at);
        at = at.saturating_add(stagger);
    }
    loop {
        let t = match (core.poll_timeout(), due.front().copied()) {
            (Some(t), Some(s)) => t.min(s),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => break,
        };
        while due.front().is_some_and(|s| *s <= t) {
            due.pop_front();
            submit(&mut core, t, &mut sent);
        }
        core.handle_timeout(t);
        let mut after = t;
        while let Some(Event::Token { id, finish, at, .. }) = core.poll_event() {
            // The core numbers requests in submit order, from 0, one sequence each.
            let Some(entry) = sent.get_mut(id.0 as usize) else { continue };
            entry.1.get_or_insert(at);
            if finish.is_some() {
                entry.2 = Some(at);
                if sent.len() + due.len() < requests {
                    after = after.max(at);
                    due.push_back(after);
                    after = after.saturating_add(stagger);
                }
            }
        }
    }
    means(
        sent.iter().filter_map(|&(s, first, last)| {
            let (first, last) = (first?, last?);
            Some((first.saturating_since(s).as_nanos() as f64, last.saturating_since(first).as_nanos() as f64))
        }),
        shape.output_tokens,
    )
}

/// Steps of the grid [`fit_frontend_queue`] searches, from no queue to a frontend that is all
/// queue.
pub const QUEUE_GRID: u32 = 40;

/// One design point for [`fit_frontend_queue`]: its shape, its requests as measured, and the
/// requests of one of its runs (what a replay runs).
pub type QueuePoint<'a> = (PointShape, &'a [ObservedRequest], usize);

/// The frontend's service per request (`frontend_per_request`), chosen so that the design's
/// replays give the TTFT its points measured. The linear fit finds the frontend a request alone
/// pays (`frontend_overhead`); it cannot see a worker that serves requests one at a time, which
/// only waves show (a wave's later requests wait for the earlier ones: vLLM's frontend is one
/// event loop). Of that alone time `F`, a share `s` is the worker's and `F − s` the hop, so a
/// request alone still pays `F`; each `s` on a grid of [`QUEUE_GRID`] steps from 0 to `F` (then a
/// finer one around the best) replays every point, and the `s` whose replayed mean TTFTs are
/// nearest the measured ones (least squares of the relative errors; the smaller `s` on a tie)
/// is kept. `coefficients` unchanged when the fit found no frontend.
pub fn fit_frontend_queue(
    coefficients: &Coefficients,
    engine: ResolvedEngineConfig,
    points: &[QueuePoint<'_>],
) -> Coefficients {
    let alone = coefficients.frontend_overhead_ns.unwrap_or(0.0);
    if alone <= 0.0 || points.is_empty() {
        return coefficients.clone();
    }
    let measured: Vec<(f64, f64)> = points
        .iter()
        .map(|(shape, requests, _)| {
            (measured(requests, shape.output_tokens).0, send_stagger(requests, shape.concurrency))
        })
        .collect();
    let with = |s: f64, burst: bool| Coefficients {
        frontend_overhead_ns: Some(alone - s),
        frontend_per_request_ns: (s > 0.0).then_some(s),
        frontend_hands_off_bursts: burst && s > 0.0,
        ..coefficients.clone()
    };
    let error = |c: &Coefficients| -> f64 {
        points
            .iter()
            .zip(&measured)
            .filter(|(_, (ttft, _))| *ttft > 0.0)
            .map(|((shape, _, per_run), (ttft, stagger))| {
                let (replayed, _) = replay(c, engine, shape, (*per_run).max(1), *stagger);
                ((replayed - ttft) / ttft).powi(2)
            })
            .sum()
    };
    let step = alone / f64::from(QUEUE_GRID);
    // The best (error, share) of `candidates`; the first of equals.
    let best_of = |candidates: &mut dyn Iterator<Item = f64>, burst: bool| {
        candidates
            .map(|s| (error(&with(s, burst)), s))
            .fold((f64::INFINITY, 0.0), |best, x| if x.0 < best.0 { x } else { best })
    };
    let search = |burst: bool| {
        let (_, coarse) = best_of(&mut (0..=QUEUE_GRID).map(|k| f64::from(k) * step), burst);
        best_of(&mut (0..=20).map(|k| (coarse - step + f64::from(k) * step / 10.0).clamp(0.0, alone)), burst)
    };
    // A worker that hands each request on, or one that hands a burst on together: whichever
    // replays the waves nearer (each on a tie).
    let (each_error, each) = search(false);
    let (burst_error, burst) = search(true);
    if burst_error < each_error { with(burst, true) } else { with(each, false) }
}

/// How far apart a client's first `concurrency` sends went, on average, ns (0 for one).
pub fn send_stagger(requests: &[ObservedRequest], concurrency: u32) -> f64 {
    let mut sent: Vec<f64> = requests.iter().map(|r| r.dispatched_ns).collect();
    sent.sort_by(f64::total_cmp);
    let c = (concurrency as usize).min(sent.len());
    if c < 2 { 0.0 } else { (sent[c - 1] - sent[0]) / (c - 1) as f64 }
}

/// Mean TTFT and TPOT in ns as the client measured `requests`.
pub fn measured(requests: &[ObservedRequest], output_tokens: u32) -> (f64, f64) {
    means(
        requests.iter().filter_map(|r| {
            let (first, last) = (r.token_ns.first()?, r.token_ns.last()?);
            Some((first - r.dispatched_ns, last - first))
        }),
        output_tokens,
    )
}

/// Means of TTFT and of (last − first) / (output − 1).
fn means(ttft_and_span: impl Iterator<Item = (f64, f64)>, output_tokens: u32) -> (f64, f64) {
    let (mut n, mut ttft, mut tpot) = (0.0, 0.0, 0.0);
    let between = f64::from(output_tokens.saturating_sub(1).max(1));
    for (t, span) in ttft_and_span {
        n += 1.0;
        ttft += t;
        tpot += span / between;
    }
    if n == 0.0 { (0.0, 0.0) } else { (ttft / n, tpot / n) }
}

/// The fit report's line for one design point: measured against replayed, and the fit's
/// `residual` on its steps. The point ran as runs of `per_run` requests each, each from an idle
/// engine (its warm-up drained first); the replay runs one such run.
pub fn point_fit(
    coefficients: &Coefficients,
    engine: ResolvedEngineConfig,
    shape: &PointShape,
    requests: &[ObservedRequest],
    per_run: usize,
    residual: PointResidual,
) -> PointFit {
    let (ttft, tpot) = measured(requests, shape.output_tokens);
    let stagger = send_stagger(requests, shape.concurrency);
    let (p_ttft, p_tpot) = replay(coefficients, engine, shape, per_run.max(1), stagger);
    let rel = |p: f64, m: f64| if m > 0.0 { (p - m).abs() / m } else { 0.0 };
    PointFit {
        name: shape.name.clone(),
        concurrency: u64::from(shape.concurrency),
        prompt_tokens: u64::from(shape.prompt_tokens),
        output_tokens: u64::from(shape.output_tokens),
        requests: requests.len() as u64,
        measured_ttft_ms: ttft / 1e6,
        predicted_ttft_ms: p_ttft / 1e6,
        measured_tpot_ms: tpot / 1e6,
        predicted_tpot_ms: p_tpot / 1e6,
        replay_error: rel(p_ttft, ttft).max(rel(p_tpot, tpot)),
        steps: residual.steps,
        residual: residual.residual,
        residual_noise: residual.noise,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_at_a_time_takes_the_frontend_and_its_steps() {
        let coefficients = Coefficients {
            frontend_overhead_ns: Some(10e6),
            ..Coefficients::from_array([0.0, 0.0, 4e6, 1e4, 0.5e6, 0.0, 0.0, 0.0, 0.0])
        };
        let shape = PointShape { name: "c1".into(), concurrency: 1, prompt_tokens: 100, output_tokens: 5 };
        let (ttft, tpot) = replay(&coefficients, crate::engine::sim::DEFAULT_SCHEDULER, &shape, 3, 0.0);
        // 10 ms frontend + (4 + 100 × 0.01 + 0.5) ms; then 4.5 ms a decode step.
        assert!((ttft - 15.5e6).abs() < 1.0, "{ttft}");
        assert!((tpot - 4.5e6).abs() < 1.0, "{tpot}");
        // Eight at once, at most four running: the second four wait for the first.
        let limited = ResolvedEngineConfig { max_num_seqs: 4, ..crate::engine::sim::DEFAULT_SCHEDULER };
        let shape = PointShape { concurrency: 8, ..shape };
        let (ttft_8, _) = replay(&coefficients, limited, &shape, 8, 0.0);
        assert!(ttft_8 > 2.0 * ttft, "{ttft_8} vs {ttft}");
    }

    /// Points measured on a server whose frontend serves one request at a time: the search finds
    /// its service, whether it hands each request on or a burst together, and keeps what a
    /// request alone pays; with no queue, it finds none.
    #[test]
    fn the_frontends_queue_is_found_from_the_waves() {
        let steps = Coefficients::from_array([0.0, 0.0, 4e6, 1e4, 0.5e6, 0.0, 0.0, 0.0, 0.0]);
        let shapes: Vec<PointShape> = [(1, 16), (4, 64), (8, 32), (16, 32)]
            .into_iter()
            .map(|(c, p)| PointShape { name: format!("c{c}"), concurrency: c, prompt_tokens: p, output_tokens: 8 })
            .collect();
        let engine = crate::engine::sim::DEFAULT_SCHEDULER;
        for (hop, service, burst) in [(2e6, 1.5e6, false), (2e6, 1.5e6, true), (3.5e6, 0.0, false)] {
            let truth = Coefficients {
                frontend_overhead_ns: Some(hop),
                frontend_per_request_ns: (service > 0.0).then_some(service),
                frontend_hands_off_bursts: burst,
                ..steps.clone()
            };
            // What a client measured: each point's requests, all sent at once, with the mean TTFT
            // and TPOT the true server gives a run of two waves.
            let measured: Vec<Vec<ObservedRequest>> = shapes
                .iter()
                .map(|shape| {
                    let (ttft, tpot) = replay(&truth, engine, shape, 2 * shape.concurrency as usize, 0.0);
                    let tokens = vec![ttft, ttft + tpot * f64::from(shape.output_tokens - 1)];
                    let r = ObservedRequest {
                        dispatched_ns: 0.0,
                        prompt_tokens: shape.prompt_tokens,
                        token_ns: tokens,
                        round: 0,
                    };
                    vec![r; shape.concurrency as usize]
                })
                .collect();
            let points: Vec<QueuePoint<'_>> = shapes
                .iter()
                .zip(&measured)
                .map(|(shape, m)| (shape.clone(), m.as_slice(), 2 * shape.concurrency as usize))
                .collect();
            // The linear fit saw the frontend a request alone pays: the hop and one service.
            let linear = Coefficients { frontend_overhead_ns: Some(hop + service), ..steps.clone() };
            let fitted = fit_frontend_queue(&linear, engine, &points);
            let got = fitted.frontend_per_request_ns.unwrap_or(0.0);
            assert!((got - service).abs() <= 0.1e6, "service {service}: found {got}");
            assert_eq!(fitted.frontend_hands_off_bursts, burst, "service {service}, burst {burst}");
            let alone = fitted.frontend_overhead_ns.unwrap() + got;
            assert!((alone - (hop + service)).abs() < 1.0, "a request alone still pays {alone}");
        }
        // No frontend found: nothing to split.
        assert_eq!(fit_frontend_queue(&steps, engine, &[]), steps);
    }

    #[test]
    fn the_replay_error_is_the_larger_relative_error() {
        let coefficients = Coefficients::from_array([0.0, 0.0, 4e6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let shape = PointShape { name: "c1".into(), concurrency: 1, prompt_tokens: 10, output_tokens: 3 };
        // Measured: TTFT 5 ms (predicted 4), TPOT 4 ms (predicted 4): 20 % off.
        let r = ObservedRequest { dispatched_ns: 0.0, prompt_tokens: 10, token_ns: vec![5e6, 9e6, 13e6], round: 0 };
        let residual = PointResidual { steps: 2, residual: 0.01, noise: Some(0.03) };
        let fit = point_fit(&coefficients, crate::engine::sim::DEFAULT_SCHEDULER, &shape, &[r], 1, residual);
        assert!((fit.replay_error - 0.2).abs() < 1e-9, "{fit:?}");
        assert_eq!((fit.steps, fit.residual, fit.residual_noise), (2, 0.01, Some(0.03)));
        assert!((fit.measured_ttft_ms - 5.0).abs() < 1e-9 && (fit.predicted_tpot_ms - 4.0).abs() < 1e-9);
    }
}
