//! Synthetic images for vision-language workloads: `[workload.images]`.
//!
//! The conventions are vLLM's `vllm bench serve --dataset-name random-mm`, taken verbatim:
//! - size buckets `{(height, width, frames): probability}` (vLLM's `--random-mm-bucket-config`,
//!   its Python dict literal as a string; frames must be 1, batchlab sends no video), each
//!   image's size drawn from them;
//! - `base_items_per_request` `n` and `range_ratio` `r`: a request's image count is uniform over
//!   `⌊n(1−r)⌋ ..= ⌈n(1+r)⌉`, clamped to `limit_per_prompt`.
//!
//! guidellm's resolution presets (`resolution = "720p"`) are a shorthand for one bucket: height
//! 240, 360, 480, 540, 720, 1080, 1440, 2160 (`4k` is `2160p`), width the 16:9 one rounded down to
//! even, as guidellm rounds (480p is 852 × 480).
//!
//! Pixels are `noise` (uniform RGB, vLLM's default, the worst case for compression), `gradient`
//! (guidellm's default: two random colours along a random angle; guidellm also warps it, batchlab
//! does not) or `solid` (one random colour). Encoded as JPEG (`quality`, default 75, PIL's default
//! that vLLM gets) or PNG, by the `image` crate, into `data:` URLs.
//!
//! # Seeds and the pool
//! Image `i` of request `k` is drawn from a stream of `(seed, k, i)`, so a run is reproducible and
//! every image differs. With `pool = N`, each image is instead, with probability `pool_rate`, one
//! of `N` pool images (uniform), each drawn from a stream of `(seed, pool index)`: the same
//! picture, byte for byte, every time it is drawn. The designed reuse is the share of images drawn
//! from the pool ([`ImageSpec::designed_reuse`]); a server's encoder cache misses each pool image
//! once, so its hit rate is lower by at most `N` images over a run.

use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use serde::Serialize;

use crate::engine::RequestId;
use crate::engine::image::{Image, ImageTokenRule};
use crate::rng::SplitMix64;

/// One size bucket: an image of `height × width` with this probability.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Bucket {
    /// Pixels down.
    pub height: u32,
    /// Pixels across.
    pub width: u32,
    /// Its share of images; the buckets' shares sum to 1.
    pub probability: f64,
}

/// What an image shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Content {
    /// Uniform random RGB (vLLM's).
    #[default]
    Noise,
    /// Two random colours along a random angle (guidellm's default).
    Gradient,
    /// One random colour.
    Solid,
}

/// The image format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageFormat {
    /// JPEG at `quality`.
    #[default]
    Jpeg,
    /// PNG at the `image` crate's default compression.
    Png,
}

/// How an image is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Jpeg { quality: u8 },
    Png,
}

/// `[workload.images]`: see the module docs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ImageSpec {
    /// The size buckets.
    pub buckets: Vec<Bucket>,
    /// vLLM's `base_items_per_request`.
    pub base_items: u32,
    /// vLLM's `num_mm_items_range_ratio`, 0..=1.
    pub range_ratio: f64,
    /// vLLM's `limit_mm_per_prompt` for images.
    pub limit: u32,
    /// What the pixels show.
    pub content: Content,
    /// How they are encoded.
    pub format: ImageFormat,
    /// JPEG quality, 1..=100.
    pub quality: u32,
    /// Distinct pool images; 0 for none (every image differs).
    pub pool: u32,
    /// The chance that an image is drawn from the pool.
    pub pool_rate: f64,
    /// Tokens per image, when `patch_size` is 0.
    pub tokens_per_image: u32,
    /// One token per `patch_size × patch_size` pixels; 0 for `tokens_per_image` per image.
    pub patch_size: u32,
    /// `prompt_tokens` is the whole prompt as batchlab counts it (the simulator's count: the chat
    /// template and text by four bytes a token, plus the images' tokens): the text is sized to
    /// hit it.
    pub count_in_prompt: bool,
}

impl Default for ImageSpec {
    fn default() -> Self {
        ImageSpec {
            buckets: vec![Bucket { height: 256, width: 256, probability: 1.0 }],
            base_items: 1,
            range_ratio: 0.0,
            limit: 255,
            content: Content::Noise,
            format: ImageFormat::Jpeg,
            quality: 75,
            pool: 0,
            pool_rate: 1.0,
            tokens_per_image: crate::engine::image::DEFAULT_IMAGE_TOKENS,
            patch_size: 0,
            count_in_prompt: false,
        }
    }
}

