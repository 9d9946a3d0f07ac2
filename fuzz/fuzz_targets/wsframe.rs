//! The WebSocket frame decoder of `/notify/v1/ws` (gateway/src/notify/wsframe.rs, included
//! as it is: it is standard library only): any client bytes never panic and never grow the
//! decoder past its bound; how the bytes are split across reads does not change what is
//! decoded; every text message decoded decodes again from its own re-encoding.
#![no_main]

#[allow(dead_code)]
#[path = "../../gateway/src/notify/wsframe.rs"]
mod wsframe;

use libfuzzer_sys::fuzz_target;
use wsframe::{Decoder, Message, Violation};

const MAX: usize = 1024;

/// Every message until the bytes run out or a violation.
fn decode(chunks: &[&[u8]]) -> (Vec<Message>, Option<Violation>) {
    let mut d = Decoder::new(MAX);
    let mut out = Vec::new();
    for c in chunks {
        d.feed(c);
        loop {
            match d.next_message() {
                Ok(Some(m)) => out.push(m),
                Ok(None) => break,
                Err(v) => return (out, Some(v)),
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, bytes)) = data.split_first() else {
        return;
    };
    let whole = decode(&[bytes]);
    let step = usize::from(step).max(1);
    let chunks: Vec<&[u8]> = bytes.chunks(step).collect();
    assert_eq!(decode(&chunks), whole, "split every {step} bytes");
    for m in &whole.0 {
        match m {
            Message::Text(t) => {
                assert!(t.len() <= MAX);
                let again = wsframe::encode_masked(true, wsframe::OP_TEXT, t.as_bytes(), [9, 8, 7, 6]);
                assert_eq!(decode(&[&again]), (vec![m.clone()], None));
            }
            Message::Ping(p) => assert!(p.len() <= wsframe::MAX_CONTROL_PAYLOAD),
            _ => {}
        }
    }
    if let Some(v) = whole.1 {
        assert!(matches!(v.close_code(), 1002 | 1007 | 1009));
    }
});
