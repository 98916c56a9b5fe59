//! How fast and how busy the machine is, read at a run's start and end: a fixed CPU workload
//! timed ([`speed_probe`]), the 1-minute load average (`/proc/loadavg`) and the CPU time the
//! hypervisor took from this guest (`steal` in `/proc/stat`).
//!
//! Why: a machine that slows down during a series of runs (other tenants, thermal limits) looks
//! exactly like a regression to a test within each run. Two runs' probes tell them apart: the
//! same workload took longer. The workload is one long chain of dependent integer hash steps, so
//! it measures how fast one core runs and what share of it this process gets, not memory or
//! vector units, and no optimizer can shorten it (`std::hint::black_box` on its input and
//! output). A sample runs it in [`PROBE_ROUNDS`] rounds and keeps their median, so one preemption
//! in one round does not move it; the probe is the mean of [`PROBE_SAMPLES`] samples
//! [`PROBE_GAP`] apart, because a shared machine's speed wanders from one tenth of a second to
//! the next (on the 2-CPU test machine, samples 400 ms apart differed by about 3 % sd however many
//! rounds each took, while rounds back to back agreed within 1 %): one sample is one moment of it.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Rounds of the probe's workload; [`speed_probe`] gives their median.
pub const PROBE_ROUNDS: usize = 5;

/// Dependent hash steps per round: a few milliseconds on a current x86 core, so that the
/// probe's rounds take some tens of milliseconds in all.
const ROUND_STEPS: u64 = 1_500_000;

/// One round of the workload: `ROUND_STEPS` splitmix64 steps, each depending on the last.
fn probe_round(seed: u64) -> u64 {
    let mut x = seed;
    for i in 0..ROUND_STEPS {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15) ^ i;
        let z = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x = z ^ (z >> 31);
    }
    x
}

/// Samples of the probe [`speed_probe`] takes, [`PROBE_GAP`] apart.
pub const PROBE_SAMPLES: usize = 5;

/// The pause between two samples: long enough that they see different moments of the machine.
pub const PROBE_GAP: Duration = Duration::from_millis(100);

/// One sample: the median of [`PROBE_ROUNDS`] rounds of the workload, on the calling thread.
fn probe_sample() -> Duration {
    let mut rounds: Vec<Duration> = (0..PROBE_ROUNDS as u64)
        .map(|round| {
            let start = Instant::now();
            black_box(probe_round(black_box(round)));
            start.elapsed()
        })
        .collect();
    rounds.sort_unstable();
    rounds[PROBE_ROUNDS / 2]
}

/// The mean of the samples' times; zero for none.
fn mean_time(samples: &[Duration]) -> Duration {
    match u32::try_from(samples.len()) {
        Ok(n) if n > 0 => samples.iter().sum::<Duration>() / n,
        _ => Duration::ZERO,
    }
}

/// Times the fixed workload: the mean of [`PROBE_SAMPLES`] samples [`PROBE_GAP`] apart, on the
/// calling thread (half a second in all). The same machine, equally idle, gives the same time; a
/// slower or busier one a longer time.
pub fn speed_probe() -> Duration {
    let samples: Vec<Duration> = (0..PROBE_SAMPLES)
        .map(|k| {
            if k > 0 {
                std::thread::sleep(PROBE_GAP);
            }
            probe_sample()
        })
        .collect();
    mean_time(&samples)
}

/// The 1-minute load average from `/proc/loadavg` text (`0.52 0.58 0.59 1/389 12345`).
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok().filter(|l: &f64| l.is_finite() && *l >= 0.0)
}

/// The 1-minute load average now; `None` when `/proc/loadavg` is unreadable.
pub fn load_average() -> Option<f64> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// All CPUs' time since boot, in clock ticks, from `/proc/stat`'s `cpu` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTicks {
    /// Time the hypervisor ran something else while this guest had work (`steal`).
    pub steal: u64,
    /// All time: user, nice, system, idle, iowait, irq, softirq and steal (`guest` and
    /// `guest_nice` are already counted in user and nice).
    pub total: u64,
}

/// The `cpu` line of `/proc/stat` text: `cpu  user nice system idle iowait irq softirq steal
/// guest guest_nice`. A kernel too old to count steal (before 2.6.11) has no eighth field: `None`.
pub fn parse_cpu_ticks_line(stat: &str) -> Option<CpuTicks> {
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if fields.len() < 8 {
        return None;
    }
    Some(CpuTicks { steal: fields[7], total: fields.iter().sum() })
}