impl ImageSpec {
    /// What an image costs in prompt tokens, by batchlab's rule.
    pub fn token_rule(&self) -> ImageTokenRule {
        if self.patch_size > 0 {
            ImageTokenRule::Patch(self.patch_size)
        } else {
            ImageTokenRule::Fixed(self.tokens_per_image)
        }
    }

    fn encoding(&self) -> Encoding {
        match self.format {
            ImageFormat::Jpeg => Encoding::Jpeg { quality: self.quality.clamp(1, 100) as u8 },
            ImageFormat::Png => Encoding::Png,
        }
    }

    /// The designed encoder-cache reuse: the share of images drawn from the pool (0 without one).
    pub fn designed_reuse(&self) -> f64 {
        if self.pool == 0 { 0.0 } else { self.pool_rate }
    }

    /// The fewest and most images a request can have (vLLM's rule; see the module docs).
    pub fn count_range(&self) -> (u32, u32) {
        let n = f64::from(self.base_items);
        let lo = (n * (1.0 - self.range_ratio)).floor().max(0.0) as u32;
        let hi = (n * (1.0 + self.range_ratio)).ceil() as u32;
        (lo.min(self.limit), hi.min(self.limit))
    }
}

/// guidellm's resolution presets: `(name, height)`; the width is 16:9, rounded down to even.
pub const PRESETS: &[(&str, u32)] = &[
    ("240p", 240),
    ("360p", 360),
    ("480p", 480),
    ("540p", 540),
    ("720p", 720),
    ("1080p", 1080),
    ("1440p", 1440),
    ("2160p", 2160),
    ("4k", 2160),
];

/// The `(height, width)` of a preset, or `None` for an unknown name.
pub fn preset(name: &str) -> Option<(u32, u32)> {
    let &(_, height) = PRESETS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?;
    let width = height * 16 / 9 / 2 * 2;
    Some((height, width))
}

/// A problem with vLLM's bucket literal, with the offending text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BucketError(pub String);

/// Parses vLLM's `--random-mm-bucket-config` literal, `{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}`
/// (the frames may be left out: `(256, 256)`). Checks the shape and the numbers' syntax only;
/// sizes and the sum are checked by [`check_buckets`].
pub fn parse_buckets(text: &str) -> Result<Vec<Bucket>, BucketError> {
    let body = text.trim().strip_prefix('{').and_then(|t| t.strip_suffix('}')).ok_or_else(|| {
        BucketError(format!("expected vLLM's `{{(height, width, 1): probability, …}}`, found `{text}`"))
    })?;
    let mut buckets = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let open = rest.strip_prefix('(').ok_or_else(|| BucketError(format!("expected `(` at `{rest}`")))?;
        let (tuple, after) =
            open.split_once(')').ok_or_else(|| BucketError(format!("expected `)` after `({open}`")))?;
        let dims: Vec<&str> = tuple.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        let int = |s: &str| {
            s.parse::<u32>().map_err(|_| BucketError(format!("expected a whole number of pixels, found `{s}`")))
        };
        let (height, width) = match dims.as_slice() {
            [h, w] => (int(h)?, int(w)?),
            [h, w, f] => {
                if int(f)? != 1 {
                    return Err(BucketError(format!(
                        "bucket `({tuple})` has {f} frames: a video; batchlab sends images only (frames = 1)"
                    )));
                }
                (int(h)?, int(w)?)
            }
            _ => {
                return Err(BucketError(format!(
                    "expected `(height, width)` or `(height, width, 1)`, found `({tuple})`"
                )));
            }
        };
        let after = after
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| BucketError(format!("expected `:` after `({tuple})`")))?;
        let (p, next) = match after.split_once(',') {
            Some((p, next)) => (p, next),
            None => (after, ""),
        };
        let probability = p
            .trim()
            .parse::<f64>()
            .map_err(|_| BucketError(format!("expected a probability after `({tuple}):`, found `{}`", p.trim())))?;
        buckets.push(Bucket { height, width, probability });
        rest = next.trim();
    }
    if buckets.is_empty() {
        return Err(BucketError("no buckets: expected at least one `(height, width, 1): probability`".into()));
    }
    Ok(buckets)
}

