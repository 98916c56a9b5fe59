//! Server-sent events, sans IO: bytes in as they arrive, whole events out.
//!
//! A parser of our own rather than a crate: the engine times every event by the arrival of the
//! network read that completed it, so it needs "these bytes came now; which events did they
//! finish?", which is exactly [`SseParser::feed`]. The stream crates (`eventsource-stream`,
//! `reqwest-eventsource`) wrap the byte stream and hand events out later, on their own polling,
//! which hides that moment. The format is small (the WHATWG `text/event-stream` rules, below),
//! and the fuzz target `sse` checks the parser against a reference on every way of cutting
//! the same bytes into reads.
//!
//! The rules kept: lines end with CRLF, LF or CR (a CR at the end of one read may be followed by
//! the LF of the next: both are one line end); a blank line dispatches the event; a line starting
//! with `:` is a comment; `field: value` (one space after the colon dropped), a line without a
//! colon being a field with an empty value; `data` lines are joined with `\n`; `event` sets the
//! type; `id` and `retry` are read and ignored (the engine never reconnects); unknown fields are
//! ignored; an event with no `data` line is not dispatched; a UTF-8 BOM at the very start is
//! dropped; bytes that are not UTF-8 become U+FFFD; whatever follows the last blank line when the
//! stream ends is discarded ([`SseParser::pending`] says whether there was any).

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the event had one (`None` is the default type, `message`).
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// The stream broke the parser's bound.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One line or one event's data grew past [`MAX_EVENT_BYTES`].
    #[error("an event is larger than {MAX_EVENT_BYTES} bytes")]
    TooLarge,
}

/// Most bytes one line, or one event's data, may hold: memory stays bounded whatever a server sends.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// The parser's state between reads.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The line so far (no line end yet).
    line: Vec<u8>,
    /// The event's data so far: each `data` line followed by `\n`.
    data: String,
    /// Whether the event has a `data` line (an empty one included).
    has_data: bool,
    event: Option<String>,
    /// The last read ended with a CR: an LF at the start of the next one ends no second line.
    after_cr: bool,
    /// The first bytes have been seen (a BOM is only dropped there).
    started: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Takes the next bytes of the stream and appends the events they complete to `events`, in
    /// order. A read may end anywhere: in a line, between CR and LF, inside a UTF-8 character.
    pub fn feed(&mut self, mut bytes: &[u8], events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.started && !bytes.is_empty() {
            // The BOM may itself come in pieces: hold bytes back until there are three or the
            // stream shows it is not one.
            self.line.extend_from_slice(bytes);
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            if self.line.len() < BOM.len() && BOM.starts_with(&self.line) {
                return Ok(());
            }
            self.started = true;
            let held = std::mem::take(&mut self.line);
            let held = held.strip_prefix(BOM).unwrap_or(&held);
            return self.feed_lines(held, events);
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        self.feed_lines(bytes, events)
    }

    fn feed_lines(&mut self, mut bytes: &[u8], events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            if self.line.is_empty() {
                self.line_done(&bytes[..end], events)?;
            } else {
                self.grow_line(&bytes[..end])?;
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, events)?;
            }
            let cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.grow_line(bytes)
    }

    fn grow_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLarge);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// One whole line, its end taken off.
    fn line_done(&mut self, line: &[u8], events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                self.data.pop(); // the `\n` after the last data line
                events.push(SseEvent { event: self.event.take(), data: std::mem::take(&mut self.data) });
            }
            self.has_data = false;
            self.event = None;
            self.data.clear();
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(SseError::TooLarge);
                }
                self.data.push_str(&String::from_utf8_lossy(value));
                self.data.push('\n');
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {} // id, retry, and fields the format does not know
        }
        Ok(())
    }

    /// Whether bytes of an event not yet dispatched are held: at the end of the stream, they
    /// are what a cut connection left unfinished.
    pub fn pending(&self) -> bool {
        !self.line.is_empty() || self.has_data || self.event.is_some()
    }
}

