//! CPU affinity reset: run on every CPU the process's cgroup allows.
//!
//! Why: a process started from a shell, a CI runner or a parent with an OpenMP runtime may inherit a
//! narrow affinity mask. vLLM's CPU backend binds its threads to the cores it sees, so a narrow mask
//! silently costs throughput. [`reset_cpu_affinity`] widens the mask to the cgroup's cpuset.
//!
//! How: read this process's own cgroup from `/proc/self/cgroup` (not the hierarchy root, which in a
//! container without a cgroup namespace is the host's), find where that hierarchy is mounted
//! (`/proc/self/mountinfo`, falling back to `/sys/fs/cgroup`), then take the first non-empty file of
//! - cgroup v2 (`0::/path`): `<mount>/<path>/cpuset.cpus.effective`, walking up to the parents;
//! - cgroup v1 (`N:cpuset[,…]:/path`): `<mount>/<path>/cpuset.cpus`, walking up to the parents.
//!
//! `BATCHLAB_CPUS` (a CPU list, `0` or `2-3`) asks for exactly those CPUs instead: a process
//! pinned on purpose (a benchmark's client on one core, its server on another) says so there,
//! since `taskset` alone would be widened away. A list that does not parse is warned about, with
//! its column, and the cpuset applies.
//!
//! An empty, unreadable or malformed file keeps the current mask and says why in the returned
//! [`AffinityReset`] (and at debug/warn level).
//!
//! Invariant: call it first thing in `main`, before the tokio runtime, the engine or any other
//! thread starts, so every thread and child process inherits the mask. It sets every thread that
//! exists at the time anyway. `std::thread::available_parallelism` follows the mask (it reads
//! `sched_getaffinity`; see the test `available_parallelism_follows_the_mask`), and so do
//! the vLLM engine's `OMP_NUM_THREADS` default and the report's `cores`.
//!
//! The parsers take file contents as arguments and are pure; only [`reset_cpu_affinity`],
//! [`current_affinity`] and [`set_thread_affinity`] touch the system.

use std::fmt;
use std::path::{Path, PathBuf};

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use super::SysError;

/// A CPU list that could not be parsed, with the byte offset of the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad CPU list at column {}: expected {expected}, found {found:?}", .column)]
pub struct CpuListError {
    /// 1-based column in the trimmed text.
    pub column: usize,
    /// What the parser expected there, e.g. `a CPU number`.
    pub expected: &'static str,
    /// What the text held there instead.
    pub found: String,
}

/// Parses a kernel CPU list (`0-3,8,10-11`, as in `cpuset.cpus`) into sorted, distinct CPU numbers.
/// Surrounding whitespace and a trailing newline are allowed; an empty list gives an empty vector.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, CpuListError> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Ok(cpus);
    }
    let mut column = 1;
    for part in text.split(',') {
        let bad = |offset: usize, expected, found: &str| CpuListError {
            column: column + offset,
            expected,
            found: found.to_string(),
        };
        let number = |s: &str, offset: usize| {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(offset, "a CPU number", s));
            }
            s.parse::<usize>().map_err(|_| bad(offset, "a CPU number below 2^64", s))
        };
        match part.split_once('-') {
            None => cpus.push(number(part, 0)?),
            Some((lo, hi)) => {
                let (first, last) = (number(lo, 0)?, number(hi, lo.len() + 1)?);
                if last < first {
                    return Err(bad(0, "a range whose end is not below its start", part));
                }
                if last - first >= CpuSet::count() {
                    return Err(bad(0, "a range no wider than a CPU mask holds", part));
                }
                cpus.extend(first..=last);
            }
        }
        column += part.len() + 1;
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPU numbers as a kernel CPU list: `[0, 1, 2, 5]` → `0-2,5`. Unsorted input is sorted.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut iter = sorted.into_iter().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last = iter.next().unwrap_or(last);
        }
        parts.push(if first == last { first.to_string() } else { format!("{first}-{last}") });
    }
    parts.join(",")
}

/// Which cgroup hierarchy a path in `/proc/self/cgroup` belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CgroupVersion {
    /// The unified hierarchy, line `0::/path`.
    V2,
    /// A v1 hierarchy with the `cpuset` controller, line `N:cpuset[,…]:/path`.
    V1Cpuset,
}

