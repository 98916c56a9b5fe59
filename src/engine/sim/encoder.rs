//! The simulated encoder (multimodal) cache: which pictures the engine has encoded.
//!
//! Its rule is the prefix cache's: a request's image is a hit when the same picture (the same
//! [`Image::hash`](crate::engine::image::Image::hash)) was scheduled before, by an earlier request or an earlier image of
//! the same one, and not evicted since; it persists across generate calls and is emptied by a
//! start. It holds [`ENCODER_CACHE_IMAGES`] pictures and evicts the least recently used, so a
//! pool that fits is only ever missed once per picture.
//!
//! A miss is what the vision encoder computes: its image's tokens, which
//! [`CostModel::encoder_per_image_token`](super::CostModel::encoder_per_image_token) prices in the
//! step that first schedules the request ([`super::StepLoad::encoder_tokens`]); a hit costs nothing.

use std::collections::{BTreeMap, HashMap};

/// Pictures the cache holds (vLLM's multimodal processor cache holds 4 GiB of them).
pub const ENCODER_CACHE_IMAGES: usize = 4096;

/// One image as the encoder sees it: its picture (the cache's key) and the tokens it encodes to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EncoderInput {
    /// The picture's identity ([`Image::hash`](crate::engine::image::Image::hash)).
    pub hash: u64,
    /// Its prompt tokens ([`Image::tokens`](crate::engine::image::Image::tokens)).
    pub tokens: u32,
}

impl EncoderInput {
    /// The encoder's view of `image`.
    pub fn of(image: &crate::engine::image::Image) -> Self {
        EncoderInput { hash: image.hash, tokens: image.tokens }
    }
}

/// What one request's images cost the encoder ([`EncoderCache::encode`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct EncoderWork {
    /// Images the cache held.
    pub hits: u32,
    /// Tokens of the images it did not hold: what the encoder computes.
    pub tokens: u32,
}

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub struct EncoderCache {
    /// Picture → its last use.
    last_use: HashMap<u64, u64>,
    /// Last use → picture, oldest first.
    by_age: BTreeMap<u64, u64>,
    tick: u64,
}

impl EncoderCache {
    /// Looks `hash` up and records its use: `true` for a hit.
    pub fn touch(&mut self, hash: u64) -> bool {
        self.tick += 1;
        let hit = match self.last_use.insert(hash, self.tick) {
            Some(before) => {
                self.by_age.remove(&before);
                true
            }
            None => false,
        };
        self.by_age.insert(self.tick, hash);
        if self.last_use.len() > ENCODER_CACHE_IMAGES {
            if let Some((_, oldest)) = self.by_age.pop_first() {
                self.last_use.remove(&oldest);
            }
        }
        hit
    }

    /// The hits of `hashes`, looked up in order.
    pub fn hits(&mut self, hashes: impl IntoIterator<Item = u64>) -> u32 {
        hashes.into_iter().map(|h| u32::from(self.touch(h))).sum()
    }

    /// Looks up one request's images in order: its hits, and the tokens of its misses.
    pub fn encode(&mut self, images: impl IntoIterator<Item = EncoderInput>) -> EncoderWork {
        let mut work = EncoderWork::default();
        for image in images {
            if self.touch(image.hash) {
                work.hits += 1;
            } else {
                work.tokens = work.tokens.saturating_add(image.tokens);
            }
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_picture_hits_after_its_first_use_until_evicted() {
        let mut cache = EncoderCache::default();
        assert_eq!(cache.hits([1, 2, 1, 1]), 2, "the second and third 1");
        assert_eq!(cache.hits([2]), 1);
        // Fill past the capacity with new pictures: 1 and 2, least recently used, go first.
        let fresh = (0..ENCODER_CACHE_IMAGES as u64).map(|i| 1000 + i);
        assert_eq!(cache.hits(fresh), 0);
        assert_eq!(cache.hits([1, 2]), 0);
        assert_eq!(cache.hits([1000 + ENCODER_CACHE_IMAGES as u64 - 1]), 1, "the newest stays");
    }

    #[test]
    fn only_the_misses_tokens_are_encoded() {
        let mut cache = EncoderCache::default();
        let image = |hash, tokens| EncoderInput { hash, tokens };
        assert_eq!(cache.encode([image(1, 576), image(2, 10)]), EncoderWork { hits: 0, tokens: 586 });
        assert_eq!(cache.encode([image(2, 10), image(3, 7), image(3, 7)]), EncoderWork { hits: 2, tokens: 7 });
        assert_eq!(cache.encode([]), EncoderWork::default());
    }
}
