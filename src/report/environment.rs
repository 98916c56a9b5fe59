//! Where a run happened: versions, machine, seeds. Read once, at the start of a run; the
//! machine-speed probe ([`MachineProbe`]) at its start and end.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{EngineInfo, ResolvedEngineConfig};
use crate::sys::machine::{MachineSample, steal_share};

/// Where and with what the run ran: versions, engine, machine and seeds (`report.json`'s `environment`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The batchlab version that ran (`CARGO_PKG_VERSION`).
    pub batchlab_version: String,
    /// The engine's name, from the [`EngineInfo`] its `start` returned.
    pub engine_name: String,
    /// The engine's version, from its [`EngineInfo`].
    pub engine_version: String,
    /// The scheduler and KV-cache configuration the engine resolved, from its [`EngineInfo`];
    /// `null` when the engine does not say. `batchlab calibrate` reads it.
    pub engine_config: Option<ResolvedEngineConfig>,
    /// From `/proc/cpuinfo`; `None` when it is unreadable or names no model.
    pub cpu_model: Option<String>,
    /// CPUs this process may use (affinity and cgroup limits included).
    pub cores: Option<usize>,
    /// The CPU affinity mask the run used, as a CPU list (`0-1`): the cgroup's cpuset after
    /// `sys::reset_cpu_affinity`, or the inherited mask. `None` when unreadable.
    pub cpu_affinity: Option<String>,
    /// `linux 6.8.0-…`: the target OS and, when readable, the kernel release.
    pub os: String,
    /// The machine's hostname; `None` when unreadable.
    pub hostname: Option<String>,
    /// How fast and how busy the machine was at the run's start and end; `None` in virtual time
    /// (the results do not depend on the machine, and the report stays the same for a seed), and
    /// in reports written before batchlab had the probe.
    #[serde(default)]
    pub machine: Option<MachineProbe>,
    /// Every seed the run used, by component (`run`, `workload`, `engine`, ...).
    pub seeds: BTreeMap<String, u64>,
}

