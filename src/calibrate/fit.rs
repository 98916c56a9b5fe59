//! The least-squares fit of the simulator's coefficients to measured batches.
//!
//! Inside one `generate` call the schedule depends only on token counts, the engine's limits and
//! its prefix-cache hits, never on time ([`crate::engine::sim::scheduler`]). So each batch is
//! replayed under the resolved configuration, and every measured timestamp (from the batch's
//! dispatch) is a linear function of the seven coefficients (eight with images):
//!
//! ```text
//! t = fixed_overhead + request_overhead·n + decode_step·k + prefill_per_token·ΣP + per_seq·ΣS
//!     + context_per_1k_tokens·ΣC/1000 + tokens_squared_per_1m·ΣT²/10⁶ + encoder_per_image_token·ΣE
//! ```
//!
//! summed over the `k` steps before it (its `scheduled_ts`) or up to and including the step that
//! produced it (its first and last token). Three least-squares fits follow from that:
//!
//! 1. **The head** (`fixed_overhead + request_overhead·n`) is measured directly: a batch's first
//!    `scheduled_ts` after its dispatch. It is fitted on its own, so the step costs cannot push
//!    their misfit into it (a real engine's big batches otherwise bend it).
//! 2. **The steps** (`decode_step`, `prefill_per_token`, `per_seq`, `context_per_1k_tokens`,
//!    `tokens_squared_per_1m`, and `encoder_per_image_token` when a request had images) are fitted
//!    on every timestamp minus its batch's measured head. `E` is the image tokens a step encodes:
//!    a request's [`RequestObservation::encoder_tokens`], in the step that first schedules it.
//!    Without images the column is left out: the coefficient is not fitted (`None` in the
//!    profile), and not reported as unidentified either.
//! 3. **The tail** (`finish_overhead + finish_per_request·n`) is fitted from the time between a
//!    batch's last token and the return of its `generate`.
//!
//! Each fit minimises **relative** error (each row divided by its measured value, at least 1 ms),
//! and in the step fit every batch counts alike (its rows also divided by √ of their number): on a
//! real engine the few big batches hold most of the timestamps and their seconds-long times would
//! otherwise decide every coefficient, while the held-out goals are relative. Data a model fits
//! exactly (a simulated run) is recovered exactly under any weights. When no batch has a
//! `scheduled_ts`, the head is fitted together with the steps.
//!
//! Each solve scales the columns to unit norm and uses modified Gram-Schmidt QR (a column the
//! others already explain is reported as unidentified and fixed at 0); a negative coefficient is
//! fixed at 0 and the rest refitted (an active-set non-negative fit), since no cost is negative.
//! Eight unknowns need no linear-algebra crate.

use std::collections::BTreeMap;

use crate::engine::ResolvedEngineConfig;
use crate::engine::sim::profile::{Coefficients, Residual};
use crate::engine::sim::scheduler::{self, PrefixSource, ScheduleError, SeqSpec};

/// One measured request of a batch, times in ns after the batch's dispatch.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestObservation {
    /// Prompt tokens, as the engine counted them.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub output_tokens: u32,
    /// Prompt tokens served from the prefix cache (0 when the engine does not say).
    pub cached_tokens: u32,
    /// Images it carried.
    pub images: u32,
    /// Image tokens the engine's vision encoder computed for it: those of its images that missed
    /// the encoder cache (all of them when the engine does not say).
    pub encoder_tokens: u32,
    /// The engine's `scheduled_ts`.
    pub scheduled_ns: Option<f64>,
    /// The engine's `first_token_ts`.
    pub first_token_ns: Option<f64>,
    /// The engine's `last_token_ts`.
    pub last_token_ns: Option<f64>,
}

/// One `generate` call: its requests in the order the engine got them.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchObservation {
    /// The requests, in batch order.
    pub requests: Vec<RequestObservation>,
    /// When the call returned, ns after its dispatch (our completion time).
    pub returned_ns: Option<f64>,
}

