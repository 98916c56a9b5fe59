//! The `batchlab` binary; the command line lives in `cli.rs`.
//!
//! Under `--cfg loom` (model checking the batcher) tokio has no signal support, and the CLI is
//! not needed: the binary is then an empty stub, so `just test-loom` builds.

#[cfg(not(loom))]
mod cli;

/// mimalloc: a simulated run allocates and frees a prompt, a schedule and outputs per request.
#[cfg(not(loom))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(loom)]
fn main() {}
