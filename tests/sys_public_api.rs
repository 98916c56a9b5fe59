//! `batchlab::sys` used from outside, as the engine and the run loop will use it: only public items.

use std::io::Write;
use std::process::Command;
use std::sync::mpsc::channel;
use std::time::Duration;

use batchlab::sys::affinity::parse_cpu_list;
use batchlab::sys::{EngineLog, ExitCause, ProcessWatch, current_affinity, format_cpu_list, terminal};

#[test]
fn a_watch_reports_an_engine_process_killed_by_a_signal() {
    let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = child.id();
    let (tx, rx) = channel();
    let watch = ProcessWatch::start(&[pid], move |exit| {
        let _ = tx.send(exit);
    })
    .expect("a kernel with pidfds");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM).expect("kill");
    let exit = loop {
        // A backstop far above the pidfd's latency: only a missed exit reaches it.
        let exit = rx.recv_timeout(Duration::from_secs(60)).expect("the exit is reported");
        if exit.pid == pid {
            break exit;
        }
    };
    assert_eq!(exit.to_string(), format!("sleep (pid {pid}) killed by SIGTERM"));
    assert_eq!(exit.cause, ExitCause::Killed { signal: 15, core_dumped: false });
    watch.disarm();
    // The watch read the status without collecting it.
    assert!(child.wait().expect("still ours to reap").code().is_none());
}

#[test]
fn the_mask_formats_as_a_cpu_list() {
    let mask = current_affinity();
    assert!(!mask.is_empty());
    assert_eq!(parse_cpu_list(&format_cpu_list(&mask)), Ok(mask));
}

#[test]
fn the_tail_of_a_log_and_the_terminal() {
    let path = std::env::temp_dir().join(format!("batchlab-sys-public-{}.log", std::process::id()));
    std::fs::write(&path, "INFO start\n\x1b[33mWARNING\x1b[0m numa\nERROR boom\n").expect("write");
    let tail = EngineLog::tail(&path, 2).expect("tail");
    std::fs::remove_file(&path).expect("remove");
    assert_eq!(tail, ["WARNING numa", "ERROR boom"]);
    // Without a capture the terminal is fd 2: a writer the display and the log lines can share.
    let mut out = terminal();
    writeln!(out.clone(), "terminal works").expect("write");
    out.flush().expect("flush");
}