/// This process's cgroup paths from `/proc/self/cgroup` text, v2 first, then v1's cpuset, each
/// only when present. Lines that are neither (other v1 controllers, garbage) are skipped.
pub(crate) fn parse_proc_self_cgroup(text: &str) -> Vec<(CgroupVersion, String)> {
    let mut v2 = None;
    let mut v1 = None;
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        if id == "0" && controllers.is_empty() {
            v2.get_or_insert_with(|| path.to_string());
        } else if controllers.split(',').any(|c| c == "cpuset") {
            v1.get_or_insert_with(|| path.to_string());
        }
    }
    let mut found = Vec::new();
    found.extend(v2.map(|p| (CgroupVersion::V2, p)));
    found.extend(v1.map(|p| (CgroupVersion::V1Cpuset, p)));
    found
}

/// A cgroup filesystem mount from `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CgroupMount {
    /// Which cgroup hierarchy this mount is.
    pub version: CgroupVersion,
    /// The hierarchy path that is mounted (`/` unless a sub-tree is bind-mounted, as in a container
    /// without a cgroup namespace).
    pub root: String,
    /// Where it is mounted, e.g. `/sys/fs/cgroup`.
    pub mount_point: PathBuf,
}

/// The cgroup2 mount and the v1 cpuset mount from `/proc/self/mountinfo` text. A line reads
/// `id parent major:minor root mount-point options [optional…] - fstype source super-options`.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let unescape =
        |s: &str| s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\");
    let mut mounts = Vec::new();
    for line in text.lines() {
        let Some((before, after)) = line.split_once(" - ") else { continue };
        let before: Vec<&str> = before.split(' ').collect();
        let after: Vec<&str> = after.split(' ').collect();
        let (Some(root), Some(mount_point), Some(fstype)) = (before.get(3), before.get(4), after.first()) else {
            continue;
        };
        let version = match *fstype {
            "cgroup2" => CgroupVersion::V2,
            "cgroup" if after.get(2).is_some_and(|opts| opts.split(',').any(|o| o == "cpuset")) => {
                CgroupVersion::V1Cpuset
            }
            _ => continue,
        };
        if !mounts.iter().any(|m: &CgroupMount| m.version == version) {
            mounts.push(CgroupMount {
                version,
                root: unescape(root),
                mount_point: PathBuf::from(unescape(mount_point)),
            });
        }
    }
    mounts
}

/// The files to try, in order: for each of this process's cgroups (v2 first), the cgroup's own
/// cpuset file, then its parents' up to the mount point. Pure: the texts of `/proc/self/cgroup` and
/// `/proc/self/mountinfo` are passed in. Without a mount line, `/sys/fs/cgroup` (v2) and
/// `/sys/fs/cgroup/cpuset` (v1) are assumed.
pub(crate) fn cpuset_candidates(proc_self_cgroup: &str, mountinfo: &str) -> Vec<PathBuf> {
    let mounts = parse_mountinfo(mountinfo);
    let mut files = Vec::new();
    for (version, path) in parse_proc_self_cgroup(proc_self_cgroup) {
        let (default_mount, file) = match version {
            CgroupVersion::V2 => ("/sys/fs/cgroup", "cpuset.cpus.effective"),
            CgroupVersion::V1Cpuset => ("/sys/fs/cgroup/cpuset", "cpuset.cpus"),
        };
        let (mount_point, root) = match mounts.iter().find(|m| m.version == version) {
            Some(m) => (m.mount_point.clone(), m.root.clone()),
            None => (PathBuf::from(default_mount), "/".to_string()),
        };
        // The cgroup path is relative to the hierarchy; the mount shows it from `root` down.
        let relative = path.strip_prefix(root.trim_end_matches('/')).unwrap_or(&path);
        let mut dir = mount_point.join(relative.trim_start_matches('/'));
        loop {
            files.push(dir.join(file));
            if dir == mount_point || !dir.pop() || !dir.starts_with(&mount_point) {
                break;
            }
        }
    }
    files
}

/// Where the mask in force came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AffinitySource {
    /// Set from this cgroup cpuset file.
    Cgroup(PathBuf),
    /// The CPUs `BATCHLAB_CPUS` asked for.
    Requested(String),
    /// The mask the process started with, kept; the reason says why.
    Kept {
        /// Why no cgroup cpuset was applied.
        reason: String,
    },
}

