//! The one line reader of the control socket, for both ends: newline-terminated lines
//! bounded in length. It holds no I/O (a caller feeds it what its buffered reader has),
//! so the daemon's async reader (`rpc.rs`) and the client's blocking one (`kernelctl`)
//! frame lines the same way.

/// What one call of `LineFramer::feed` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framed {
    /// A complete line, without its `\n` (or `\r\n`).
    Line(Vec<u8>),
    /// The line has grown past the limit: the rest of it cannot be told from what follows.
    TooLong,
}

/// Collects bytes into lines of at most `max` bytes.
#[derive(Debug, Clone)]
pub struct LineFramer {
    partial: Vec<u8>,
    max: usize,
}

impl LineFramer {
    pub fn new(max: usize) -> LineFramer {
        LineFramer {
            partial: Vec::new(),
            max,
        }
    }

    /// Takes bytes from `chunk` (the reader's buffer): returns how many to consume and,
    /// when they finish a line (or overflow the limit), what was found. Nothing is lost
    /// between calls, so a caller may stop and resume at any point (cancel-safe).
    pub fn feed(&mut self, chunk: &[u8]) -> (usize, Option<Framed>) {
        let (take, complete) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if self.partial.len() + take > self.max {
            return (0, Some(Framed::TooLong));
        }
        self.partial.extend_from_slice(&chunk[..take]);
        if !complete {
            return (take, None);
        }
        let mut line = std::mem::take(&mut self.partial);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        (take + 1, Some(Framed::Line(line)))
    }

    /// At the end of the stream: an unterminated last line still counts.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.partial.is_empty()).then(|| std::mem::take(&mut self.partial))
    }

    /// True while a line has begun and not ended (its time may be bounded).
    pub fn in_line(&self) -> bool {
        !self.partial.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_framed_across_chunks_and_bounded() {
        let mut f = LineFramer::new(8);
        assert_eq!(f.feed(b"{\"a\""), (4, None));
        assert!(f.in_line());
        assert_eq!(
            f.feed(b":1}\r\nnext"),
            (5, Some(Framed::Line(b"{\"a\":1}".to_vec())))
        );
        assert_eq!(f.feed(b"next"), (4, None));
        assert_eq!(f.finish(), Some(b"next".to_vec()));
        assert_eq!(f.finish(), None);
        assert_eq!(f.feed(b"123456789\n"), (0, Some(Framed::TooLong)));
    }
}
