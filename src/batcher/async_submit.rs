//! The async face of the batcher, for tokio callers.
//!
//! The batcher's threads know nothing of async: a request's completer simply fulfils a tokio
//! oneshot, so awaiting an outcome never blocks a runtime thread. Dropping the future before the
//! outcome arrives cancels the request if it has not been dispatched yet, exactly like dropping a
//! [`Ticket`](super::Ticket).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::{Batcher, Outcome, RequestError};
use crate::engine::{EngineRequest, RequestId};

impl Batcher {
    /// Submits; the returned future resolves to the request's one outcome, and says the id the
    /// batcher gave the request.
    pub fn submit_async(&self, request: EngineRequest<()>) -> Result<PendingOutcome, RequestError> {
        let (tx, rx) = oneshot::channel();
        let id = self.submit_with(
            request,
            Box::new(move |_, outcome| {
                let _ = tx.send(outcome);
            }),
        )?;
        Ok(PendingOutcome { id, rx, batcher: Some(self.clone()) })
    }
}

/// A submitted request's outcome, as a future. See the module docs.
pub struct PendingOutcome {
    id: RequestId,
    rx: oneshot::Receiver<Outcome>,
    batcher: Option<Batcher>,
}

impl PendingOutcome {
    /// The id the batcher gave the request this outcome belongs to.
    pub fn id(&self) -> RequestId {
        self.id
    }
}

impl Future for PendingOutcome {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(r) => {
                self.batcher = None;
                // The completer is called exactly once; a closed channel would mean it was dropped
                // unanswered, which the batcher never does. Answer rather than hang regardless.
                Poll::Ready(r.unwrap_or_else(|_| Err(RequestError::EngineFailed("outcome lost".into()))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for PendingOutcome {
    fn drop(&mut self) {
        if let Some(b) = self.batcher.take() {
            b.cancel(self.id);
        }
    }
}
