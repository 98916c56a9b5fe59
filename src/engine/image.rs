//! Images in chat prompts: what a request carries, and batchlab's one rule for what an image
//! costs in prompt tokens.
//!
//! An [`Image`] is an encoded picture sent as a `data:` URL in an `image_url` content part, after
//! its message's text (vLLM's `random-mm` and guidellm put the text first). It carries its size,
//! its encoded bytes and an identity ([`Image::hash`]): two images with the same hash are the same
//! picture, which is what an encoder (multimodal) cache keys on.
//!
//! # Image tokens
//! A server charges an image some prompt tokens, set by its vision tower. batchlab's rule
//! ([`ImageTokenRule`]), which the simulator, `batchlab serve` and token-exact prompts share:
//! - `Fixed(n)`: `n` tokens per image, whatever its size. The default is 576, guidellm's mock
//!   server's (a 336-pixel ViT-L/14: 24 × 24 patches), and LLaVA-1.5's.
//! - `Patch(p)`: one token per `p × p` patch, `⌈height / p⌉ · ⌈width / p⌉`, as a ViT that keeps
//!   the image's own size (Qwen2-VL-like, before any merging).

use std::sync::Arc;

use serde::Serialize;

/// One image of a chat message: its `data:` URL and what it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Image {
    /// `data:image/jpeg;base64,…` or `data:image/png;base64,…`.
    #[serde(skip)]
    pub url: Arc<str>,
    /// Pixels across.
    pub width: u32,
    /// Pixels down.
    pub height: u32,
    /// The encoded image's bytes (before base64).
    pub bytes: u32,
    /// The picture's identity: equal for the same picture (a pool's reuse), else different.
    pub hash: u64,
    /// Whether it was drawn from the workload's media pool (a designed reuse).
    pub pooled: bool,
    /// The prompt tokens it costs, by the [`ImageTokenRule`] of whoever made it (the workload's,
    /// or `batchlab serve`'s for an image it was sent).
    pub tokens: u32,
}

impl Image {
    /// Its pixels, `width × height`.
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// What a request's images add up to, for its record and the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ImageSummary {
    /// Images.
    pub images: u32,
    /// Their pixels.
    pub pixels: u64,
    /// Their encoded bytes.
    pub bytes: u64,
    /// Those drawn from the media pool.
    pub pooled: u32,
    /// Their prompt tokens, by the rule they were made with.
    pub tokens: u64,
}

/// The images of `prompt`'s messages, in order.
pub fn prompt_images(prompt: &super::Prompt) -> impl Iterator<Item = &Image> {
    let messages = match prompt {
        super::Prompt::Chat(chat) => chat.messages.as_slice(),
        _ => &[],
    };
    messages.iter().flat_map(|m| m.images.iter())
}

/// What `prompt`'s images add up to; `None` for a prompt without images.
pub fn summary(prompt: &super::Prompt) -> Option<ImageSummary> {
    let mut s = ImageSummary::default();
    for image in prompt_images(prompt) {
        s.images += 1;
        s.pixels += image.pixels();
        s.bytes += u64::from(image.bytes);
        s.pooled += u32::from(image.pooled);
        s.tokens += u64::from(image.tokens);
    }
    (s.images > 0).then_some(s)
}

/// How many prompt tokens an image costs; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageTokenRule {
    /// The same count for every image.
    Fixed(u32),
    /// One token per `p × p` patch (at least 1 pixel).
    Patch(u32),
}

/// guidellm's mock server's, and LLaVA-1.5's, tokens per image.
pub const DEFAULT_IMAGE_TOKENS: u32 = 576;

impl Default for ImageTokenRule {
    fn default() -> Self {
        ImageTokenRule::Fixed(DEFAULT_IMAGE_TOKENS)
    }
}

impl ImageTokenRule {
    /// The tokens of an image of `width × height` pixels.
    pub fn tokens(self, width: u32, height: u32) -> u32 {
        match self {
            ImageTokenRule::Fixed(n) => n,
            ImageTokenRule::Patch(p) => {
                let p = p.max(1);
                height.div_ceil(p).saturating_mul(width.div_ceil(p))
            }
        }
    }
}

/// The bytes of a base64 `data:` URL of an image; `None` for any other URL.
pub fn data_url_bytes(url: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let (head, data) = url.strip_prefix("data:")?.split_once(',')?;
    if !head.starts_with("image/") || !head.ends_with(";base64") {
        return None;
    }
    base64::engine::general_purpose::STANDARD.decode(data).ok()
}

/// The size of an encoded image (JPEG or PNG) from its bytes, and the bytes of a `data:` URL;
/// `None` for a URL that is not a base64 `data:` URL of an image the `image` crate can read.
pub fn decode_data_url(url: &str) -> Option<(u32, u32, Vec<u8>)> {
    let bytes = data_url_bytes(url)?;
    let reader = image::ImageReader::new(std::io::Cursor::new(&bytes)).with_guessed_format().ok()?;
    let (width, height) = reader.into_dimensions().ok()?;
    Some((width, height, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_rule_counts_fixed_or_patches() {
        assert_eq!(ImageTokenRule::default().tokens(1, 1), 576);
        assert_eq!(ImageTokenRule::Fixed(64).tokens(4000, 3000), 64);
        // 336 × 336 at 14 px: 24 × 24.
        assert_eq!(ImageTokenRule::Patch(14).tokens(336, 336), 576);
        // A partial patch counts: 720 / 14 = 51.4 → 52, 1280 / 14 = 91.4 → 92.
        assert_eq!(ImageTokenRule::Patch(14).tokens(1280, 720), 52 * 92);
        assert_eq!(ImageTokenRule::Patch(0).tokens(3, 2), 6);
    }
}
