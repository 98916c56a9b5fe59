//! The engine thread: it owns the [`ServeCore`] and the clock, and is the one place time passes.
//!
//! It sleeps on its command channel until the core's next step ends (`recv_timeout`, precise to
//! tens of microseconds, unlike tokio's millisecond timer wheel), hands the core whatever came in
//! meanwhile, and sends each token to its connection the moment its step ends. A connection whose
//! receiver is gone (the client disconnected) is cancelled at once. The tower shape: a worker
//! behind a cloneable [`EngineHandle`].

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};

use tokio::sync::{mpsc, oneshot};

use super::core::{Event, NewSequence, RequestId, ServeCore, SubmitError};
use crate::engine::FinishReason;
use crate::time::{MonotonicClock, Timestamp};

/// What a connection receives for one choice.
#[derive(Clone, Debug, PartialEq)]
pub enum TokenMsg {
    /// Choice `choice` produced a token; `finish` is set on its last.
    Token {
        /// The choice (the prompt's position in the request).
        choice: u32,
        /// Why it finished, on the last token.
        finish: Option<FinishReason>,
    },
    /// The server is shutting down and gave up on the request.
    Failed(String),
}

/// What one request queues: generations, or an embeddings request's inputs (prefill only).
enum Sequences {
    Generate(Vec<NewSequence>),
    Pool(Vec<Vec<u32>>),
}

enum Command {
    Submit {
        arrived: Timestamp,
        sequences: Sequences,
        tokens: mpsc::UnboundedSender<TokenMsg>,
        reply: oneshot::Sender<Result<Vec<RequestId>, SubmitError>>,
    },
    Cancel(Vec<RequestId>),
    FailAll(String),
}

/// A cloneable handle on the engine thread; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub struct EngineHandle {
    commands: Sender<Command>,
}

impl EngineHandle {
    /// Starts the engine thread on `core`.
    pub fn spawn(core: ServeCore) -> std::io::Result<EngineHandle> {
        let (tx, rx) = channel();
        std::thread::Builder::new().name("batchlab-serve-engine".into()).spawn(move || run(core, rx))?;
        Ok(EngineHandle { commands: tx })
    }

    /// Queues one request's sequences, which arrived at `arrived` (on [`MonotonicClock`]); their
    /// tokens arrive on the returned receiver.
    pub async fn submit(
        &self,
        arrived: Timestamp,
        sequences: Vec<NewSequence>,
    ) -> Result<(Vec<RequestId>, mpsc::UnboundedReceiver<TokenMsg>), SubmitError> {
        self.send(arrived, Sequences::Generate(sequences)).await
    }

    /// Queues one embeddings request's inputs ([`ServeCore::submit_pooling`]); each input's one
    /// message is the end of its prefill.
    pub async fn submit_pooling(
        &self,
        arrived: Timestamp,
        inputs: Vec<Vec<u32>>,
    ) -> Result<(Vec<RequestId>, mpsc::UnboundedReceiver<TokenMsg>), SubmitError> {
        self.send(arrived, Sequences::Pool(inputs)).await
    }

    async fn send(
        &self,
        arrived: Timestamp,
        sequences: Sequences,
    ) -> Result<(Vec<RequestId>, mpsc::UnboundedReceiver<TokenMsg>), SubmitError> {
        let (tokens, rx) = mpsc::unbounded_channel();
        let (reply, answer) = oneshot::channel();
        let gone = || SubmitError::Overloaded { waiting: 0, max_waiting: 0 };
        self.commands.send(Command::Submit { arrived, sequences, tokens, reply }).map_err(|_| gone())?;
        let ids = answer.await.map_err(|_| gone())??;
        Ok((ids, rx))
    }

    /// Drops requests (a client gone); finished ones are ignored.
    pub fn cancel(&self, ids: Vec<RequestId>) {
        let _ = self.commands.send(Command::Cancel(ids));
    }

    /// Fails every request in flight with `reason` (shutdown after the grace period).
    pub fn fail_all(&self, reason: &str) {
        let _ = self.commands.send(Command::FailAll(reason.into()));
    }
}

struct Route {
    tokens: mpsc::UnboundedSender<TokenMsg>,
    choice: u32,
    /// Every id of the same HTTP request, to cancel them together.
    siblings: std::sync::Arc<[RequestId]>,
}

fn run(mut core: ServeCore, commands: Receiver<Command>) {
    let mut routes: HashMap<RequestId, Route> = HashMap::new();
    loop {
        let first = match core.poll_timeout() {
            None => match commands.recv() {
                Ok(c) => Some(c),
                Err(_) => return,
            },
            Some(at) => match at.checked_since(MonotonicClock::read()) {
                Some(wait) if !wait.is_zero() => match commands.recv_timeout(wait) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                },
                _ => None,
            },
        };
        let mut next = first;
        loop {
            if let Some(command) = next.take() {
                handle(&mut core, &mut routes, command);
            }
            // A step starts as soon as work is there, before the next command is looked at.
            core.handle_timeout(MonotonicClock::read());
            route_events(&mut core, &mut routes);
            match commands.try_recv() {
                Ok(c) => next = Some(c),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
    }
}

/// Sends every token the core has to its connection; a connection that is gone is cancelled.
fn route_events(core: &mut ServeCore, routes: &mut HashMap<RequestId, Route>) {
    while let Some(event) = core.poll_event() {
        let Event::Token { id, finish, .. } = event;
        let Some(route) = routes.get(&id) else { continue };
        let last = finish.is_some();
        if route.tokens.send(TokenMsg::Token { choice: route.choice, finish }).is_err() {
            // The connection is gone: free all of its sequences now.
            let siblings = route.siblings.clone();
            for s in siblings.iter() {
                core.cancel(MonotonicClock::read(), *s);
                routes.remove(s);
            }
        } else if last {
            routes.remove(&id);
        }
    }
}

fn handle(core: &mut ServeCore, routes: &mut HashMap<RequestId, Route>, command: Command) {
    let now = MonotonicClock::read();
    match command {
        Command::Submit { arrived, sequences, tokens, reply } => {
            // The simulated engine's time starts when the request arrived, not when this thread
            // got to it: the server's own parsing is not the modelled engine's.
            let result = match sequences {
                Sequences::Generate(sequences) => core.submit(arrived.min(now), sequences),
                Sequences::Pool(inputs) => core.submit_pooling(arrived.min(now), inputs),
            };
            if let Ok(ids) = &result {
                let siblings: std::sync::Arc<[RequestId]> = ids.clone().into();
                for (choice, id) in ids.iter().enumerate() {
                    routes.insert(
                        *id,
                        Route { tokens: tokens.clone(), choice: choice as u32, siblings: siblings.clone() },
                    );
                }
            }
            if let Err(Ok(ids)) = reply.send(result) {
                // The handler is gone before it heard back.
                for id in ids {
                    core.cancel(now, id);
                    routes.remove(&id);
                }
            }
        }
        Command::Cancel(ids) => {
            for id in ids {
                core.cancel(now, id);
                routes.remove(&id);
            }
        }
        Command::FailAll(reason) => {
            for (id, route) in routes.drain() {
                let _ = route.tokens.send(TokenMsg::Failed(reason.clone()));
                core.cancel(now, id);
            }
        }
    }
}
