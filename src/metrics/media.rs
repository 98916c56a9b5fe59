//! What a benchmark sent as images, and how often the engine's encoder cache already had them.
//!
//! Counted over the measured requests that completed. The designed reuse is the share of images
//! drawn from the workload's media pool; the measured hit rate is the engine's own count (the
//! simulator's encoder cache, per request), present only when the engine reports one for every
//! request with images. A cache misses each pool picture once before it can hit, so the measured
//! rate trails the designed one by at most the pool's size over the images sent.

use serde::{Deserialize, Serialize};

use crate::engine::image::ImageSummary;

/// A benchmark's images; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MediaResult {
    /// Completed measured requests that had images.
    pub requests: u64,
    /// Images they carried.
    pub images: u64,
    /// Their pixels.
    pub pixels: u64,
    /// Their encoded bytes (before base64).
    pub bytes: u64,
    /// Their prompt tokens, by the workload's rule.
    pub image_tokens: u64,
    /// `bytes` over the benchmark's duration.
    pub bytes_per_s: Option<f64>,
    /// The share of images drawn from the media pool: the designed encoder-cache reuse.
    pub designed_reuse: f64,
    /// The share of images the engine's encoder cache held, when it says for every request.
    pub cache_hit_rate: Option<f64>,
}

/// Sums [`MediaResult`] request by request.
#[derive(Clone, Debug, Default)]
pub struct MediaTally {
    sum: ImageSummary,
    requests: u64,
    hits: u64,
    /// Requests whose engine gave no hit count.
    unknown_hits: u64,
}

impl MediaTally {
    /// A completed request's images and its encoder-cache hits, if the engine said.
    pub fn record(&mut self, images: &ImageSummary, cache_hits: Option<u32>) {
        self.requests += 1;
        self.sum.images += images.images;
        self.sum.pixels += images.pixels;
        self.sum.bytes += images.bytes;
        self.sum.pooled += images.pooled;
        self.sum.tokens += images.tokens;
        match cache_hits {
            Some(h) => self.hits += u64::from(h),
            None => self.unknown_hits += 1,
        }
    }

    /// The result over `duration_s`; `None` when no request had images.
    pub fn finish(&self, duration_s: f64) -> Option<MediaResult> {
        if self.requests == 0 {
            return None;
        }
        let images = u64::from(self.sum.images);
        let share = |n: u64| if images == 0 { 0.0 } else { n as f64 / images as f64 };
        Some(MediaResult {
            requests: self.requests,
            images,
            pixels: self.sum.pixels,
            bytes: self.sum.bytes,
            image_tokens: self.sum.tokens,
            bytes_per_s: (duration_s > 0.0).then(|| self.sum.bytes as f64 / duration_s),
            designed_reuse: share(u64::from(self.sum.pooled)),
            cache_hit_rate: (self.unknown_hits == 0).then(|| share(self.hits)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_of_images_and_hits_only_when_every_request_says() {
        let mut t = MediaTally::default();
        assert_eq!(t.finish(1.0), None);
        let s = |images, pooled| ImageSummary { images, pixels: 100, bytes: 10, pooled, tokens: 5 };
        t.record(&s(2, 1), Some(0));
        t.record(&s(2, 2), Some(1));
        let r = t.finish(2.0).unwrap();
        assert_eq!((r.requests, r.images, r.pixels, r.bytes, r.image_tokens), (2, 4, 200, 20, 10));
        assert_eq!((r.bytes_per_s, r.designed_reuse, r.cache_hit_rate), (Some(10.0), 0.75, Some(0.25)));
        t.record(&s(1, 0), None);
        assert_eq!(t.finish(2.0).unwrap().cache_hit_rate, None);
    }
}