// How many times this thread read the machine's description: a test's count of reports made
// (tune's points make none).
#[cfg(test)]
thread_local! {
    static DETECTIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many times [`Environment::detect`] ran on this thread so far.
#[cfg(test)]
pub(crate) fn detections_on_this_thread() -> usize {
    DETECTIONS.with(std::cell::Cell::get)
}

impl Environment {
    /// Reads the machine's description. Never fails: what cannot be read is `None`.
    pub fn detect(engine: &EngineInfo, seeds: BTreeMap<String, u64>) -> Self {
        #[cfg(test)]
        DETECTIONS.with(|n| n.set(n.get() + 1));
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let kernel = read("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string());
        Environment {
            batchlab_version: env!("CARGO_PKG_VERSION").to_string(),
            engine_name: engine.name.clone(),
            engine_version: engine.version.clone(),
            engine_config: engine.resolved_config,
            cpu_model: read("/proc/cpuinfo").as_deref().and_then(parse_cpu_model),
            cores: std::thread::available_parallelism().ok().map(|n| n.get()),
            cpu_affinity: Some(crate::sys::format_cpu_list(&crate::sys::current_affinity())).filter(|s| !s.is_empty()),
            os: match kernel {
                Some(k) if !k.is_empty() => format!("{} {k}", std::env::consts::OS),
                _ => std::env::consts::OS.to_string(),
            },
            hostname: read("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
            machine: None,
            seeds,
        }
    }

    /// The relative drift of the machine's speed from this run to `later`
    /// ([`MachineProbe::drift_to`]); `None` unless both runs have a probe.
    pub fn machine_drift(&self, later: &Environment) -> Option<f64> {
        self.machine.as_ref()?.drift_to(later.machine.as_ref()?)
    }
}

/// The machine-speed probe of a run (`report.json`'s `environment.machine`): a fixed CPU workload
/// timed before the engine starts and after it stops ([`crate::sys::machine::speed_probe`]), the
/// 1-minute load average at both points and the share of CPU time stolen by the hypervisor in
/// between. Two runs whose probes differ ran on a machine that changed speed, whatever changed in
/// the software.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineProbe {
    /// The probe's time at the run's start, in ms (the mean of its samples).
    pub probe_start_ms: f64,
    /// The probe's time at the run's end, in ms.
    pub probe_end_ms: f64,
    /// The 1-minute load average at the start (`/proc/loadavg`); `None` when unreadable.
    pub load_start: Option<f64>,
    /// The 1-minute load average at the end; `None` when unreadable.
    pub load_end: Option<f64>,
    /// The share of all CPUs' time between start and end that the hypervisor stole (`steal` in
    /// `/proc/stat`), in `[0, 1]`; `None` when unreadable or no tick passed.
    pub steal_share: Option<f64>,
}

impl MachineProbe {
    /// The probe of a run from the machine's readings at its start and end.
    pub fn between(start: &MachineSample, end: &MachineSample) -> Self {
        // Microseconds are far below the probe's noise.
        let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
        MachineProbe {
            probe_start_ms: ms(start.probe),
            probe_end_ms: ms(end.probe),
            load_start: start.load,
            load_end: end.load,
            steal_share: start.ticks.zip(end.ticks).and_then(|(s, e)| steal_share(s, e)),
        }
    }

    /// The run's probe time in ms: the mean of the start and end probes. `None` when either is
    /// not a positive finite time (a hand-edited report).
    pub fn speed_ms(&self) -> Option<f64> {
        let valid = |ms: f64| ms.is_finite() && ms > 0.0;
        (valid(self.probe_start_ms) && valid(self.probe_end_ms))
            .then(|| (self.probe_start_ms + self.probe_end_ms) / 2.0)
    }

    /// The relative drift of the machine from this run to `later`: `(later − this) / this` of
    /// their [`speed_ms`](Self::speed_ms). Positive: the same work took longer in `later` (its
    /// machine was slower or busier); `0.2` is 20 % slower. `None` when either has no valid time.
    pub fn drift_to(&self, later: &MachineProbe) -> Option<f64> {
        let (a, b) = (self.speed_ms()?, later.speed_ms()?);
        Some((b - a) / a)
    }
}

/// The CPU model from `/proc/cpuinfo` text: `model name` on x86, else the ARM or POWER fields.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    let field = |wanted: &str| {
        cpuinfo.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            let value = value.trim();
            (key.trim() == wanted && !value.is_empty()).then(|| value.to_string())
        })
    };
    ["model name", "Hardware", "cpu model", "cpu", "Processor"].into_iter().find_map(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_from_cpuinfo() {
        let cases = [
            (
                "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n",
                Some("Intel(R) Xeon(R) CPU @ 2.20GHz"),
            ),
            ("processor\t: 0\nBogoMIPS\t: 50.00\n\nHardware\t: BCM2835\n", Some("BCM2835")),
            ("processor\t: 0\ncpu\t\t: POWER9 (raw), altivec supported\n", Some("POWER9 (raw), altivec supported")),
            ("model name\t:\nprocessor\t: 0\n", None),
            ("", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_cpu_model(text).as_deref(), expected, "{text:?}");
        }
    }

    fn probe(start: f64, end: f64) -> MachineProbe {
        MachineProbe { probe_start_ms: start, probe_end_ms: end, load_start: None, load_end: None, steal_share: None }
    }

    #[test]
    fn drift_is_the_relative_change_of_the_mean_probe_time() {
        assert_eq!(probe(10.0, 14.0).speed_ms(), Some(12.0));
        assert_eq!(probe(10.0, 10.0).drift_to(&probe(12.0, 12.0)), Some(0.2));
        assert_eq!(probe(10.0, 14.0).drift_to(&probe(9.0, 9.0)), Some(-0.25));
        assert_eq!(probe(8.0, 8.0).drift_to(&probe(7.0, 9.0)), Some(0.0));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(probe(bad, 10.0).speed_ms(), None, "{bad}");
            assert_eq!(probe(10.0, 10.0).drift_to(&probe(10.0, bad)), None, "{bad}");
            assert_eq!(probe(10.0, bad).drift_to(&probe(10.0, 10.0)), None, "{bad}");
        }
        let mut a = Environment::detect(&EngineInfo::default(), BTreeMap::new());
        let mut b = a.clone();
        assert_eq!(a.machine_drift(&b), None, "no probes");
        a.machine = Some(probe(10.0, 10.0));
        assert_eq!(a.machine_drift(&b), None, "one probe");
        b.machine = Some(probe(11.0, 11.0));
        assert!(a.machine_drift(&b).is_some_and(|d| (d - 0.1).abs() < 1e-12), "{:?}", a.machine_drift(&b));
    }

    #[test]
    fn a_probe_is_built_from_two_samples_in_milliseconds() {
        use crate::sys::machine::CpuTicks;
        use std::time::Duration;
        let start = MachineSample {
            probe: Duration::from_nanos(7_712_345),
            load: Some(0.5),
            ticks: Some(CpuTicks { steal: 10, total: 1000 }),
        };
        let end = MachineSample {
            probe: Duration::from_micros(9_100),
            load: None,
            ticks: Some(CpuTicks { steal: 20, total: 1200 }),
        };
        let p = MachineProbe::between(&start, &end);
        assert_eq!(
            p,
            MachineProbe {
                probe_start_ms: 7.712,
                probe_end_ms: 9.1,
                load_start: Some(0.5),
                load_end: None,
                steal_share: Some(0.05),
            }
        );
        let no_ticks = MachineSample { ticks: None, ..end };
        assert_eq!(MachineProbe::between(&start, &no_ticks).steal_share, None);
    }

    #[test]
    fn an_environment_without_a_machine_field_still_reads() {
        let env = Environment::detect(&EngineInfo::default(), BTreeMap::new());
        let mut value = serde_json::to_value(&env).unwrap();
        value.as_object_mut().unwrap().remove("machine");
        let read: Environment = serde_json::from_value(value).expect("an older report's environment");
        assert_eq!(read, env);
    }

    #[test]
    fn detect_never_fails() {
        let info = EngineInfo {
            name: "sim".into(),
            version: "1".into(),
            resolved_config: None,
            processes: None,
            engine_thread: None,
        };
        let env = Environment::detect(&info, BTreeMap::from([("run".to_string(), 7)]));
        assert_eq!(env.engine_name, "sim");
        assert!(env.os.starts_with(std::env::consts::OS));
        let mask = env.cpu_affinity.expect("a mask");
        let cpus = crate::sys::affinity::parse_cpu_list(&mask).expect("a CPU list");
        // `cores` also counts a cgroup CPU quota, so it may be below the mask's size.
        assert!(!cpus.is_empty() && env.cores.is_some_and(|n| n <= cpus.len()), "{mask} {:?}", env.cores);
    }
}
