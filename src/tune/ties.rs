//! When the data cannot tell two points apart: the noise over seeds, the tie band, the paired
//! tie check and the plateau, and which of two tied settings is the simpler. `search`'s
//! recommendation applies them (see its module docs).

use super::Point;

/// Points within this fraction of the highest score are a plateau: any of them would do, so the
/// recommendation is the one with the most headroom.
pub const PLATEAU: f64 = 0.02;

/// How many seeds the noise is measured over: the scenario's own and the next ones.
pub const NOISE_SEEDS: u64 = 5;

/// The band in which points may tie with the best, before the paired check ([`paired_tie`]): the
/// 95 % range of the difference of two independent single runs whose scores each vary by `noise`
/// (the best point's relative standard deviation over seeds), `1.96 × √2 × noise`, and never
/// less than [`PLATEAU`].
pub fn tie_band(noise: f64) -> f64 {
    (1.96 * std::f64::consts::SQRT_2 * noise).max(PLATEAU)
}

/// Student's t at 97.5 % for the [`NOISE_SEEDS`]` - 1 = 4` degrees of freedom of the paired check.
const T_975_4: f64 = 2.776;

/// Whether a point ties with the best, from their scores over the same [`NOISE_SEEDS`] seeds
/// (`point[k]` and `best[k]` ran with one seed, so the workload's draws cancel in their
/// difference): the mean difference is within `T_975_4` standard errors of it (a paired t
/// interval at 95 %) or within [`PLATEAU`] of the best's mean. The data cannot tell such points
/// apart.
pub fn paired_tie(point: &[f64], best: &[f64]) -> bool {
    let n = point.len().min(best.len());
    if n == 0 {
        return false;
    }
    let d: Vec<f64> = point.iter().zip(best).map(|(p, b)| p - b).collect();
    let mean = d.iter().sum::<f64>() / n as f64;
    let best_mean = best.iter().sum::<f64>() / n as f64;
    let se = if n > 1 {
        (d.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64 / n as f64).sqrt()
    } else {
        0.0
    };
    mean >= -(T_975_4 * se).max(PLATEAU * best_mean.abs())
}

/// The simpler of two settings that tie: the smaller batch (less memory held, a batch's wait
/// shorter), then the longer timeout (fewer partial batches: the batcher waits for full ones,
/// the setting least sensitive to the arrival pattern). `Less` means `a` is simpler.
pub fn simpler(a: &Point, b: &Point) -> std::cmp::Ordering {
    a.batch_size.cmp(&b.batch_size).then(b.batch_timeout.cmp(&a.batch_timeout))
}

/// The relative standard deviation of `scores`.
pub(super) fn relative_sd(scores: &[f64]) -> f64 {
    let n = scores.len() as f64;
    let mean = scores.iter().sum::<f64>() / n;
    let var = scores.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    if mean > 0.0 { var.sqrt() / mean } else { 0.0 }
}
