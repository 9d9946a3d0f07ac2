//! The WebSocket frame codec of `/notify/v1/ws` (RFC 6455 §5; docs/PROTOCOL.md,
//! "Notifications"): client frames in, reassembled into messages; server frames out.
//!
//! Standard library only, so that the fuzz target `fuzz/fuzz_targets/wsframe.rs` includes
//! this file as it is. What the decoder refuses, and the close code it calls for:
//! - an unmasked client frame (RFC 6455 §5.1): 1002;
//! - reserved bits, an unknown opcode, a fragmented or over-125-byte control frame, a
//!   continuation with nothing to continue, a new message inside a fragmented one: 1002;
//! - a message (all its fragments) longer than the decoder's bound: 1009;
//! - text or a close reason that is not UTF-8: 1007.
//!
//! Binary messages are reported at their first frame ([`Message::Binary`]); the caller
//! closes with 1003 without reading them.
//!
//! Control frames cost the gateway writes, so they have a budget per connection
//! ([`ControlBudget`]): pings are answered with at most [`PONGS_PER_SECOND`] pongs a second,
//! each for the latest ping only (pongs coalesced, RFC 6455 §5.5.3 allows it), and a client
//! sending more than [`CONTROL_BURST`] control frames at once, or more than
//! [`CONTROL_PER_SECOND`] a second over time, is closed with 1008.

/// The bytes of a control frame's payload at most (RFC 6455 §5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// Frame opcodes (RFC 6455 §5.2).
pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// One message from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Text(String),
    /// A binary message began (its data is not kept).
    Binary,
    Ping(Vec<u8>),
    Pong,
    /// A close frame: its status code, if any, and reason.
    Close(Option<u16>, String),
}

/// Why the decoder refuses the client's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// A client frame without a mask (RFC 6455 §5.1).
    Unmasked,
    /// Any other framing error.
    Protocol(&'static str),
    /// A message longer than the bound.
    TooLarge,
    /// Text that is not UTF-8.
    BadUtf8,
    /// More control frames than the connection's budget ([`ControlBudget`]).
    ControlFlood,
}

impl Violation {
    /// The close status code the violation calls for (RFC 6455 §7.4.1).
    pub fn close_code(self) -> u16 {
        match self {
            Violation::Unmasked | Violation::Protocol(_) => 1002,
            Violation::TooLarge => 1009,
            Violation::BadUtf8 => 1007,
            Violation::ControlFlood => 1008,
        }
    }

    /// The close reason sent with it.
    pub fn reason(self) -> &'static str {
        match self {
            Violation::Unmasked => "client frames must be masked",
            Violation::Protocol(why) => why,
            Violation::TooLarge => "message too large",
            Violation::BadUtf8 => "text is not UTF-8",
            Violation::ControlFlood => "too many control frames",
        }
    }
}

/// Pong writes per second at most, per connection.
pub const PONGS_PER_SECOND: u64 = 2;
/// Control frames (pings, pongs) a client may send at once...
pub const CONTROL_BURST: u64 = 50;
/// ... and per second over time; beyond, the connection is closed with 1008.
pub const CONTROL_PER_SECOND: u64 = 5;

/// The control-frame budget of one connection; time is the caller's, in ms (monotonic).
#[derive(Debug, Clone)]
pub struct ControlBudget {
    /// Control frames that may still be sent at once, in thousandths.
    tokens_milli: u64,
    last_ms: u64,
    /// The payload of the latest ping not answered yet.
    pending_pong: Option<Vec<u8>>,
    /// When the last pong was written.
    last_pong_ms: Option<u64>,
}

impl ControlBudget {
    /// A full budget at `now_ms`.
    pub fn new(now_ms: u64) -> ControlBudget {
        ControlBudget {
            tokens_milli: CONTROL_BURST * 1000,
            last_ms: now_ms,
            pending_pong: None,
            last_pong_ms: None,
        }
    }

