//! `sse`: the HTTP engine's event-stream parser (`batchlab::engine::openai::sse`) on arbitrary
//! bytes cut into arbitrary reads gives exactly the events of a reference that reads the whole
//! stream at once, line by line, as the WHATWG rules say; and the per-choice stream decoder
//! never panics on what the events carry.

use arbitrary::Arbitrary;
use batchlab::engine::openai::sse::{SseEvent, SseParser};
use batchlab::engine::openai::stream::ResponseStream;

#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    /// The stream's bytes.
    pub bytes: Vec<u8>,
    /// Read sizes, cycled (0 is taken as 1); none: one read.
    pub reads: Vec<u8>,
    /// Choices of the response the events are fed to (1..=8).
    pub choices: u8,
    /// Whether the decoder reads chat chunks.
    pub chat: bool,
}

/// The reference: the whole stream at once. Lines end at CRLF, LF or CR; a trailing line without
/// an end is no line; a BOM first is dropped; a blank line dispatches an event with data.
pub fn reference(bytes: &[u8]) -> Vec<SseEvent> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut lines: Vec<&[u8]> = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\r' => {
                lines.push(&bytes[start..i]);
                i += if bytes.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
                start = i;
            }
            b'\n' => {
                lines.push(&bytes[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    let mut events = Vec::new();
    let (mut data, mut has_data, mut event) = (String::new(), false, None);
    for line in lines {
        if line.is_empty() {
            if has_data {
                data.pop();
                events.push(SseEvent { event: event.take(), data: std::mem::take(&mut data) });
            }
            (data, has_data, event) = (String::new(), false, None);
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => (&line[..c], line[c + 1..].strip_prefix(b" ").unwrap_or(&line[c + 1..])),
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                data.push_str(&String::from_utf8_lossy(value));
                data.push('\n');
                has_data = true;
            }
            b"event" => event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
    }
    events
}

pub fn check(input: &Input) {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut rest = input.bytes.as_slice();
    let mut sizes = input.reads.iter().map(|&n| usize::from(n.max(1))).cycle();
    while !rest.is_empty() {
        let size = if input.reads.is_empty() { rest.len() } else { sizes.next().unwrap_or(1) };
        let (now, later) = rest.split_at(size.min(rest.len()));
        parser.feed(now, &mut events).expect("small inputs stay under the bound");
        rest = later;
    }
    assert_eq!(events, reference(&input.bytes), "reads of {:?}", input.reads);

    let mut stream = ResponseStream::new(usize::from(input.choices % 8) + 1, input.chat);
    for (i, event) in events.iter().enumerate() {
        if stream.handle(&event.data, i as f64).is_err() {
            return;
        }
    }
    let (finished, of) = stream.finished_count();
    let all = stream.all_finished();
    if let Some(results) = stream.finish() {
        assert!(all && finished == of && results.len() == of);
        for r in results {
            let r = r.expect("an unbounded stream refuses no choice");
            assert!(r.token_ts.windows(2).all(|w| w[0] <= w[1]), "token times in arrival order");
        }
    } else {
        assert!(!all);
    }
}
