//! Reading a `text/event-stream` answer (watch, observe) event by event, as the
//! WHATWG server-sent events rules define the format: `field: value` lines, a
//! blank line ends an event, lines starting with `:` are comments.

use bytes::{Buf, BytesMut};
use futures_util::StreamExt;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `event:`; `message` when absent.
    pub event: String,
    /// `id:` (Baton: the revision).
    pub id: Option<String>,
    /// `data:` lines joined with newlines (Baton: one JSON document).
    pub data: String,
}

/// Events of one streaming answer, in order.
pub struct EventStream {
    body: futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    parser: EventParser,
}

impl EventStream {
    /// Reads `response`'s body as events.
    pub fn new(response: reqwest::Response) -> EventStream {
        EventStream {
            body: response.bytes_stream().boxed(),
            parser: EventParser::default(),
        }
    }

    /// The next event; `None` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<Event>, String> {
        loop {
            if let Some(event) = self.parser.next_event() {
                return Ok(Some(event));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.parser.feed(&chunk),
                Some(Err(error)) => return Err(error.to_string()),
                None => return Ok(None),
            }
        }
    }
}

/// The incremental parser: bytes in, whole events out.
#[derive(Debug, Default)]
pub struct EventParser {
    buffer: BytesMut,
    event: Option<String>,
    id: Option<String>,
    data: Vec<String>,
}

impl EventParser {
    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete event in what was fed, if any.
    pub fn next_event(&mut self) -> Option<Event> {
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let line = self.buffer.split_to(end);
            self.buffer.advance(1);
            let line = String::from_utf8_lossy(&line);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                if self.data.is_empty() && self.event.is_none() {
                    continue;
                }
                return Some(Event {
                    event: self.event.take().unwrap_or_else(|| "message".into()),
                    id: self.id.take(),
                    data: std::mem::take(&mut self.data).join("\n"),
                });
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
            match field {
                "event" => self.event = Some(value),
                "id" => self.id = Some(value),
                "data" => self.data.push(value),
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_come_out_whole() {
        let mut parser = EventParser::default();
        parser.feed(b": hello\n\nid: 4");
        assert_eq!(parser.next_event(), None);
        parser.feed(
            b"1\r\nevent: lock.acquired\ndata: {\"a\":\ndata: 1}\n\nevent: bookmark\ndata:{}\n",
        );
        assert_eq!(
            parser.next_event(),
            Some(Event {
                event: "lock.acquired".into(),
                id: Some("41".into()),
                data: "{\"a\":\n1}".into()
            })
        );
        assert_eq!(parser.next_event(), None);
        parser.feed(b"\n");
        let bookmark = parser.next_event().expect("bookmark");
        assert_eq!(
            (bookmark.event.as_str(), bookmark.data.as_str()),
            ("bookmark", "{}")
        );
    }
}