/// The rules on buckets: no side of 0 pixels, probabilities in `0..=1` summing to 1 (within
/// 1e-6). Every problem, each as a sentence.
pub fn check_buckets(buckets: &[Bucket]) -> Vec<String> {
    let mut problems = Vec::new();
    for b in buckets {
        if b.height == 0 || b.width == 0 {
            problems.push(format!("bucket ({}, {}) has a side of 0 pixels", b.height, b.width));
        }
        if !(0.0..=1.0).contains(&b.probability) {
            problems
                .push(format!("bucket ({}, {}) has probability {}, outside 0..=1", b.height, b.width, b.probability));
        }
    }
    let sum: f64 = buckets.iter().map(|b| b.probability).sum();
    if (sum - 1.0).abs() > 1e-6 {
        problems.push(format!("the bucket probabilities sum to {sum}, not 1"));
    }
    problems
}

/// Sub-streams of the images.
const STREAM_COUNT: u64 = 1;
const STREAM_ITEMS: u64 = 2;
const STREAM_POOL: u64 = 3;

/// Makes the images of each request; cheap to clone (the pool is shared).
#[derive(Clone, Debug)]
pub struct ImageGen {
    spec: ImageSpec,
    seed: u64,
    /// The pool's images, each made the first time it is drawn.
    pool: Arc<Vec<OnceLock<Image>>>,
}

impl ImageGen {
    /// Images of `spec`, drawn from `seed`.
    pub fn new(spec: ImageSpec, seed: u64) -> Self {
        let pool = Arc::new((0..spec.pool).map(|_| OnceLock::new()).collect());
        ImageGen { spec, seed, pool }
    }

    /// The settings.
    pub fn spec(&self) -> &ImageSpec {
        &self.spec
    }

    /// The images of request `k`, in order; the same for the same `k`.
    pub fn images(&self, k: RequestId) -> Vec<Image> {
        let request = SplitMix64::derive(self.seed, k).next_u64();
        let (lo, hi) = self.spec.count_range();
        let count = SplitMix64::derive(request, STREAM_COUNT).range_u64(u64::from(lo), u64::from(hi.max(lo)));
        let items = SplitMix64::derive(request, STREAM_ITEMS).next_u64();
        (0..count)
            .map(|i| {
                let mut rng = SplitMix64::derive(items, i);
                if self.spec.pool > 0 && rng.chance(self.spec.pool_rate) {
                    let index = rng.range_u64(0, u64::from(self.spec.pool) - 1);
                    self.pool[index as usize].get_or_init(|| self.pool_image(index)).clone()
                } else {
                    self.make(rng.next_u64(), false)
                }
            })
            .collect()
    }

    fn pool_image(&self, index: u64) -> Image {
        let pool_seed = SplitMix64::derive(self.seed, STREAM_POOL).next_u64();
        self.make(SplitMix64::derive(pool_seed, index).next_u64(), true)
    }

    /// The image whose every draw comes from `seed`: its bucket, then its pixels.
    fn make(&self, seed: u64, pooled: bool) -> Image {
        let mut rng = SplitMix64::new(seed);
        let bucket = pick_bucket(&self.spec.buckets, rng.next_f64());
        let (width, height) = (bucket.width.max(1), bucket.height.max(1));
        let rgb = pixels(self.spec.content, width, height, &mut rng);
        let (mime, bytes) = encode(&rgb, width, height, self.spec.encoding());
        let mut url = String::with_capacity(32 + bytes.len() * 4 / 3);
        url.push_str("data:");
        url.push_str(mime);
        url.push_str(";base64,");
        base64::engine::general_purpose::STANDARD.encode_string(&bytes, &mut url);
        Image {
            url: url.into(),
            width,
            height,
            bytes: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
            hash: seed,
            pooled,
            tokens: self.spec.token_rule().tokens(width, height),
        }
    }
}

/// The bucket a uniform draw `u` in `[0, 1)` falls in, by cumulative probability.
fn pick_bucket(buckets: &[Bucket], u: f64) -> Bucket {
    let mut acc = 0.0;
    for b in buckets {
        acc += b.probability;
        if u < acc {
            return *b;
        }
    }
    // Rounding left `u` past the sum: the last bucket with a share.
    *buckets.iter().rev().find(|b| b.probability > 0.0).or(buckets.last()).expect("checked: at least one bucket")
}