impl fmt::Display for AffinitySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AffinitySource::Cgroup(path) => write!(f, "cgroup cpuset {}", path.display()),
            AffinitySource::Requested(list) => write!(f, "{CPUS_ENV}={list}"),
            AffinitySource::Kept { reason } => write!(f, "inherited mask kept: {reason}"),
        }
    }
}

/// The result of [`reset_cpu_affinity`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AffinityReset {
    /// The CPUs this process may now run on (read back from the kernel), sorted.
    pub allowed: Vec<usize>,
    /// The mask before the reset.
    pub previous: Vec<usize>,
    /// Where `allowed` came from.
    pub source: AffinitySource,
}

impl AffinityReset {
    /// `allowed` as a CPU list, e.g. `0-1`.
    pub fn allowed_list(&self) -> String {
        format_cpu_list(&self.allowed)
    }
}

/// How many CPUs this process may use: its affinity mask (the cgroup's cpuset, or `BATCHLAB_CPUS`,
/// once [`reset_cpu_affinity`] ran) and a cgroup quota, as `std::thread::available_parallelism`
/// reads them; 1 when that cannot be known. The default size of every pool of threads batchlab
/// starts: the tune search's, the HTTP client's runtime.
pub fn usable_cpus() -> std::num::NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(std::num::NonZeroUsize::MIN)
}

/// The CPUs the calling thread may run on (`sched_getaffinity`), sorted; empty if unreadable.
pub fn current_affinity() -> Vec<usize> {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap_or(false)).collect(),
        Err(e) => {
            tracing::debug!("sched_getaffinity failed: {e}");
            Vec::new()
        }
    }
}

/// Sets the calling thread's mask (`sched_setaffinity`; threads and processes it starts later
/// inherit it).
pub fn set_thread_affinity(cpus: &[usize]) -> Result<(), SysError> {
    set_affinity(Pid::from_raw(0), cpus)
}

fn set_affinity(tid: Pid, cpus: &[usize]) -> Result<(), SysError> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu).map_err(SysError::os("CpuSet::set"))?;
    }
    sched_setaffinity(tid, &set).map_err(SysError::os("sched_setaffinity"))
}

/// Widens this process's CPU mask to its cgroup's cpuset (see the module docs). Never fails: when
/// no cpuset can be read, or setting it fails, the current mask is kept and
/// [`AffinityReset::source`] says why.
pub fn reset_cpu_affinity() -> AffinityReset {
    let previous = current_affinity();
    if let Some(requested) = requested_cpus() {
        match set_all_threads(&requested) {
            Ok(()) => {
                let source = AffinitySource::Requested(format_cpu_list(&requested));
                tracing::debug!("CPU affinity from {source}");
                return AffinityReset { allowed: current_affinity(), previous, source };
            }
            Err(e) => tracing::warn!("{CPUS_ENV}={}: {e}; the cgroup's cpuset applies", format_cpu_list(&requested)),
        }
    }
    // Only a malformed file or a refused mask is worth a warning: no cpuset file is common.
    let (source, warn) = match cgroup_cpus() {
        Ok((path, cpus)) => match set_all_threads(&cpus) {
            Ok(()) => (AffinitySource::Cgroup(path), false),
            Err(e) => {
                let reason = format!("setting {} from {}: {e}", format_cpu_list(&cpus), path.display());
                (AffinitySource::Kept { reason }, true)
            }
        },
        Err((reason, malformed)) => (AffinitySource::Kept { reason }, malformed),
    };
    let allowed = current_affinity();
    let list = format_cpu_list(&allowed);
    match &source {
        AffinitySource::Kept { reason } if warn => tracing::warn!("CPU affinity {list} kept: {reason}"),
        AffinitySource::Kept { reason } => tracing::debug!("CPU affinity {list} kept: {reason}"),
        AffinitySource::Cgroup(_) | AffinitySource::Requested(_) => {
            tracing::debug!("CPU affinity {list} (was {}) from {source}", format_cpu_list(&previous))
        }
    }
    AffinityReset { allowed, previous, source }
}