impl BatchObservation {
    /// The batch as the scheduler replays it: each request's lengths and the prefix-cache hits
    /// the engine reported for it.
    pub fn specs(&self) -> Vec<SeqSpec> {
        self.requests
            .iter()
            .map(|r| SeqSpec {
                prompt_len: r.prompt_tokens,
                output_len: r.output_tokens,
                prefix: PrefixSource::Known(r.cached_tokens),
                encoder_tokens: r.encoder_tokens,
            })
            .collect()
    }
}

/// What [`fit`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct FitResult {
    /// The fitted coefficients.
    pub coefficients: Coefficients,
    /// Per metric (`scheduled`, `first_token`, `last_token`, `finish`, `head`).
    pub residuals: BTreeMap<String, Residual>,
    /// Coefficients the data could not separate (fixed at 0).
    pub unidentified: Vec<String>,
    /// Timestamps fitted.
    pub samples: u64,
    /// Per batch, in input order: how long it took, measured and as the fitted model predicts.
    pub batches: Vec<BatchFit>,
}

/// One batch's makespan, measured and predicted: for a per-batch look at the fit.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchFit {
    /// Requests in the batch.
    pub size: usize,
    /// Mean prompt tokens.
    pub mean_prompt_tokens: f64,
    /// Mean output tokens.
    pub mean_output_tokens: f64,
    /// Its last token, ns after dispatch, as measured.
    pub measured_last_token_ns: Option<f64>,
    /// Its last token as the fitted model predicts it.
    pub predicted_last_token_ns: f64,
}

/// The fit could not be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FitError {
    /// A batch cannot be replayed under the configuration.
    #[error("batch {batch} cannot be replayed under the engine's configuration: {source}")]
    Replay {
        /// Its index among the batches given.
        batch: usize,
        /// Why.
        source: ScheduleError,
    },
    /// Fewer timestamps than coefficients.
    #[error("{samples} timestamps are too few to fit {needed} coefficients")]
    TooFewSamples {
        /// Timestamps found.
        samples: usize,
        /// Coefficients.
        needed: usize,
    },
}

const METRICS: [&str; 5] = ["scheduled", "first_token", "last_token", "finish", "head"];
const TAIL_METRIC: usize = 3;
const HEAD_METRIC: usize = 4;
/// Columns of the step model, of the head and step model together (the first eight
/// coefficients) and of the tail (the last two).
const STEP: usize = 6;
const N: usize = 2 + STEP;
const TAIL: usize = 2;
/// The encoder's column among the head and step model's, left out when no request had images.
const ENCODER: usize = N - 1;
/// The name of the fit's column `j`: [`Coefficients::NAMES`] with the encoder's
/// ([`Coefficients::ENCODER_NAME`]) before the tail's.
fn fit_name(j: usize) -> &'static str {
    match j.cmp(&ENCODER) {
        std::cmp::Ordering::Less => Coefficients::NAMES[j],
        std::cmp::Ordering::Equal => Coefficients::ENCODER_NAME,
        std::cmp::Ordering::Greater => Coefficients::NAMES[j - 1],
    }
}
/// Relative errors are taken against at least this (1 ms), so near-zero times do not dominate.
const REL_FLOOR_NS: f64 = 1e6;

/// One timestamp: its row of the design matrix, its value and which metric it is.
pub(super) struct Sample {
    pub(super) x: Vec<f64>,
    pub(super) y: f64,
    pub(super) metric: usize,
}

