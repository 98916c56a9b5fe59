//! Where a run happened: versions, machine, seeds. Read once, at the start of a run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{EngineInfo, ResolvedEngineConfig};

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
    /// Every seed the run used, by component (`run`, `workload`, `engine`, ...).
    pub seeds: BTreeMap<String, u64>,
}

impl Environment {
    /// Reads the machine's description. Never fails: what cannot be read is `None`.
    pub fn detect(engine: &EngineInfo, seeds: BTreeMap<String, u64>) -> Self {
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
            seeds,
        }
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
