//! batchlab's one rule for counting a text's tokens without a tokenizer: four bytes of UTF-8 a
//! token, rounded up.
//!
//! Wherever batchlab itself must count text (the simulator's prefill, a dataset's length filters
//! and truncation, a synthetic chat prompt's length), it uses this rule and nothing else, so a
//! length means the same everywhere. Reports never use it for a real engine: their prompt token
//! counts are the engine's own, after templating.

/// Tokens in `text` by the rule: `ceil(bytes / 4)`.
pub fn text_tokens(text: &str) -> usize {
    text.len().div_ceil(BYTES_PER_TOKEN)
}

/// The longest prefix of `text` that has at most `tokens` tokens by the rule, cut at a character
/// boundary.
pub fn truncate_text(text: &str, tokens: usize) -> &str {
    let mut end = text.len().min(tokens.saturating_mul(BYTES_PER_TOKEN));
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Bytes a token, by the rule.
pub const BYTES_PER_TOKEN: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bytes_a_token_rounded_up() {
        for (text, tokens) in [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("héllo", 2), ("日本語", 3)] {
            assert_eq!(text_tokens(text), tokens, "{text:?}");
        }
    }

    #[test]
    fn truncation_keeps_at_most_that_many_tokens_at_a_char_boundary() {
        assert_eq!(truncate_text("abcdefghij", 2), "abcdefgh");
        assert_eq!(truncate_text("abc", 5), "abc");
        assert_eq!(truncate_text("abc", 0), "");
        // "日" is 3 bytes: 4 bytes would split the second character.
        assert_eq!(truncate_text("日本語", 1), "日");
        for n in 0..12 {
            let t = truncate_text("日本語 and more text", n);
            assert!(text_tokens(t) <= n, "{n}: {t:?}");
        }
    }
}