/// All CPUs' time now; `None` when `/proc/stat` is unreadable.
pub fn cpu_ticks() -> Option<CpuTicks> {
    parse_cpu_ticks_line(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The share of all CPU time between two readings that the hypervisor stole, in `[0, 1]`;
/// `None` when no tick passed between them (or the counters went backwards).
pub fn steal_share(start: CpuTicks, end: CpuTicks) -> Option<f64> {
    let total = end.total.checked_sub(start.total).filter(|&t| t > 0)?;
    let steal = end.steal.checked_sub(start.steal)?;
    Some((steal as f64 / total as f64).min(1.0))
}

/// One reading of the machine: the probe's time, the load average and the CPU tick counters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MachineSample {
    /// [`speed_probe`]'s time.
    pub probe: Duration,
    /// [`load_average`], read before the probe (so the probe is not in it).
    pub load: Option<f64>,
    /// [`cpu_ticks`], read before the probe.
    pub ticks: Option<CpuTicks>,
}

impl MachineSample {
    /// Reads the load and ticks, then runs the probe (half a second, some tens of ms of one core).
    pub fn take() -> Self {
        let load = load_average();
        let ticks = cpu_ticks();
        MachineSample { probe: speed_probe(), load, ticks }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadavg_takes_the_one_minute_figure() {
        assert_eq!(parse_loadavg("0.52 0.58 0.59 1/389 12345\n"), Some(0.52));
        assert_eq!(parse_loadavg("12.00 3.10 1.00 9/1024 7"), Some(12.0));
        assert_eq!(parse_loadavg(""), None);
        assert_eq!(parse_loadavg("high 0.1 0.1 1/1 1"), None);
        assert_eq!(parse_loadavg("-1.0 0.1 0.1 1/1 1"), None);
    }

    #[test]
    fn cpu_ticks_come_from_the_cpu_line() {
        // A real /proc/stat head (Linux 6.8, two CPUs), guest columns non-zero.
        let stat = "cpu  225117 1052 78532 5327418 11873 0 2904 3391 77 5\n\
                    cpu0 112558 526 39266 2663709 5936 0 1452 1695 38 2\n\
                    cpu1 112559 526 39266 2663709 5937 0 1452 1696 39 3\n\
                    intr 31313113 9 0 0\nctxt 61345012\nbtime 1733300000\n";
        let ticks = parse_cpu_ticks_line(stat).expect("a cpu line");
        assert_eq!(ticks.steal, 3391);
        assert_eq!(ticks.total, 225117 + 1052 + 78532 + 5327418 + 11873 + 2904 + 3391, "guest not counted twice");
        // The aggregate line, never a per-CPU one, even when it comes later.
        assert_eq!(parse_cpu_ticks_line("cpu0 1 1 1 1 1 1 1 1\ncpu  2 2 2 2 2 2 2 2\n").map(|t| t.total), Some(16));
        assert_eq!(parse_cpu_ticks_line("cpu  1 2 3 4 5 6 7\n"), None, "no steal column");
        assert_eq!(parse_cpu_ticks_line("cpu  1 2 x 4 5 6 7 8\n"), None);
        assert_eq!(parse_cpu_ticks_line("intr 5\n"), None);
    }

    #[test]
    fn the_probe_is_the_mean_of_its_samples() {
        let ms = Duration::from_millis;
        assert_eq!(mean_time(&[ms(5), ms(6), ms(7), ms(10)]), ms(7));
        assert_eq!(mean_time(&[ms(4)]), ms(4));
        assert_eq!(mean_time(&[]), Duration::ZERO);
    }

    #[test]
    fn steal_share_is_the_steal_delta_over_the_total_delta() {
        let start = CpuTicks { steal: 100, total: 10_000 };
        assert_eq!(steal_share(start, CpuTicks { steal: 150, total: 10_200 }), Some(0.25));
        assert_eq!(steal_share(start, CpuTicks { steal: 100, total: 10_400 }), Some(0.0));
        assert_eq!(steal_share(start, start), None, "no tick passed");
        assert_eq!(steal_share(start, CpuTicks { steal: 90, total: 10_400 }), None, "a counter went back");
    }

    #[test]
    fn this_machine_reads_and_the_probe_does_its_work() {
        let began = Instant::now();
        let sample = MachineSample::take();
        // Its samples are spread over time: they wait between them, and each did its rounds.
        let took = began.elapsed();
        assert!(took >= PROBE_GAP * (PROBE_SAMPLES as u32 - 1), "{took:?}");
        assert!(sample.probe > Duration::ZERO && sample.probe < took, "{:?} of {took:?}", sample.probe);
        assert!(sample.load.is_some_and(|l| l >= 0.0), "{:?}", sample.load);
        let ticks = sample.ticks.expect("/proc/stat");
        assert!(ticks.total > 0 && ticks.steal <= ticks.total, "{ticks:?}");
        // The workload is fixed: the same input gives the same chain, and another input another.
        assert_eq!(probe_round(3), probe_round(3));
        assert_ne!(probe_round(3), probe_round(4));
    }
}
