//! `batchlab serve`: parses its arguments, binds the socket, prints where it listens, and turns
//! how the server ended into an exit code. The server itself is `batchlab::serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use batchlab::scenario::Overrides;
use batchlab::serve::{Limits, ServeConfig, ServeOutcome, TimingLog, TimingSummary, serve};

use super::{EXIT_BAD_INPUT, EXIT_ERROR, error_text};

#[derive(clap::Args, Debug)]
pub(super) struct ServeArgs {
    /// A scenario whose `[engine.sim]` (costs or `profile`) and `[faults]` make the engine
    /// [default: the shipped example profile, scenarios/profiles/example.toml].
    scenario: Option<PathBuf>,
    /// Override any scenario key, as `batchlab run --set` does. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "scenario")]
    sets: Vec<String>,
    /// Override the scenario's master seed.
    #[arg(long, requires = "scenario")]
    seed: Option<u64>,
    /// The address to listen on (loopback unless you mean otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port; 0 picks a free one (the `listening on` line names it).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The model name served (`/v1/models`; requests must name it).
    #[arg(long, default_value = batchlab::serve::DEFAULT_MODEL)]
    model: String,
    /// Prompts that may wait for admission; past it, new requests get 503 (a request of more
    /// prompts than this can never be admitted: 400).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    max_waiting: usize,
    /// Seconds in-flight streams may go on after SIGTERM or Ctrl-C before they are failed.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    grace: f64,
    /// `max_tokens` of a request that sets none.
    #[arg(long, value_name = "N", default_value_t = 16)]
    default_max_tokens: u32,
    /// The largest request body in bytes; a larger one gets 413 [default: 2 MiB].
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Seconds a connection may take to send a request's head, from when the server is ready for
    /// it: a new connection, and a kept-alive one between requests (the idle timeout). Past it,
    /// the connection is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = Limits::default().header_read_timeout.as_secs_f64())]
    header_read_timeout: f64,
    /// Seconds a request's body may take after its head; past it, 408 and the connection closes.
    #[arg(long, value_name = "SECONDS", default_value_t = Limits::default().body_read_timeout.as_secs_f64())]
    body_read_timeout: f64,
    /// Connections served at once; one more is answered 503 and closed. Lowered to what the
    /// file-descriptor limit allows (the soft limit is raised to the hard one first).
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// Write each streamed choice's token send times to FILE (JSONL, ns on CLOCK_MONOTONIC; see
    /// docs/serve.md), to check a client's timings against the server's.
    #[arg(long, value_name = "FILE")]
    timing_log: Option<PathBuf>,
    /// Count prompts, prefix-cache them and answer `/tokenize` in this model's tokens: a model
    /// directory or a tokenizer.json [default: the scenario's `workload.tokenizer`, else four bytes
    /// a token].
    #[arg(long, value_name = "DIR")]
    tokenizer: Option<PathBuf>,
}