/// Fits the coefficients to `batches`, replayed under `config`. See the module docs.
pub fn fit(config: &ResolvedEngineConfig, batches: &[BatchObservation]) -> Result<FitResult, FitError> {
    // The encoder's column only when some request had images.
    let images = batches.iter().flat_map(|b| &b.requests).any(|r| r.images > 0);
    let left_out: &[usize] = if images { &[] } else { &[ENCODER] };
    // Per batch: its size, its measured head (first `scheduled_ts`), and its timestamps with
    // their full design rows [1, n, k, ΣP, ΣS, ΣC/1000, ΣT²/10⁶, ΣE].
    let mut sizes: Vec<f64> = Vec::new();
    let mut heads: Vec<Option<f64>> = Vec::new();
    let mut samples: Vec<(usize, Sample)> = Vec::new();
    let mut tails: Vec<Sample> = Vec::new();
    let mut ends: Vec<Vec<f64>> = Vec::new();
    for (b, batch) in batches.iter().enumerate() {
        let schedule =
            scheduler::replay(config, &batch.specs()).map_err(|source| FitError::Replay { batch: b, source })?;
        // cum[k]: [steps, ΣP, ΣS, ΣC/1000, ΣT²/10⁶, ΣE] over steps 0..k.
        let mut cum = vec![[0.0f64; STEP]; schedule.steps.len() + 1];
        for (k, step) in schedule.steps.iter().enumerate() {
            let l = &step.load;
            let add = [
                1.0,
                l.prefill_tokens as f64,
                l.seqs as f64,
                l.context_tokens as f64 / 1000.0,
                l.tokens_squared_per_1m(),
                l.encoder_tokens as f64,
            ];
            for j in 0..STEP {
                cum[k + 1][j] = cum[k][j] + add[j];
            }
        }
        let n = batch.requests.len() as f64;
        sizes.push(n);
        let row = |k: usize| {
            let c = cum[k];
            vec![1.0, n, c[0], c[1], c[2], c[3], c[4], c[5]]
        };
        let last = batch.requests.iter().filter_map(|r| r.last_token_ns).fold(f64::NEG_INFINITY, f64::max);
        if let Some(returned) = batch.returned_ns.filter(|r| r.is_finite() && last.is_finite() && *r >= last) {
            tails.push(Sample { x: vec![1.0, n], y: returned - last, metric: TAIL_METRIC });
        }
        ends.push(row(schedule.steps.len()));
        let first = batch.requests.iter().filter_map(|r| r.scheduled_ns).filter(|t| t.is_finite()).reduce(f64::min);
        heads.push(first);
        for (r, seq) in batch.requests.iter().zip(&schedule.seqs) {
            let points = [
                (r.scheduled_ns, seq.first_scheduled),
                (r.first_token_ns, seq.first_token.map(|k| k + 1)),
                (r.last_token_ns, seq.last_token.map(|k| k + 1)),
            ];
            for (metric, (measured, k)) in points.into_iter().enumerate() {
                if let (Some(y), Some(k)) = (measured, k) {
                    if y.is_finite() {
                        samples.push((b, Sample { x: row(k), y, metric }));
                    }
                }
            }
        }
    }
    let needed = N - left_out.len();
    if samples.len() < needed {
        return Err(FitError::TooFewSamples { samples: samples.len(), needed });
    }
    // Every batch counts alike, whatever its size: each of its timestamps weighs 1/√(its count).
    let mut per_batch = vec![0usize; batches.len()];
    for (b, _) in &samples {
        per_batch[*b] += 1;
    }
    let weight = |b: usize, y: f64| 1.0 / (y.max(REL_FLOOR_NS) * (per_batch[b] as f64).sqrt());

    let head_samples: Vec<Sample> = heads
        .iter()
        .zip(&sizes)
        .filter_map(|(h, n)| h.map(|y| Sample { x: vec![1.0, *n], y, metric: HEAD_METRIC }))
        .collect();
    let mut theta = [0.0; N + TAIL];
    let mut unidentified: Vec<usize> = Vec::new();
    if head_samples.is_empty() {
        // No `scheduled_ts` anywhere: the head is fitted together with the steps.
        let rows: Vec<Sample> = samples.iter().map(|(b, s)| scaled(s, s.x.clone(), s.y, weight(*b, s.y))).collect();
        let (beta, dependent) = non_negative_least_squares(&rows, N, left_out);
        theta[..N].copy_from_slice(&beta);
        unidentified.extend(dependent);
    } else {
        // The head is measured: fit it on its own, then the steps on the time after it.
        let rows: Vec<Sample> =
            head_samples.iter().map(|s| scaled(s, s.x.clone(), s.y, 1.0 / s.y.max(REL_FLOOR_NS))).collect();
        let (head, dependent) = non_negative_least_squares(&rows, 2, &[]);
        theta[..2].copy_from_slice(&head);
        unidentified.extend(dependent);
        let rows: Vec<Sample> = samples
            .iter()
            .map(|(b, s)| {
                let offset = heads[*b].unwrap_or(head[0] + head[1] * sizes[*b]);
                let y = s.y - offset;
                scaled(s, s.x[2..].to_vec(), y, weight(*b, y))
            })
            .collect();
        let step_left_out: Vec<usize> = left_out.iter().map(|j| j - 2).collect();
        let (steps, dependent) = non_negative_least_squares(&rows, N - 2, &step_left_out);
        theta[2..N].copy_from_slice(&steps);
        unidentified.extend(dependent.iter().map(|j| j + 2));
    }
    if tails.is_empty() {
        // No return times: the tail stays 0, said as unidentified.
        unidentified.extend([N, N + 1]);
    } else {
        let rows: Vec<Sample> =
            tails.iter().map(|s| scaled(s, s.x.clone(), s.y, 1.0 / s.y.max(REL_FLOOR_NS))).collect();
        let (tail, dependent) = non_negative_least_squares(&rows, TAIL, &[]);
        theta[N..].copy_from_slice(&tail);
        unidentified.extend(dependent.iter().map(|j| j + N));
    }
    unidentified.sort_unstable();

    // Residuals of the whole model, as the simulator would predict each timestamp.
    let predict = |x: &[f64], coefficients: &[f64]| -> f64 { x.iter().zip(coefficients).map(|(x, t)| x * t).sum() };
    let mut residuals = BTreeMap::new();
    let all_rows = samples
        .iter()
        .map(|(_, s)| (s, &theta[..N]))
        .chain(tails.iter().map(|s| (s, &theta[N..])))
        .chain(head_samples.iter().map(|s| (s, &theta[..2])));
    let mut errors: BTreeMap<usize, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (s, coefficients) in all_rows {
        let err = (predict(&s.x, coefficients) - s.y).abs();
        let (abs, rel) = errors.entry(s.metric).or_default();
        abs.push(err / 1e6);
        if s.y > 0.0 {
            rel.push(err / s.y);
        }
    }
    for (m, (abs, rel)) in errors {
        residuals.insert(METRICS[m].to_owned(), residual(abs, rel));
    }
    let batch_fits = batches
        .iter()
        .zip(&ends)
        .map(|(b, end)| {
            let n = b.requests.len().max(1) as f64;
            let last = b.requests.iter().filter_map(|r| r.last_token_ns).reduce(f64::max);
            BatchFit {
                size: b.requests.len(),
                mean_prompt_tokens: b.requests.iter().map(|r| f64::from(r.prompt_tokens)).sum::<f64>() / n,
                mean_output_tokens: b.requests.iter().map(|r| f64::from(r.output_tokens)).sum::<f64>() / n,
                measured_last_token_ns: last,
                predicted_last_token_ns: predict(end, &theta[..N]),
            }
        })
        .collect();
    let mut coefficients = Coefficients::from_array([
        theta[0],
        theta[1],
        theta[2],
        theta[3],
        theta[4],
        theta[5],
        theta[6],
        theta[N],
        theta[N + 1],
    ]);
    coefficients.encoder_per_image_token_ns = images.then_some(theta[ENCODER]);
    Ok(FitResult {
        batches: batch_fits,
        coefficients,
        residuals,
        unidentified: unidentified.into_iter().map(|j| fit_name(j).to_owned()).collect(),
        samples: (samples.len() + tails.len()) as u64,
    })
}

