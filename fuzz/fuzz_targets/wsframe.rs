//! The WebSocket frame decoder of `/notify/v1/ws` (gateway/src/notify/wsframe.rs, included
//! as it is: it is standard library only): any client bytes never panic and never grow the
//! decoder past its bound; how the bytes are split across reads does not change what is
//! decoded; every text message decoded decodes again from its own re-encoding.
//!
//! The control path too (`ControlBudget`): the control frames decoded, spaced in time by the
//! input's bytes, never admit more than the burst plus the rate over the time passed, never
//! cost more pong writes than the pong rate allows, each pong answers the latest ping, and
//! a client within the rate (a control frame every 200 ms or slower) is never refused.
#![no_main]

#[allow(dead_code)]
#[path = "../../gateway/src/notify/wsframe.rs"]
mod wsframe;

use libfuzzer_sys::fuzz_target;
use wsframe::{ControlBudget, Decoder, Message, Violation};

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
                let again =
                    wsframe::encode_masked(true, wsframe::OP_TEXT, t.as_bytes(), [9, 8, 7, 6]);
                assert_eq!(decode(&[&again]), (vec![m.clone()], None));
            }
            Message::Ping(p) => assert!(p.len() <= wsframe::MAX_CONTROL_PAYLOAD),
            _ => {}
        }
    }
    if let Some(v) = whole.1 {
        assert!(matches!(v.close_code(), 1002 | 1007 | 1009));
    }
    control(&whole.0, bytes);
});

/// Drives a `ControlBudget` with the pings and pongs of `messages`, the i-th arriving after
/// a pause read from the input's i-th byte from the end: 0-15 ms (a flood) when its high
/// bit is clear, else 0-1016 ms.
fn control(messages: &[Message], bytes: &[u8]) {
    let mut budget = ControlBudget::new(0);
    let (mut now, mut accepted, mut pongs) = (0u64, 0u64, 0u64);
    let mut latest: Option<Vec<u8>> = None;
    let mut calm = true;
    let gap_ms = 1000 / wsframe::CONTROL_PER_SECOND;
    for (i, m) in messages.iter().enumerate() {
        let ping = match m {
            Message::Ping(p) => Some(p.clone()),
            Message::Pong => None,
            _ => continue,
        };
        let b = bytes
            .len()
            .checked_sub(1 + i % bytes.len().max(1))
            .and_then(|j| bytes.get(j))
            .copied()
            .unwrap_or(0);
        let step = if b & 0x80 != 0 {
            u64::from(b & 0x7f) * 8
        } else {
            u64::from(b & 0x0f)
        };
        calm &= accepted == 0 || step >= gap_ms;
        now += step;
        match budget.received(now, ping.clone()) {
            Ok(()) => {
                accepted += 1;
                if ping.is_some() {
                    latest = ping;
                }
            }
            Err(v) => {
                assert_eq!(v.close_code(), 1008);
                assert!(!calm, "a client within the rate was refused");
                break;
            }
        }
        assert!(
            accepted <= wsframe::CONTROL_BURST + now * wsframe::CONTROL_PER_SECOND / 1000 + 1,
            "{accepted} control frames admitted in {now} ms"
        );
        if let Some(p) = budget.take_pong(now) {
            pongs += 1;
            assert_eq!(Some(&p), latest.as_ref(), "a pong answers the latest ping");
        }
        assert!(pongs <= 1 + now * wsframe::PONGS_PER_SECOND / 1000);
    }
    // A ping left unanswered is answered once the pong rate allows.
    if let Some(wait) = budget.pong_wait_ms(now) {
        assert!(wait <= 1000 / wsframe::PONGS_PER_SECOND);
        assert_eq!(budget.take_pong(now + wait).as_ref(), latest.as_ref());
    }
}