/// The events of a whole stream given at once, for tests and the fuzz target's reference.
pub fn parse_all(bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
    let mut events = Vec::new();
    SseParser::new().feed(bytes, &mut events)?;
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    /// The events of `bytes` fed in reads of the given sizes (cycled).
    fn in_reads(bytes: &[u8], sizes: &[usize]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut rest = bytes;
        for &size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (now, later) = rest.split_at(size.max(1).min(rest.len()));
            parser.feed(now, &mut events).unwrap();
            rest = later;
        }
        events
    }

    #[test]
    fn line_ends_comments_and_fields() {
        let cases: &[(&[u8], &[&str])] = &[
            (b"data: a\n\n", &["a"]),
            (b"data: a\r\n\r\n", &["a"]),
            (b"data: a\r\rdata: b\r\r", &["a", "b"]),
            (b"data:a\n\n", &["a"]),
            (b"data:  two spaces\n\n", &[" two spaces"]),
            (b"data: 1\ndata: 2\n\n", &["1\n2"]),
            (b"data\n\n", &[""]),
            (b": ping\n\n", &[]),
            (b"event: x\n\n", &[]),
            (b"id: 7\nretry: 10\nfoo: bar\ndata: d\n\n", &["d"]),
            (b"data: a\n\n\n\ndata: b\n\n", &["a", "b"]),
            (b"\xEF\xBB\xBFdata: bom\n\n", &["bom"]),
            (b"data: no end", &[]),
            (b"data: caf\xC3\xA9 \xFF\n\n", &["caf\u{e9} \u{fffd}"]),
        ];
        for (bytes, expected) in cases {
            let events = parse_all(bytes).unwrap();
            assert_eq!(data(&events), *expected, "{:?}", String::from_utf8_lossy(bytes));
        }
        let typed = parse_all(b"event: error\ndata: {}\n\n").unwrap();
        assert_eq!(typed[0].event.as_deref(), Some("error"));
    }

    #[test]
    fn reads_may_end_anywhere() {
        let stream: &[u8] = b"\xEF\xBB\xBFdata: {\"a\": 1}\r\n\r\n: keep-alive\r\ndata: caf\xC3\xA9\r\rdata: x\ndata: y\n\ndata: [DONE]\n\n";
        let whole = parse_all(stream).unwrap();
        assert_eq!(data(&whole), ["{\"a\": 1}", "caf\u{e9}", "x\ny", "[DONE]"]);
        for sizes in [&[1][..], &[2], &[3], &[5, 1], &[7, 2, 1], &[64]] {
            assert_eq!(in_reads(stream, sizes), whole, "reads of {sizes:?}");
        }
    }

    #[test]
    fn a_cr_then_lf_in_the_next_read_is_one_line_end() {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser.feed(b"data: a\r", &mut events).unwrap();
        parser.feed(b"\ndata: b\r", &mut events).unwrap();
        parser.feed(b"\n\r", &mut events).unwrap();
        parser.feed(b"\n", &mut events).unwrap();
        assert_eq!(data(&events), ["a\nb"], "the LF after each CR ended no line of its own");
    }

    proptest::proptest! {
        /// Any bytes, cut into any reads, give the events of the whole stream read at once (the
        /// fuzz target `sse` also holds both to a reference).
        #[test]
        fn reads_never_change_the_events(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    &b"data: "[..], b"data:", b"data", b"event: e", b": c", b"id: 1", b"x", b"{}",
                    b"\r", b"\n", b"\r\n", b"\xEF\xBB\xBF", b"\xC3", b"\xA9", b" ",
                ]),
                0..60,
            ),
            sizes in proptest::collection::vec(1usize..8, 1..8),
        ) {
            let bytes: Vec<u8> = pieces.concat();
            proptest::prop_assert_eq!(in_reads(&bytes, &sizes), parse_all(&bytes).unwrap());
        }
    }

    #[test]
    fn an_unfinished_event_is_pending_and_bounded() {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        parser.feed(b"data: {\"half\": ", &mut events).unwrap();
        assert!(events.is_empty() && parser.pending());
        parser.feed(b"1}\n\n", &mut events).unwrap();
        assert!(!parser.pending());
        let huge = vec![b'x'; MAX_EVENT_BYTES + 1];
        assert_eq!(SseParser::new().feed(&huge, &mut events), Err(SseError::TooLarge));
    }
}