pub(super) fn main(args: ServeArgs) -> ExitCode {
    let mut config = match &args.scenario {
        None => ServeConfig::example(),
        Some(path) => {
            let overrides = Overrides { sets: args.sets.clone(), seed: args.seed };
            let plan = match super::load_scenario(path, &overrides) {
                Ok(plan) => plan,
                Err(code) => return code,
            };
            match ServeConfig::from_plan(&plan) {
                Ok(config) => config,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            }
        }
    };
    if !(args.grace.is_finite() && args.grace >= 0.0) {
        eprintln!("error: --grace must be a number of seconds >= 0");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let timeout = |flag: &str, secs: f64| match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Some(d),
        _ => {
            eprintln!("error: {flag} must be a number of seconds > 0, found {secs}");
            None
        }
    };
    let (Some(header_read_timeout), Some(body_read_timeout)) = (
        timeout("--header-read-timeout", args.header_read_timeout),
        timeout("--body-read-timeout", args.body_read_timeout),
    ) else {
        return ExitCode::from(EXIT_BAD_INPUT);
    };
    if args.max_body_bytes == 0 || args.max_connections == 0 {
        eprintln!("error: --max-body-bytes and --max-connections must be at least 1");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    config.limits = Limits {
        max_body_bytes: args.max_body_bytes,
        header_read_timeout,
        body_read_timeout,
        max_connections: fit_to_fd_limit(args.max_connections),
    };
    config.model = args.model.clone();
    config.max_waiting = args.max_waiting;
    config.grace = Duration::from_secs_f64(args.grace);
    config.default_max_tokens = args.default_max_tokens.max(1);
    if let Some(path) = &args.tokenizer {
        match batchlab::engine::tokenizer::ModelTokenizer::load(path) {
            Ok(t) => config.counter = batchlab::engine::tokenizer::TokenCounter::Tokenizer(t),
            Err(e) => {
                eprintln!("error: --tokenizer: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    let timing = match &args.timing_log {
        None => None,
        Some(path) => match TimingLog::create(path) {
            Ok(log) => {
                config.timing = Some(log.sender());
                Some(log)
            }
            Err(e) => {
                eprintln!("error: cannot write the timing log {}: {e}", path.display());
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
    };
    let outcome = run(config, &args.host, args.port);
    // The log is written out before the process ends, however the server ended.
    let timing_ok = timing.map(TimingLog::finish).is_none_or(|summary| report_timing(&summary));
    match outcome {
        Ok(ServeOutcome::Stopped { failed_streams }) => {
            if failed_streams {
                eprintln!("stopped: streams still open after the grace period were failed");
            }
            if timing_ok { ExitCode::SUCCESS } else { ExitCode::from(EXIT_ERROR) }
        }
        Ok(ServeOutcome::FaultExit { request }) => {
            eprintln!("exiting: injected fault `exit_server` on request {request}");
            // Abruptly: connections are dropped, nothing is waited for.
            std::process::exit(i32::from(EXIT_ERROR));
        }
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// File descriptors kept for everything but connections: the listener, the timing log, the
/// runtime's own, stdio.
const FDS_KEPT: u64 = 64;

/// `max_connections`, lowered to what this process's file-descriptor limit allows after raising
/// its soft limit to the hard one (as Go's runtime does): past the cap, a client gets a 503; past
/// the fd limit, `accept` would fail and it would wait unanswered.
fn fit_to_fd_limit(max_connections: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    let Some(soft) = limit.current else { return max_connections };
    let fits = usize::try_from(soft.saturating_sub(FDS_KEPT).max(1)).unwrap_or(usize::MAX);
    if fits < max_connections {
        eprintln!(
            "warning: --max-connections {max_connections} lowered to {fits}: the file-descriptor limit is {soft} \
             (raise it with `ulimit -n`)"
        );
        return fits;
    }
    max_connections
}

/// One line on how the timing log ended; false when it is incomplete because a write failed.
fn report_timing(summary: &TimingSummary) -> bool {
    let path = summary.path.display();
    if let Some(e) = &summary.error {
        eprintln!("error: the timing log {path} stopped after {} records: {e}", summary.written);
        return false;
    }
    if summary.dropped > 0 {
        eprintln!(
            "timing log {path}: {} choices written, {} dropped (the writer fell behind; they are not in the file)",
            summary.written, summary.dropped
        );
    } else {
        eprintln!("timing log {path}: {} choices written", summary.written);
    }
    true
}

fn run(config: ServeConfig, host: &str, port: u16) -> anyhow::Result<ServeOutcome> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    let outcome = runtime.block_on(async {
        let listener =
            tokio::net::TcpListener::bind((host, port)).await.with_context(|| format!("listening on {host}:{port}"))?;
        let addr: SocketAddr = listener.local_addr()?;
        // The one line scripts wait for (`--port 0` names its port here).
        println!("listening on http://{addr}");
        anyhow::Ok(serve(config, listener, stop_signal()).await?)
    });
    // Streams failed after the grace period may leave connections behind: don't wait for them.
    runtime.shutdown_background();
    outcome
}

/// SIGTERM or Ctrl-C.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("stopping: no new connections; open streams have the grace period to finish");
}
