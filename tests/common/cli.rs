//! Running the real `batchlab` binary from an integration test: the CLI tests share these.
//! Included with `#[path = "common/cli.rs"] mod cli_common;` by the tests that need them.

use std::path::PathBuf;
use std::process::{Command, Output};

/// `batchlab ARGS` in the crate's root, with batchlab's own log and Rust's backtraces off, so
/// stderr holds only what a user sees.
pub fn batchlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("BATCHLAB_LOG")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("running batchlab")
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh, empty directory for one test, unique to this test binary and process.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-{}-{}-{name}", env!("CARGO_CRATE_NAME"), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
