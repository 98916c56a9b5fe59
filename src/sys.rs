//! Process hygiene: batchlab's descendants (vLLM's EngineCore and workers) never outlive it.
//!
//! An engine shuts its own children down on the normal path. The paths it cannot cover (an
//! error that skips shutdown, a second Ctrl-C that exits at once, a panic) end in
//! [`reap_descendants`], which the binary calls on every way out. [`become_subreaper`] makes
//! orphaned grandchildren (a worker whose EngineCore died) re-parent to batchlab instead of init,
//! so they are still found.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Asks Linux to re-parent orphaned descendants to this process. Best effort.
pub fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// `pid → parent pid` for every process visible in /proc.
fn parents() -> HashMap<i32, i32> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return map };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may contain spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            map.insert(pid, ppid);
        }
    }
    map
}

/// Every live descendant of this process.
pub fn descendants() -> Vec<i32> {
    let me = std::process::id() as i32;
    let parents = parents();
    let mut found: Vec<i32> = Vec::new();
    let mut frontier = vec![me];
    while let Some(p) = frontier.pop() {
        for (&child, &parent) in &parents {
            if parent == p && !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found.sort_unstable();
    found
}

/// Sends SIGTERM to every descendant, waits up to `grace` for them to go, then SIGKILLs the rest
/// and reaps them. Returns how many there were.
pub fn reap_descendants(grace: Duration) -> usize {
    let first = descendants();
    if first.is_empty() {
        return 0;
    }
    tracing::debug!(?first, "terminating leftover child processes");
    for &pid in &first {
        // SAFETY: kill only sends a signal.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + grace;
    loop {
        reap_zombies();
        let left = descendants();
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for &pid in &left {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
            reap_zombies();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    first.len()
}

/// Collects exit statuses of finished children, so they do not linger as zombies.
fn reap_zombies() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG on any child; status is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_reaps_a_child_and_grandchild() {
        // sh starts a sleeping grandchild and sleeps itself.
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30 & sleep 30"]).spawn().expect("sh");
        let pid = child.id() as i32;
        let mut seen = Vec::new();
        for _ in 0..200 {
            seen = descendants();
            if seen.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(seen.contains(&pid), "{seen:?}");
        assert!(seen.len() >= 2, "grandchild not found: {seen:?}");
        become_subreaper();
        assert!(reap_descendants(Duration::from_secs(2)) >= 2);
        let _ = child.wait();
        assert!(descendants().is_empty(), "{:?}", descendants());
    }
}