    /// Counts one control frame from the client: a ping (its payload) or a pong (`None`).
    /// A ping replaces any ping not answered yet. `Err` when the budget is spent: close.
    pub fn received(&mut self, now_ms: u64, ping: Option<Vec<u8>>) -> Result<(), Violation> {
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        self.tokens_milli = self
            .tokens_milli
            .saturating_add(elapsed.saturating_mul(CONTROL_PER_SECOND))
            .min(CONTROL_BURST * 1000);
        if self.tokens_milli < 1000 {
            return Err(Violation::ControlFlood);
        }
        self.tokens_milli -= 1000;
        if ping.is_some() {
            self.pending_pong = ping;
        }
        Ok(())
    }

    /// How long until the pending pong may be written: `None` with no ping to answer.
    pub fn pong_wait_ms(&self, now_ms: u64) -> Option<u64> {
        self.pending_pong.as_ref()?;
        let gap = 1000 / PONGS_PER_SECOND;
        Some(
            self.last_pong_ms
                .map_or(0, |at| (at + gap).saturating_sub(now_ms)),
        )
    }

    /// The payload of the pong to write now, if one is pending and allowed.
    pub fn take_pong(&mut self, now_ms: u64) -> Option<Vec<u8>> {
        if self.pong_wait_ms(now_ms)? > 0 {
            return None;
        }
        self.last_pong_ms = Some(now_ms);
        self.pending_pong.take()
    }
}

/// Reassembles client messages from the bytes read, one frame at a time.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// A fragmented text message being reassembled.
    partial: Option<Vec<u8>>,
    max_message: usize,
}

impl Decoder {
    /// A decoder refusing messages longer than `max_message` bytes.
    pub fn new(max_message: usize) -> Decoder {
        Decoder {
            buf: Vec::new(),
            partial: None,
            max_message,
        }
    }

    /// Adds bytes read from the client.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, `Ok(None)` until more bytes are needed. After an `Err` the
    /// connection must be closed (the decoder's state is then undefined).
    pub fn next_message(&mut self) -> Result<Option<Message>, Violation> {
        loop {
            let Some((fin, opcode, payload)) = self.frame()? else {
                return Ok(None);
            };
            match opcode {
                OP_PING => return Ok(Some(Message::Ping(payload))),
                OP_PONG => return Ok(Some(Message::Pong)),
                OP_CLOSE => return close(&payload).map(Some),
                OP_BINARY => {
                    if self.partial.is_some() {
                        return Err(Violation::Protocol("new message inside a fragmented one"));
                    }
                    return Ok(Some(Message::Binary));
                }
                OP_TEXT => {
                    if self.partial.is_some() {
                        return Err(Violation::Protocol("new message inside a fragmented one"));
                    }
                    if fin {
                        return text(payload).map(Some);
                    }
                    self.partial = Some(payload);
                }
                OP_CONTINUATION => {
                    let Some(mut part) = self.partial.take() else {
                        return Err(Violation::Protocol("continuation without a message"));
                    };
                    if part.len() + payload.len() > self.max_message {
                        return Err(Violation::TooLarge);
                    }
                    part.extend_from_slice(&payload);
                    if fin {
                        return text(part).map(Some);
                    }
                    self.partial = Some(part);
                }
                _ => return Err(Violation::Protocol("unknown opcode")),
            }
        }
    }

    /// The next whole frame `(fin, opcode, unmasked payload)`, taken from the buffer.
    fn frame(&mut self) -> Result<Option<(bool, u8, Vec<u8>)>, Violation> {
        let b = &self.buf;
        if b.len() < 2 {
            return Ok(None);
        }
        let fin = b[0] & 0x80 != 0;
        if b[0] & 0x70 != 0 {
            return Err(Violation::Protocol("reserved bits set"));
        }
        let opcode = b[0] & 0x0F;
        if !matches!(
            opcode,
            OP_CONTINUATION | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG
        ) {
            return Err(Violation::Protocol("unknown opcode"));
        }
        if b[1] & 0x80 == 0 {
            return Err(Violation::Unmasked);
        }
        let (len, at) = match b[1] & 0x7F {
            126 => {
                if b.len() < 4 {
                    return Ok(None);
                }
                (u64::from(u16::from_be_bytes([b[2], b[3]])), 4)
            }
            127 => {
                if b.len() < 10 {
                    return Ok(None);
                }
                let mut n = [0u8; 8];
                n.copy_from_slice(&b[2..10]);
                let n = u64::from_be_bytes(n);
                if n >> 63 != 0 {
                    return Err(Violation::Protocol("length with its top bit set"));
                }
                (n, 10)
            }
            n => (u64::from(n), 2),
        };
        let control = opcode >= OP_CLOSE;
        if control && (!fin || len > MAX_CONTROL_PAYLOAD as u64) {
            return Err(Violation::Protocol("bad control frame"));
        }
        let partial = self.partial.as_ref().map_or(0, Vec::len) as u64;
        if !control && len.saturating_add(partial) > self.max_message as u64 {
            return Err(Violation::TooLarge);
        }
        // Bounded by `max_message` (data) or 125 (control) just above.
        let len = len as usize;
        let start = at + 4;
        if b.len() < start + len {
            return Ok(None);
        }
        let mask = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        let payload: Vec<u8> = b[start..start + len]
            .iter()
            .enumerate()
            .map(|(i, c)| c ^ mask[i % 4])
            .collect();
        self.buf.drain(..start + len);
        Ok(Some((fin, opcode, payload)))
    }
}

