//! Path templates: parse any text; for a template that parses, the text it displays parses
//! to the same template, its variables lie within its segments, and matching any path never
//! panics and returns one value per variable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portico_control::template::{decode_segment, encode_segment, PathTemplate, Segment};

fuzz_target!(|data: &[u8]| {
    let f = portico_fuzz::fields(data, 2);
    let (raw, path) = (&f[0], &f[1]);
    let Ok(t) = PathTemplate::parse(raw) else {
        return;
    };
    assert_eq!(PathTemplate::parse(&t.to_string()).as_ref(), Ok(&t));
    let segs = t.segments();
    if let Some(i) = segs.iter().position(|s| *s == Segment::Multi) {
        assert_eq!(i + 1, segs.len(), "'**' not last in {raw:?}");
    }
    for v in t.variables() {
        assert!(v.start < v.end && v.end <= segs.len(), "{raw:?}: {v:?}");
        assert!(t.variable(&v.field_path).is_some());
    }
    assert!(t.same_shape(&t));
    if let Some(vars) = t.match_path(path) {
        assert_eq!(vars.len(), t.variables().len());
        for ((name, value), v) in vars.iter().zip(t.variables()) {
            assert_eq!(name, &v.field_path);
            if !v.multi {
                // A single-segment value survives being sent on as one segment.
                assert_eq!(
                    decode_segment(&encode_segment(value)).as_deref(),
                    Some(value.as_str())
                );
            }
        }
    }
    let segments: Vec<&str> = path.split('/').collect();
    let _ = t.match_segments(&segments, t.verb());
    let _ = t.match_segments(&segments, None);
});