/// The environment variable that pins batchlab to given CPUs (module docs).
pub const CPUS_ENV: &str = "BATCHLAB_CPUS";

/// The CPUs `BATCHLAB_CPUS` asks for, when it is set to a non-empty list that parses.
fn requested_cpus() -> Option<Vec<usize>> {
    let text = std::env::var(CPUS_ENV).ok()?;
    match parse_cpu_list(&text) {
        Ok(cpus) if !cpus.is_empty() => Some(cpus),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!("{CPUS_ENV}={text:?}: {e}; the cgroup's cpuset applies");
            None
        }
    }
}

/// The first non-empty cpuset file of this process's cgroups and its CPUs, or why there is none
/// and whether that is because a file was malformed.
fn cgroup_cpus() -> Result<(PathBuf, Vec<usize>), (String, bool)> {
    let read = |path: &Path| std::fs::read_to_string(path);
    let cgroup =
        read(Path::new("/proc/self/cgroup")).map_err(|e| (format!("cannot read /proc/self/cgroup: {e}"), false))?;
    let mountinfo = read(Path::new("/proc/self/mountinfo")).unwrap_or_default();
    let candidates = cpuset_candidates(&cgroup, &mountinfo);
    if candidates.is_empty() {
        return Err(("/proc/self/cgroup names no cgroup v2 or v1 cpuset hierarchy".into(), false));
    }
    let mut tried = Vec::new();
    for path in candidates {
        match read(&path) {
            Ok(text) => match parse_cpu_list(&text) {
                Ok(cpus) if !cpus.is_empty() => return Ok((path, cpus)),
                Ok(_) => tried.push(format!("{} is empty", path.display())),
                Err(e) => return Err((SysError::CpuList { path, source: e }.to_string(), true)),
            },
            Err(e) => tried.push(format!("{}: {e}", path.display())),
        }
    }
    tracing::debug!(?tried, "no cgroup cpuset file");
    Err((format!("no readable, non-empty cpuset file ({})", tried.join("; ")), false))
}