/// `width × height` RGB bytes of `content`.
fn pixels(content: Content, width: u32, height: u32, rng: &mut SplitMix64) -> Vec<u8> {
    let n = width as usize * height as usize * 3;
    let colour = |rng: &mut SplitMix64| {
        let v = rng.next_u64();
        [v as u8, (v >> 8) as u8, (v >> 16) as u8]
    };
    match content {
        Content::Noise => {
            let mut out = Vec::with_capacity(n + 8);
            while out.len() < n {
                out.extend_from_slice(&rng.next_u64().to_le_bytes());
            }
            out.truncate(n);
            out
        }
        Content::Solid => colour(rng).repeat(n / 3),
        Content::Gradient => {
            let (a, b) = (colour(rng), colour(rng));
            let angle = rng.next_f64() * std::f64::consts::TAU;
            let (dx, dy) = (angle.cos(), angle.sin());
            // Project each pixel on the direction, scaled to 0..=1 over the image.
            let corners =
                [(0.0, 0.0), (f64::from(width), 0.0), (0.0, f64::from(height)), (f64::from(width), f64::from(height))];
            let proj: Vec<f64> = corners.iter().map(|(x, y)| x * dx + y * dy).collect();
            let lo = proj.iter().copied().fold(f64::INFINITY, f64::min);
            let span = (proj.iter().copied().fold(f64::NEG_INFINITY, f64::max) - lo).max(1.0);
            let mut out = Vec::with_capacity(n);
            for y in 0..height {
                for x in 0..width {
                    let t = ((f64::from(x) * dx + f64::from(y) * dy) - lo) / span;
                    for c in 0..3 {
                        out.push((f64::from(a[c]) * (1.0 - t) + f64::from(b[c]) * t).round() as u8);
                    }
                }
            }
            out
        }
    }
}

/// The MIME type and bytes of `rgb` encoded.
fn encode(rgb: &[u8], width: u32, height: u32, encoding: Encoding) -> (&'static str, Vec<u8>) {
    use image::ImageEncoder as _;
    let mut out = Vec::new();
    let result = match encoding {
        Encoding::Jpeg { quality } => image::codecs::jpeg::JpegEncoder::new_with_quality(
            &mut out,
            quality.clamp(1, 100),
        )
        .write_image(rgb, width, height, image::ExtendedColorType::Rgb8),
        Encoding::Png => image::codecs::png::PngEncoder::new(&mut out).write_image(
            rgb,
            width,
            height,
            image::ExtendedColorType::Rgb8,
        ),
    };
    // In-memory encoding of a buffer of the right size only fails on sizes past the formats'
    // limits (JPEG: 65,535 px a side), which the scenario check refuses.
    result.expect("an image within the format's limits encodes");
    (if matches!(encoding, Encoding::Png) { "image/png" } else { "image/jpeg" }, out)
}

