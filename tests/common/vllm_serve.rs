//! A real `vllm serve` of the tiny model, for the tests that speak HTTP to vLLM: vLLM's OpenAI
//! server (`python -m vllm.entrypoints.openai.api_server`, from the venv of `just setup-vllm`) on
//! 127.0.0.1 and an ephemeral port, in a process group of its own, so that dropping the handle
//! ends the API server, its EngineCore and its workers together: no vLLM process outlives a test.
//! Included with `#[path]`; the caller decides first whether Python tests may run
//! (`common/python_env.rs`'s `ready(true)`).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use batchlab::engine::python::{batchlab_home, default_venv};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The model name the server answers to (`--served-model-name`), as `scenarios/vllm-serve.toml`
/// names it.
pub const MODEL: &str = "tiny-llama";

/// How long the server may take to answer `/v1/models` (~1 min on an idle 2-core machine:
/// importing vLLM and torch in the API server, the EngineCore and its worker, then the engine's
/// start); `BATCHLAB_VLLM_START_SECS` sets another bound, for a machine busy with other work.
pub const START_WITHIN: Duration = Duration::from_secs(180);

fn start_within() -> Duration {
    std::env::var("BATCHLAB_VLLM_START_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(START_WITHIN, Duration::from_secs)
}

/// How long the group has to exit after SIGTERM before it gets SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(20);

/// A running `vllm serve`; stopped, with every process of its group, when dropped.
pub struct VllmServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its output (stdout and stderr), for a failure's message.
    pub log: PathBuf,
}

/// A port nothing listens on now: bind port 0 on loopback, read the port, close.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding 127.0.0.1:0");
    listener.local_addr().expect("the bound address").port()
}

impl VllmServer {
    /// Starts the server with `args` after the harness's own (e.g. `["--max-num-seqs", "64"]`),
    /// its output in `dir/vllm.log`, and waits (at most [`START_WITHIN`] (or `BATCHLAB_VLLM_START_SECS`)) until `/v1/models`
    /// lists [`MODEL`]. Panics with the log's tail if it exits or does not answer in time.
    pub fn start(dir: &Path, args: &[&str]) -> VllmServer {
        VllmServer::start_model(dir, &batchlab_home().join("tiny-llama"), MODEL, args)
    }

    /// [`VllmServer::start`] of another model (`scripts/build_tiny_vlm.py`'s), served as `name`.
    pub fn start_model(dir: &Path, model: &Path, name: &str, args: &[&str]) -> VllmServer {
        std::fs::create_dir_all(dir).expect("the server's directory");
        let log = dir.join("vllm.log");
        let out = std::fs::File::create(&log).expect("the server's log");
        let port = free_port();
        let mut cmd = Command::new(default_venv().join("bin/python"));
        cmd.args(["-m", "vllm.entrypoints.openai.api_server", "--model"])
            .arg(model)
            .args(["--served-model-name", name, "--host", "127.0.0.1", "--port", &port.to_string()])
            // float32 as scenarios/vllm-cpu.toml; eager: no compilation at start (the tests
            // measure the HTTP path, not the model's speed).
            .args(["--dtype", "float32", "--max-model-len", "512", "--enforce-eager"])
            .args(args)
            .env("OMP_NUM_THREADS", "1")
            .env("VLLM_CPU_KVCACHE_SPACE", "1")
            .env("VLLM_NO_USAGE_STATS", "1")
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("the log's handle"))
            .stderr(out);
        // A group of its own: the EngineCore and its workers are in it, and one signal reaches all.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().expect("starting the venv's python");
        let mut server = VllmServer { child, url: format!("http://127.0.0.1:{port}"), log };
        server.wait_ready(port, name);
        server
    }

    fn wait_ready(&mut self, port: u16, name: &str) {
        let started = Instant::now();
        let within = start_within();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            if let Some(status) = self.child.try_wait().expect("polling the server") {
                panic!("vllm serve exited ({status}) before it answered; its log:\n{}", self.tail(40));
            }
            if let Some(body) = get(addr, "/v1/models").filter(|(status, _)| *status == 200).map(|(_, body)| body) {
                assert!(body.contains(&format!("\"id\":\"{name}\"")), "/v1/models does not list {name}: {body}");
                eprintln!("vllm serve ready at {} after {:.1?}", self.url, started.elapsed());
                return;
            }
            assert!(
                started.elapsed() < within,
                "vllm serve did not answer /v1/models within {within:?} (BATCHLAB_VLLM_START_SECS sets the bound); its log:\n{}",
                self.tail(40)
            );
            // A poll interval: the wait's bound is the assertion above.
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `url` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// The process group's id (the API server's pid).
    pub fn pgid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// The live (not zombie) processes of its group: the API server, the EngineCore, its workers.
    pub fn processes(&self) -> Vec<(i32, String)> {
        group_processes(self.pgid())
    }

    /// `GET path` on the server: status and body, or `None` if it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let port = self.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port in the url");
        get(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), path)
    }

    /// The last `n` lines of its output.
    pub fn tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGKILL to the whole group at once, as a machine that loses the server would; returns
    /// once every process of it is gone (bounded: panics after 30 s).
    pub fn kill_now(&mut self) {
        let _ = killpg(self.pgid(), Signal::SIGKILL);
        self.reap(Duration::from_secs(30)).unwrap_or_else(|left| panic!("processes left after SIGKILL: {left:?}"));
    }

    /// SIGTERM to the group (vLLM shuts its engine down), SIGKILL to what is left after
    /// [`TERM_GRACE`]; returns the processes still alive after that, which should be none.
    pub fn stop(&mut self) -> Vec<(i32, String)> {
        let _ = killpg(self.pgid(), Signal::SIGTERM);
        if self.reap(TERM_GRACE).is_ok() {
            return Vec::new();
        }
        let _ = killpg(self.pgid(), Signal::SIGKILL);
        self.reap(Duration::from_secs(30)).err().unwrap_or_default()
    }

    /// Waits until the group has no live process (reaping our own child), at most `within`.
    fn reap(&mut self, within: Duration) -> Result<(), Vec<(i32, String)>> {
        let deadline = Instant::now() + within;
        loop {
            let _ = self.child.try_wait();
            let left = self.processes();
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(left);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for VllmServer {
    fn drop(&mut self) {
        let left = self.stop();
        if !left.is_empty() {
            // Not a panic: this may run while a test is already unwinding.
            eprintln!("error: vllm serve's processes outlived SIGKILL: {left:?}");
        }
    }
}

/// The live processes whose process group is `pgid`, from /proc (zombies are dead: skipped).
pub fn group_processes(pgid: Pid) -> Vec<(i32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid pgrp ...`: comm may hold spaces and parentheses, so split after
        // its last ')'.
        let Some(close) = stat.rfind(')') else { continue };
        let comm = stat[stat.find('(').map_or(0, |i| i + 1)..close].to_string();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let (Some(state), Some(pgrp)) = (fields.first(), fields.get(2)) else { continue };
        if *state != "Z" && pgrp.parse::<i32>().ok() == Some(pgid.as_raw()) {
            found.push((pid, comm));
        }
    }
    found
}

/// A plain HTTP/1.0 GET on loopback, every step with a timeout: status and body, or `None`.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    stream.set_write_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    Some((status, body))
}
