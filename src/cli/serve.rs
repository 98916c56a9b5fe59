//! `batchlab serve`: parses its arguments, binds the socket, prints where it listens, and turns
//! how the server ended into an exit code. The server itself is `batchlab::serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use batchlab::scenario::Overrides;
use batchlab::serve::{ServeConfig, ServeOutcome, TimingLog, TimingSummary, serve};

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
    /// Requests that may wait for admission; past it, new requests get 503.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    max_waiting: usize,
    /// Seconds in-flight streams may go on after SIGTERM or Ctrl-C before they are failed.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    grace: f64,
    /// `max_tokens` of a request that sets none.
    #[arg(long, value_name = "N", default_value_t = 16)]
    default_max_tokens: u32,
    /// Write each streamed choice's token send times to FILE (JSONL, ns on CLOCK_MONOTONIC; see
    /// docs/serve.md), to check a client's timings against the server's.
    #[arg(long, value_name = "FILE")]
    timing_log: Option<PathBuf>,
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
    config.model = args.model.clone();
    config.max_waiting = args.max_waiting;
    config.grace = Duration::from_secs_f64(args.grace);
    config.default_max_tokens = args.default_max_tokens.max(1);
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