fn text(payload: Vec<u8>) -> Result<Message, Violation> {
    String::from_utf8(payload)
        .map(Message::Text)
        .map_err(|_| Violation::BadUtf8)
}

fn close(payload: &[u8]) -> Result<Message, Violation> {
    match payload {
        [] => Ok(Message::Close(None, String::new())),
        [_] => Err(Violation::Protocol("close payload of one byte")),
        [a, b, reason @ ..] => {
            let reason = std::str::from_utf8(reason).map_err(|_| Violation::BadUtf8)?;
            Ok(Message::Close(
                Some(u16::from_be_bytes([*a, *b])),
                reason.to_owned(),
            ))
        }
    }
}

/// One unmasked, unfragmented server frame.
pub fn encode(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | (opcode & 0x0F));
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= usize::from(u16::MAX) => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// A close frame with `code` and `reason` (cut to the 123 bytes a control frame has room
/// for, at a character boundary).
pub fn encode_close(code: u16, reason: &str) -> Vec<u8> {
    let mut end = reason.len().min(MAX_CONTROL_PAYLOAD - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    encode(OP_CLOSE, &payload)
}

/// A masked client frame (for tests and the fuzz target's round trip).
pub fn encode_masked(fin: bool, opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(if fin { 0x80 } else { 0 } | (opcode & 0x0F));
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n <= usize::from(u16::MAX) => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, c)| c ^ mask[i % 4]));
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const M: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    fn decode_all(bytes: &[u8], max: usize) -> Result<Vec<Message>, Violation> {
        let mut d = Decoder::new(max);
        let mut out = Vec::new();
        // One byte at a time: every split point of the input is exercised.
        for b in bytes {
            d.feed(std::slice::from_ref(b));
            while let Some(m) = d.next_message()? {
                out.push(m);
            }
        }
        Ok(out)
    }

    #[test]
    fn masked_text_ping_close_decode() {
        // RFC 6455 §5.7: a single-frame masked text message "Hello".
        let hello = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        assert_eq!(
            decode_all(&hello, 64).unwrap(),
            vec![Message::Text("Hello".into())]
        );
        let mut bytes = encode_masked(true, OP_PING, b"hi", M);
        bytes.extend(encode_masked(true, OP_PONG, b"", M));
        bytes.extend(encode_masked(true, OP_CLOSE, &[0x03, 0xe8, b'o', b'k'], M));
        assert_eq!(
            decode_all(&bytes, 64).unwrap(),
            vec![
                Message::Ping(b"hi".to_vec()),
                Message::Pong,
                Message::Close(Some(1000), "ok".into())
            ]
        );
    }

    #[test]
    fn fragments_reassemble_with_control_frames_between() {
        let mut bytes = encode_masked(false, OP_TEXT, b"Hel", M);
        bytes.extend(encode_masked(true, OP_PING, b"", M));
        bytes.extend(encode_masked(false, OP_CONTINUATION, b"lo ", M));
        bytes.extend(encode_masked(true, OP_CONTINUATION, b"there", M));
        assert_eq!(
            decode_all(&bytes, 64).unwrap(),
            vec![Message::Ping(vec![]), Message::Text("Hello there".into())]
        );
    }

    #[test]
    fn long_lengths_round_trip() {
        let big = "x".repeat(70_000);
        let bytes = encode_masked(true, OP_TEXT, big.as_bytes(), M);
        assert_eq!(bytes[1], 0x80 | 127);
        assert_eq!(
            decode_all(&bytes, 100_000).unwrap(),
            vec![Message::Text(big.clone())]
        );
        let mid = "y".repeat(300);
        let server = encode(OP_TEXT, mid.as_bytes());
        assert_eq!(&server[..4], &[0x81, 126, 0x01, 0x2c]);
    }

    #[test]
    fn violations_carry_their_close_codes() {
        let unmasked = encode(OP_TEXT, b"hi");
        assert_eq!(decode_all(&unmasked, 64), Err(Violation::Unmasked));
        assert_eq!(Violation::Unmasked.close_code(), 1002);
        let big = encode_masked(true, OP_TEXT, &[b'a'; 65], M);
        assert_eq!(decode_all(&big, 64), Err(Violation::TooLarge));
        assert_eq!(Violation::TooLarge.close_code(), 1009);
        // Fragments over the bound together, each under it.
        let mut parts = encode_masked(false, OP_TEXT, &[b'a'; 40], M);
        parts.extend(encode_masked(true, OP_CONTINUATION, &[b'a'; 40], M));
        assert_eq!(decode_all(&parts, 64), Err(Violation::TooLarge));
        let bad = encode_masked(true, OP_TEXT, &[0xff, 0xfe], M);
        assert_eq!(decode_all(&bad, 64), Err(Violation::BadUtf8));
        let orphan = encode_masked(true, OP_CONTINUATION, b"x", M);
        assert!(matches!(
            decode_all(&orphan, 64),
            Err(Violation::Protocol(_))
        ));
        let long_ping = encode_masked(true, OP_PING, &[0; 126], M);
        assert!(matches!(
            decode_all(&long_ping, 1000),
            Err(Violation::Protocol(_))
        ));
        let mut rsv = encode_masked(true, OP_TEXT, b"x", M);
        rsv[0] |= 0x40;
        assert!(matches!(decode_all(&rsv, 64), Err(Violation::Protocol(_))));
        let binary = encode_masked(true, OP_BINARY, b"x", M);
        assert_eq!(decode_all(&binary, 64).unwrap(), vec![Message::Binary]);
    }

    #[test]
    fn pings_are_coalesced_and_bounded_then_a_flood_is_refused() {
        let mut b = ControlBudget::new(0);
        // A burst of pings within 1 ms: one pong now, for the latest ping only.
        for i in 0..10u8 {
            b.received(0, Some(vec![i])).unwrap();
        }
        assert_eq!(b.take_pong(0), Some(vec![9]));
        assert_eq!(b.take_pong(0), None);
        b.received(1, Some(vec![10])).unwrap();
        assert_eq!(b.take_pong(1), None, "at most PONGS_PER_SECOND a second");
        assert_eq!(b.pong_wait_ms(1), Some(499));
        assert_eq!(b.take_pong(500), Some(vec![10]));
        // The rest of the burst, then the first frame over budget is a 1008.
        let left = CONTROL_BURST - 11;
        for _ in 0..left {
            b.received(500, None).unwrap();
        }
        // 500 ms refilled 2.5 frames.
        b.received(500, None).unwrap();
        b.received(500, None).unwrap();
        let over = b.received(500, Some(vec![1])).unwrap_err();
        assert_eq!(over.close_code(), 1008);
        // A client pinging once a second is never refused.
        let mut calm = ControlBudget::new(0);
        for s in 0..1000u64 {
            calm.received(s * 1000, Some(vec![])).unwrap();
            assert!(calm.take_pong(s * 1000).is_some());
        }
    }

    #[test]
    fn close_reasons_are_cut_at_a_character() {
        let f = encode_close(4001, &"é".repeat(100));
        assert_eq!(f[0], 0x88);
        let len = usize::from(f[1]);
        assert!(len <= MAX_CONTROL_PAYLOAD);
        assert_eq!(&f[2..4], &4001u16.to_be_bytes());
        assert!(std::str::from_utf8(&f[4..]).is_ok());
    }
}