/// `s` as a weighted least-squares row: `x` and `y` times `w`.
fn scaled(s: &Sample, x: Vec<f64>, y: f64, w: f64) -> Sample {
    Sample { x: x.into_iter().map(|v| v * w).collect(), y: y * w, metric: s.metric }
}

fn residual(mut abs: Vec<f64>, mut rel: Vec<f64>) -> Residual {
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    let pct = |v: &mut Vec<f64>, p: f64| {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(f64::total_cmp);
        // Nearest rank.
        let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    };
    Residual {
        samples: abs.len() as u64,
        mean_abs_ms: mean(&abs),
        p50_abs_ms: pct(&mut abs, 0.50),
        p99_abs_ms: pct(&mut abs, 0.99),
        mean_rel: mean(&rel),
        p50_rel: pct(&mut rel, 0.50),
        p99_rel: pct(&mut rel, 0.99),
    }
}

/// Least squares with every coefficient >= 0: fit on the free columns, fix the most negative at 0,
/// repeat. Returns the `n` coefficients and the columns the data could not identify. The columns
/// `left_out` are not fitted (0) and not reported.
pub(super) fn non_negative_least_squares(samples: &[Sample], n: usize, left_out: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let mut active: Vec<usize> = (0..n).filter(|j| !left_out.contains(j)).collect();
    let mut unidentified = Vec::new();
    loop {
        let (beta, dependent) = least_squares(samples, &active);
        if !dependent.is_empty() {
            unidentified.extend(dependent.iter().copied());
            active.retain(|j| !dependent.contains(j));
            continue;
        }
        let most_negative =
            active.iter().zip(&beta).filter(|(_, b)| **b < 0.0).min_by(|a, b| a.1.total_cmp(b.1)).map(|(j, _)| *j);
        match most_negative {
            Some(j) => active.retain(|&a| a != j),
            None => {
                let mut theta = vec![0.0; n];
                for (j, b) in active.iter().zip(beta) {
                    theta[*j] = b;
                }
                unidentified.sort_unstable();
                return (theta, unidentified);
            }
        }
    }
}

