//! Ids: the [`IdMap`] keyed by [`RequestId`] and its one-multiplication hasher. [`BatchId`] lives
//! below the core, in `error`, which names the batch a request failed in.

use crate::engine::RequestId;

pub use super::super::error::BatchId;

/// A map keyed by [`RequestId`], for the per-request tables of the batcher and the runner.
pub type IdMap<V> = std::collections::HashMap<RequestId, V, BuildIdHasher>;

/// Hashes a [`RequestId`] with one multiplication. Ids are the core's counter, not an attacker's,
/// so SipHash's flooding resistance buys nothing and costs a measurable share of a request.
#[derive(Copy, Clone, Debug, Default)]
pub struct BuildIdHasher;

impl std::hash::BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// The [`std::hash::Hasher`] that [`BuildIdHasher`] builds: one multiplication per `u64` key.
#[derive(Copy, Clone, Debug, Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are expected; anything else still hashes, byte by byte.
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }
    fn write_u64(&mut self, n: u64) {
        // An odd constant (2^64 / golden ratio): a bijection that spreads consecutive ids over
        // the high bits as well as the low ones.
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
