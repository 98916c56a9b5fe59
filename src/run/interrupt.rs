//! [`Interrupt`]: the "stop admitting, drain, report" signal a caller can give a running run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

type Waker = Box<dyn Fn() + Send>;

#[derive(Default)]
struct Shared {
    fired: AtomicBool,
    next_waker: AtomicU64,
    wakers: Mutex<Vec<(u64, Waker)>>,
}

/// A one-way flag: once [`fire`](Self::fire)d, a run stops admitting requests, cancels the queued
/// ones, lets the running ones finish and reports what it measured (marked incomplete). Clones
/// share the flag. [`Interrupt::never`] (the default) cannot fire and holds nothing.
#[derive(Clone, Default)]
pub struct Interrupt {
    shared: Option<Arc<Shared>>,
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.shared {
            None => f.write_str("Interrupt::never()"),
            Some(_) => f.debug_struct("Interrupt").field("fired", &self.is_fired()).finish(),
        }
    }
}

impl Interrupt {
    /// An interrupt that can fire: keep a clone and call [`fire`](Self::fire) on it.
    pub fn new() -> Self {
        Interrupt { shared: Some(Arc::default()) }
    }

    /// An interrupt that never fires.
    pub fn never() -> Self {
        Interrupt { shared: None }
    }

    /// Fires the interrupt (once; later calls do nothing) and wakes every run waiting on it.
    /// Has no effect on [`Interrupt::never`].
    pub fn fire(&self) {
        let Some(shared) = &self.shared else { return };
        if !shared.fired.swap(true, Ordering::SeqCst) {
            let wakers = shared.wakers.lock().unwrap_or_else(|e| e.into_inner());
            for (_, wake) in wakers.iter() {
                wake();
            }
        }
    }

    /// Whether it fired.
    pub fn is_fired(&self) -> bool {
        self.shared.as_ref().is_some_and(|s| s.fired.load(Ordering::SeqCst))
    }

    /// Whether `other` is this interrupt (a clone of it), or both never fire.
    pub(crate) fn is_same(&self, other: &Interrupt) -> bool {
        match (&self.shared, &other.shared) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Calls `wake` when the interrupt fires (at once if it already did), until the returned
    /// guard is dropped.
    pub(crate) fn on_fire(&self, wake: impl Fn() + Send + 'static) -> WakerGuard {
        let Some(shared) = &self.shared else { return WakerGuard { registration: None } };
        let id = shared.next_waker.fetch_add(1, Ordering::Relaxed);
        shared.wakers.lock().unwrap_or_else(|e| e.into_inner()).push((id, Box::new(wake)));
        if self.is_fired() {
            let wakers = shared.wakers.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, wake)) = wakers.iter().find(|(i, _)| *i == id) {
                wake();
            }
        }
        WakerGuard { registration: Some((shared.clone(), id)) }
    }
}

/// Unregisters a waker on drop.
pub(crate) struct WakerGuard {
    registration: Option<(Arc<Shared>, u64)>,
}

impl Drop for WakerGuard {
    fn drop(&mut self) {
        if let Some((shared, id)) = self.registration.take() {
            shared.wakers.lock().unwrap_or_else(|e| e.into_inner()).retain(|(i, _)| *i != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_once_wakes_registered_and_never_never_fires() {
        let never = Interrupt::never();
        never.fire();
        assert!(!never.is_fired());

        let interrupt = Interrupt::new();
        let woken = Arc::new(AtomicU64::new(0));
        let w = woken.clone();
        let guard = interrupt.on_fire(move || {
            w.fetch_add(1, Ordering::SeqCst);
        });
        let clone = interrupt.clone();
        clone.fire();
        clone.fire();
        assert!(interrupt.is_fired());
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        drop(guard);
        assert!(interrupt.shared.as_ref().unwrap().wakers.lock().unwrap().is_empty());
        // Registering after the fact wakes at once.
        let w = woken.clone();
        let _late = interrupt.on_fire(move || {
            w.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(woken.load(Ordering::SeqCst), 2);
    }
}
