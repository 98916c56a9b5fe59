//! The async face of the batcher under tokio's paused clock: no test here waits in real time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use batchlab::batcher::{BatchConfig, Batcher, RequestError};
use batchlab::engine::{Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, Started};
use batchlab::time::MonotonicClock;

mod common;
use common::echo;

/// Answers at once and records what it was sent.
#[derive(Clone, Default)]
struct Echo {
    seen: Arc<Mutex<Vec<Vec<u64>>>>,
}

impl Engine for Echo {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("echo", "0").into())
    }
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        self.seen.lock().unwrap().push(batch.iter().map(|r| r.id).collect());
        Ok(echo(batch))
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

fn batcher(engine: Echo, batch_size: usize) -> Batcher {
    // An hour-long batch timeout: only full batches or shutdown dispatch, whatever the clock does.
    let config = BatchConfig::new(batch_size, Duration::from_secs(3600)).unwrap();
    Batcher::spawn(engine, config, Arc::new(MonotonicClock))
}

#[tokio::test(start_paused = true)]
async fn concurrent_async_submits_fill_one_batch() {
    let engine = Echo::default();
    let b = batcher(engine.clone(), 4);
    let futures: Vec<_> = (0..4).map(|_| b.submit_async(EngineRequest::tokens(vec![1], 2)).unwrap()).collect();
    let ids: Vec<_> = futures.iter().map(|f| f.id()).collect();
    for (f, id) in futures.into_iter().zip(&ids) {
        let c = f.await.expect("completed");
        assert_eq!(c.output.request_id, Some(*id));
        assert_eq!(c.batch_size, 4);
    }
    tokio::task::spawn_blocking(move || b.shutdown()).await.unwrap().unwrap();
    assert_eq!(*engine.seen.lock().unwrap(), vec![ids]);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_cancels_an_undispatched_request() {
    let engine = Echo::default();
    let b = batcher(engine.clone(), 2);
    let lonely = b.submit_async(EngineRequest::tokens(vec![1], 2)).unwrap();
    let lonely_id = lonely.id();
    // Virtual time: the timeout elapses at once, and the dropped future cancels the request.
    assert!(tokio::time::timeout(Duration::from_secs(60), lonely).await.is_err());
    let pair: Vec<_> = (0..2).map(|_| b.submit_async(EngineRequest::tokens(vec![1], 2)).unwrap()).collect();
    // Shut down before awaiting: the drain answers whatever is still queued, so a request the
    // drop failed to cancel shows up in the engine below instead of leaving a future pending.
    let b2 = b.clone();
    tokio::task::spawn_blocking(move || b2.shutdown()).await.unwrap().unwrap();
    for f in pair {
        f.await.expect("completed");
    }
    let seen = engine.seen.lock().unwrap().concat();
    assert!(!seen.contains(&lonely_id), "a cancelled request reached the engine: {seen:?}");
    assert_eq!(seen.len(), 2);
    assert_eq!(b.submit_async(EngineRequest::tokens(vec![1], 2)).err(), Some(RequestError::ShuttingDown));
}