/// Sets the mask of every thread of this process (`/proc/self/task`), so it holds even if a thread
/// was started before the reset.
fn set_all_threads(cpus: &[usize]) -> Result<(), SysError> {
    let tasks = std::fs::read_dir("/proc/self/task").map_err(|source| SysError::Io {
        action: "list",
        path: "/proc/self/task".into(),
        source,
    })?;
    for tid in tasks.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()) {
        match set_affinity(Pid::from_raw(tid), cpus) {
            // A thread that ended meanwhile.
            Err(SysError::Os { source: nix::Error::ESRCH, .. }) => {}
            other => other?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        let cases: &[(&str, &[usize])] = &[
            ("0-3,8,10-11", &[0, 1, 2, 3, 8, 10, 11]),
            ("0-1\n", &[0, 1]),
            ("  5 \n", &[5]),
            ("7", &[7]),
            ("3,1,1-2", &[1, 2, 3]),
            ("", &[]),
            ("\n", &[]),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_cpu_list(text).as_deref(), Ok(*expected), "{text:?}");
        }
    }

    #[test]
    fn bad_cpu_lists_say_where_and_what() {
        let cases = [
            ("abc", "bad CPU list at column 1: expected a CPU number, found \"abc\""),
            ("0-3,x", "bad CPU list at column 5: expected a CPU number, found \"x\""),
            ("0-", "bad CPU list at column 3: expected a CPU number, found \"\""),
            ("1,,2", "bad CPU list at column 3: expected a CPU number, found \"\""),
            ("4-2", "bad CPU list at column 1: expected a range whose end is not below its start, found \"4-2\""),
            ("0 - 3", "bad CPU list at column 1: expected a CPU number, found \"0 \""),
            ("-1", "bad CPU list at column 1: expected a CPU number, found \"\""),
            (
                "0-99999999999",
                "bad CPU list at column 1: expected a range no wider than a CPU mask holds, found \"0-99999999999\"",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(parse_cpu_list(text).map_err(|e| e.to_string()), Err(message.to_string()), "{text:?}");
        }
    }

    #[test]
    fn cpu_lists_format_and_round_trip() {
        let cases: &[(&[usize], &str)] =
            &[(&[0, 1], "0-1"), (&[0, 1, 2, 5], "0-2,5"), (&[3], "3"), (&[], ""), (&[9, 8, 0, 8], "0,8-9")];
        for (cpus, text) in cases {
            assert_eq!(format_cpu_list(cpus), *text);
            let mut sorted = cpus.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(parse_cpu_list(text), Ok(sorted));
        }
    }

    #[test]
    fn proc_self_cgroup_formats() {
        let v2 = "0::/user.slice/session-3.scope\n";
        assert_eq!(parse_proc_self_cgroup(v2), vec![(CgroupVersion::V2, "/user.slice/session-3.scope".into())]);
        let v1 = "12:cpu,cpuacct:/a\n3:cpuset,cpu:/docker/abc\n1:name=systemd:/x\n";
        assert_eq!(parse_proc_self_cgroup(v1), vec![(CgroupVersion::V1Cpuset, "/docker/abc".into())]);
        // Hybrid, as on this project's machines: both, v2 first.
        let hybrid = "4:memory:/m\n3:cpuset:/\n0::/\n";
        assert_eq!(
            parse_proc_self_cgroup(hybrid),
            vec![(CgroupVersion::V2, "/".into()), (CgroupVersion::V1Cpuset, "/".into())]
        );
        assert_eq!(parse_proc_self_cgroup(""), vec![]);
        assert_eq!(parse_proc_self_cgroup("garbage\n::\n1:cpuset:relative\n"), vec![]);
    }

    #[test]
    fn candidates_walk_up_from_the_own_cgroup() {
        let paths = |cgroup, mountinfo| -> Vec<String> {
            cpuset_candidates(cgroup, mountinfo).iter().map(|p| p.display().to_string()).collect()
        };
        // Plain v2 at /sys/fs/cgroup (no mountinfo: the default).
        assert_eq!(
            paths("0::/a/b\n", ""),
            [
                "/sys/fs/cgroup/a/b/cpuset.cpus.effective",
                "/sys/fs/cgroup/a/cpuset.cpus.effective",
                "/sys/fs/cgroup/cpuset.cpus.effective"
            ]
        );
        // Hybrid: v2 mounted at unified/, v1 cpuset at cpuset/.
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 30 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset
36 30 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            paths("3:cpuset:/\n0::/\n", mountinfo),
            ["/sys/fs/cgroup/unified/cpuset.cpus.effective", "/sys/fs/cgroup/cpuset/cpuset.cpus"]
        );
        // v1 in a container without a cgroup namespace: the mount shows /docker/abc as its root.
        let container = "50 40 0:31 /docker/abc /sys/fs/cgroup/cpuset ro - cgroup cgroup rw,cpu,cpuset\n";
        assert_eq!(
            paths("5:cpu,cpuset:/docker/abc/x\n", container),
            ["/sys/fs/cgroup/cpuset/x/cpuset.cpus", "/sys/fs/cgroup/cpuset/cpuset.cpus"]
        );
        assert!(paths("garbage", mountinfo).is_empty());
    }

    /// The reset changes every thread's mask, including the other test's.
    fn affinity_test_lock() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[test]
    fn available_parallelism_follows_the_mask() {
        let _lock = affinity_test_lock();
        // On a thread of its own: the mask is per thread, and this one ends with the test.
        std::thread::spawn(|| {
            let all = current_affinity();
            assert!(!all.is_empty());
            set_thread_affinity(&all[..1]).expect("narrowing to one CPU");
            assert_eq!(current_affinity(), all[..1]);
            assert_eq!(std::thread::available_parallelism().map(|n| n.get()).ok(), Some(1));
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn reset_allows_a_cgroup_cpuset_or_says_why_not() {
        let _lock = affinity_test_lock();
        let reset = reset_cpu_affinity();
        assert!(!reset.allowed.is_empty());
        match &reset.source {
            AffinitySource::Cgroup(path) => {
                let text = std::fs::read_to_string(path).expect("the file it came from");
                assert_eq!(parse_cpu_list(&text).expect("a CPU list"), reset.allowed, "{}", path.display());
            }
            AffinitySource::Kept { reason } => assert!(!reason.is_empty()),
            AffinitySource::Requested(list) => assert_eq!(list, &reset.allowed_list()),
        }
        assert_eq!(reset.allowed_list(), format_cpu_list(&current_affinity()));
    }
}