/// The largest side a JPEG can have.
pub const MAX_SIDE: u32 = 65_535;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::engine::image::decode_data_url;

    fn spec(buckets: &str) -> ImageSpec {
        ImageSpec { buckets: parse_buckets(buckets).unwrap(), ..ImageSpec::default() }
    }

    #[test]
    fn vllm_bucket_literals_are_read_verbatim() {
        let b = parse_buckets("{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}");
        assert!(b.unwrap_err().0.contains("16 frames"), "video buckets are refused, even at 0");
        let b = parse_buckets("{(256, 256, 1): 0.5, (720, 1280): 0.5}").unwrap();
        assert_eq!(
            b,
            [
                Bucket { height: 256, width: 256, probability: 0.5 },
                Bucket { height: 720, width: 1280, probability: 0.5 }
            ]
        );
        assert!(parse_buckets("(1, 2): 1").is_err());
        assert!(parse_buckets("{}").is_err());
        assert!(parse_buckets("{(1, x): 1}").unwrap_err().0.contains("`x`"));
        assert_eq!(check_buckets(&b), Vec::<String>::new());
        let bad = parse_buckets("{(0, 256): 0.5, (4, 4): 0.4}").unwrap();
        let problems = check_buckets(&bad);
        assert!(problems[0].contains("side of 0"), "{problems:?}");
        assert!(problems[1].contains("sum to 0.9"), "{problems:?}");
    }

    #[test]
    fn presets_are_sixteen_by_nine_rounded_down_to_even() {
        assert_eq!(preset("240p"), Some((240, 426)));
        assert_eq!(preset("480p"), Some((480, 852)));
        assert_eq!(preset("720p"), Some((720, 1280)));
        assert_eq!(preset("4K"), Some((2160, 3840)));
        assert_eq!(preset("8k"), None);
        for (name, _) in PRESETS {
            let (h, w) = preset(name).unwrap();
            assert_eq!((h % 2, w % 2), (0, 0), "{name}");
        }
    }

    #[test]
    fn counts_follow_vllms_range_and_limit() {
        let s = |base, r, limit| ImageSpec { base_items: base, range_ratio: r, limit, ..ImageSpec::default() };
        assert_eq!(s(1, 0.0, 255).count_range(), (1, 1));
        assert_eq!(s(4, 0.5, 255).count_range(), (2, 6));
        assert_eq!(s(3, 0.3, 255).count_range(), (2, 4));
        assert_eq!(s(4, 0.5, 5).count_range(), (2, 5));
        let g = ImageGen::new(
            ImageSpec { buckets: vec![Bucket { height: 8, width: 8, probability: 1.0 }], ..s(4, 0.5, 5) },
            1,
        );
        let counts: HashSet<usize> = (0..300).map(|k| g.images(k).len()).collect();
        assert_eq!(counts, (2..=5).collect());
    }

    #[test]
    fn images_have_their_bucket_sizes_and_decode() {
        for format in [ImageFormat::Jpeg, ImageFormat::Png] {
            for content in [Content::Noise, Content::Gradient, Content::Solid] {
                let g = ImageGen::new(ImageSpec { content, format, ..spec("{(24, 40, 1): 0.5, (16, 16): 0.5}") }, 7);
                let mut sizes = HashSet::new();
                for k in 0..40 {
                    for image in g.images(k) {
                        let (w, h, bytes) = decode_data_url(&image.url).expect("a data URL of an image");
                        assert_eq!((w, h), (image.width, image.height));
                        assert_eq!(bytes.len() as u32, image.bytes);
                        let mime = if format == ImageFormat::Png { "data:image/png;" } else { "data:image/jpeg;" };
                        assert!(image.url.starts_with(mime));
                        sizes.insert((w, h));
                    }
                }
                assert_eq!(sizes, HashSet::from([(40, 24), (16, 16)]), "{content:?} {format:?}");
            }
        }
    }

    #[test]
    fn noise_compresses_worse_than_gradient_and_solid() {
        let size = |content| {
            let g = ImageGen::new(ImageSpec { content, ..spec("{(64, 64): 1}") }, 3);
            g.images(0)[0].bytes
        };
        let (noise, gradient, solid) = (size(Content::Noise), size(Content::Gradient), size(Content::Solid));
        assert!(noise > 2 * gradient && gradient >= solid, "{noise} {gradient} {solid}");
    }

    #[test]
    fn images_are_reproducible_and_all_differ_without_a_pool() {
        let a = ImageGen::new(spec("{(16, 16): 1}"), 5);
        let b = ImageGen::new(spec("{(16, 16): 1}"), 5);
        let c = ImageGen::new(spec("{(16, 16): 1}"), 6);
        assert_eq!(a.images(9), b.images(9));
        assert_ne!(a.images(9)[0].url, c.images(9)[0].url);
        let many = ImageGen::new(ImageSpec { base_items: 3, ..spec("{(16, 16): 1}") }, 5);
        let all: Vec<Image> = (0..200).flat_map(|k| many.images(k)).collect();
        let urls: HashSet<&str> = all.iter().map(|i| &*i.url).collect();
        let hashes: HashSet<u64> = all.iter().map(|i| i.hash).collect();
        assert_eq!((urls.len(), hashes.len()), (600, 600));
        assert!(all.iter().all(|i| !i.pooled));
    }

    #[test]
    fn a_pool_repeats_its_images_at_the_set_rate() {
        let g = ImageGen::new(
            ImageSpec { pool: 8, pool_rate: 0.4, base_items: 2, ..spec("{(16, 16): 0.5, (8, 32): 0.5}") },
            5,
        );
        let all: Vec<Image> = (0..2000).flat_map(|k| g.images(k)).collect();
        let pooled: Vec<&Image> = all.iter().filter(|i| i.pooled).collect();
        let share = pooled.len() as f64 / all.len() as f64;
        assert!((share - 0.4).abs() < 0.03, "{share}");
        let distinct: HashSet<&str> = pooled.iter().map(|i| &*i.url).collect();
        assert_eq!(distinct.len(), 8, "the pool's eight pictures, byte for byte");
        let pool_hashes: HashSet<u64> = pooled.iter().map(|i| i.hash).collect();
        assert_eq!(pool_hashes.len(), 8);
        // The fresh ones all differ from each other and from the pool.
        let fresh: HashSet<u64> = all.iter().filter(|i| !i.pooled).map(|i| i.hash).collect();
        assert_eq!(fresh.len(), all.len() - pooled.len());
        assert!(fresh.is_disjoint(&pool_hashes));
        assert_eq!(g.spec().designed_reuse(), 0.4);
        // The same pool image from another generator of the same seed: the same bytes.
        let again = ImageGen::new(g.spec().clone(), 5);
        assert_eq!(again.images(77), g.images(77));
    }
}