/// Ordinary least squares on the columns `cols`, by modified Gram-Schmidt on unit-norm columns.
/// Returns the coefficients (in `cols` order) and the columns found linearly dependent on the
/// earlier ones (then the coefficients are not meaningful and the caller drops them).
fn least_squares(samples: &[Sample], cols: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let m = samples.len();
    let k = cols.len();
    if k == 0 {
        return (Vec::new(), Vec::new());
    }
    // Columns, scaled to unit norm (the scales differ by orders of magnitude).
    let mut q: Vec<Vec<f64>> = cols.iter().map(|&j| samples.iter().map(|s| s.x[j]).collect()).collect();
    let scale: Vec<f64> = q.iter().map(|c| norm(c)).collect();
    let mut dependent = Vec::new();
    for (c, (col, s)) in q.iter_mut().zip(&scale).enumerate() {
        if *s == 0.0 {
            dependent.push(cols[c]);
        } else {
            col.iter_mut().for_each(|v| *v /= s);
        }
    }
    if !dependent.is_empty() {
        return (Vec::new(), dependent);
    }
    let mut r = vec![vec![0.0; k]; k];
    for j in 0..k {
        // Twice, for orthogonality at working precision.
        for _ in 0..2 {
            for i in 0..j {
                let d = dot(&q[i], &q[j]);
                r[i][j] += d;
                let (qi, qj) = (q[i].clone(), &mut q[j]);
                qj.iter_mut().zip(&qi).for_each(|(a, b)| *a -= d * b);
            }
        }
        let n = norm(&q[j]);
        // A column whose part the earlier ones cannot explain is below round-off is dependent.
        if n < 1e-8 {
            dependent.push(cols[j]);
            continue;
        }
        r[j][j] = n;
        q[j].iter_mut().for_each(|v| *v /= n);
    }
    if !dependent.is_empty() {
        return (Vec::new(), dependent);
    }
    let y: Vec<f64> = samples.iter().map(|s| s.y).collect();
    let qty: Vec<f64> = (0..k).map(|i| dot(&q[i], &y)).collect();
    let mut beta = vec![0.0; k];
    for i in (0..k).rev() {
        let tail: f64 = (i + 1..k).map(|j| r[i][j] * beta[j]).sum();
        beta[i] = (qty[i] - tail) / r[i][i];
    }
    debug_assert_eq!(m, y.len());
    (beta.iter().zip(&scale).map(|(b, s)| b / s).collect(), Vec::new())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}
