//! `batchlab serve` as a child process on an ephemeral loopback port, for the serve tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The model name `batchlab serve` serves by default.
pub const MODEL: &str = "batchlab-sim";

/// A running server, killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    _dir: Option<PathBuf>,
}

impl Server {
    /// Starts `batchlab serve --port 0 ARGS` (with `scenario` written to a file first, if given)
    /// and waits for its `listening on` line.
    pub fn start(scenario: Option<&str>, args: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_batchlab"));
        cmd.arg("serve");
        Server::spawn(cmd, scenario, args)
    }

    /// [`Server::start`] without a scenario, in a process whose file-descriptor limit (soft and
    /// hard) is `fds` from its start.
    pub fn start_with_fd_limit(fds: u64, args: &[&str]) -> Server {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("ulimit -n {fds} && exec \"$0\" serve \"$@\"")).arg(env!("CARGO_BIN_EXE_batchlab"));
        Server::spawn(cmd, None, args)
    }

    fn spawn(mut cmd: Command, scenario: Option<&str>, args: &[&str]) -> Server {
        let dir = scenario.map(|text| {
            let dir = std::env::temp_dir().join(format!("batchlab-serve-{}-{}", std::process::id(), unique()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("s.toml"), text).unwrap();
            cmd.arg(dir.join("s.toml"));
            dir
        });
        cmd.args(["--port", "0"]).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("batchlab runs");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("a `listening on` line within 30 s");
        let url = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}")).to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        Server { child, url, _dir: dir }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// What the server wrote to stderr so far (read without waiting for more: the server is
    /// killed first if it still runs, so only for the end of a test).
    pub fn stderr_so_far(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut text = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
        }
        text
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn sigterm(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }

    /// Waits (at most `within`) for the process to exit.
    pub fn wait(mut self, within: Duration) -> ExitStatus {
        let mut child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        rx.recv_timeout(within).expect("the server exits in time").unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self._dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}
