//! `ServeError`: why the server could not start or stopped abnormally.

/// Why `batchlab serve` failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The scenario's engine is not the simulator.
    #[error(
        "`batchlab serve` serves the simulator: the scenario needs `[engine] kind = \"sim\"` (its `[engine.sim]` costs or `profile`)"
    )]
    NotSimulated,
    /// The listening socket failed.
    #[error("the server's socket failed: {0}")]
    Io(#[from] std::io::Error),
    /// The engine thread could not start.
    #[error("could not start the engine thread: {0}")]
    EngineThread(std::io::Error),
}
