//! A binding's path as OpenAPI has it: the templated path (`/v1/{name}`, wildcards named),
//! its path parameters (a pattern and an example each), and the example path the portal's
//! example request is sent to.

use crate::portal::example::{example, id_like};
use portico_control::template::{encode_multi, encode_segment, PathTemplate, Segment};
use serde_json::{json, Value};

/// Whether variable `v` covers exactly one `*` segment (a plain `{x}`).
pub(super) fn is_single(template: &PathTemplate, v: &portico_control::template::Variable) -> bool {
    v.end == v.start + 1 && template.segments().get(v.start) == Some(&Segment::Single)
}

/// A multi-segment variable (`{name=shops/*/products/*}`, `{path=**}`): a pattern and an
/// example that fits it (`shops/s1/products/p1`).
pub(super) fn multi_segment(
    template: &PathTemplate,
    v: &portico_control::template::Variable,
) -> (Value, String) {
    let segs = template.segments().get(v.start..v.end).unwrap_or(&[]);
    let mut pattern = Vec::new();
    let mut example = Vec::new();
    let mut previous = String::new();
    for seg in segs {
        match seg {
            Segment::Literal(l) => {
                pattern.push(regex_escape(l));
                example.push(l.clone());
                previous = l.clone();
            }
            Segment::Single => {
                pattern.push("[^/]+".to_owned());
                let initial = previous.chars().next().unwrap_or('x');
                example.push(format!("{initial}1"));
            }
            Segment::Multi => {
                pattern.push(".*".to_owned());
                example.push("a/b.txt".to_owned());
            }
        }
    }
    // A trailing `**` variable covers every remaining segment (possibly none).
    if segs.is_empty() && template.segments().last() == Some(&Segment::Multi) {
        pattern.push(".*".to_owned());
        example.push("a/b.txt".to_owned());
    }
    let schema = json!({
        "type": "string",
        "pattern": format!("^{}$", pattern.join("/")),
    });
    (schema, example.join("/"))
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The example text of a single-segment value of `schema`.
pub(super) fn text_example(schema: &Value, field_path: &str) -> String {
    let root = json!({});
    match example(schema, &root, Some(field_path)) {
        Some(Value::String(s)) if s == "example" && id_like(field_path) => "42".to_owned(),
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => "42".to_owned(),
        Some(v) => v.to_string(),
    }
}

pub(super) fn path_parameter(
    name: &str,
    schema: Value,
    example: &str,
    proto_type: Option<String>,
) -> Value {
    let multi = schema
        .get("pattern")
        .is_some_and(|p| p.as_str().is_some_and(|p| p.contains('/')));
    let mut description = match &proto_type {
        Some(t) => format!("Path variable: field `{name}` ({t})."),
        None => format!("Path variable `{name}`."),
    };
    if multi {
        description.push_str(" It spans several path segments: send its `/` as they are.");
    }
    json!({
        "name": name,
        "in": "path",
        "required": true,
        "description": description,
        "schema": schema,
        "example": example,
    })
}

pub(super) fn wildcard_parameter(name: &String) -> Value {
    json!({
        "name": name,
        "in": "path",
        "required": true,
        "description": "Any path segment(s) here (a wildcard of the path template; not passed to the backend).",
        "schema": {"type": "string"},
        "example": "x",
    })
}

/// The OpenAPI path of a template (`/v1/{name=shops/*}/x` → `/v1/{name}/x`, bare `*` and `**`
/// → `{wildcard1}`, ...), and the wildcard parameter names.
pub(super) fn openapi_path(template: &PathTemplate) -> (String, Vec<String>) {
    let segs = template.segments();
    let mut out = String::new();
    let mut wildcards = Vec::new();
    let mut i = 0;
    while i < segs.len() {
        out.push('/');
        if let Some(v) = template.variables().iter().find(|v| v.start == i) {
            out.push_str(&format!("{{{}}}", v.field_path));
            i = v.end.max(i + 1);
            continue;
        }
        match &segs[i] {
            Segment::Literal(l) => out.push_str(&encode_segment(l)),
            Segment::Single | Segment::Multi => {
                let name = format!("wildcard{}", wildcards.len() + 1);
                out.push_str(&format!("{{{name}}}"));
                wildcards.push(name);
            }
        }
        i += 1;
    }
    // A `{x=**}` variable at the end that matched no segment in the list still shows.
    for v in template.variables() {
        if v.start >= segs.len() {
            out.push_str(&format!("/{{{}}}", v.field_path));
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    if let Some(verb) = template.verb() {
        out.push(':');
        out.push_str(&encode_segment(verb));
    }
    (out, wildcards)
}

/// The example path of a template, its variables filled from `values` (decoded).
pub(super) fn example_path(template: &PathTemplate, values: &[(String, String)]) -> String {
    let segs = template.segments();
    let mut out = String::new();
    let mut i = 0;
    let value_of = |name: &str| {
        values
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| "x".to_owned())
    };
    while i < segs.len() {
        out.push('/');
        if let Some(v) = template.variables().iter().find(|v| v.start == i) {
            let value = value_of(&v.field_path);
            out.push_str(&if v.multi {
                encode_multi(&value)
            } else {
                encode_segment(&value)
            });
            i = v.end.max(i + 1);
            continue;
        }
        match &segs[i] {
            Segment::Literal(l) => out.push_str(&encode_segment(l)),
            Segment::Single | Segment::Multi => out.push('x'),
        }
        i += 1;
    }
    for v in template.variables() {
        if v.start >= segs.len() {
            out.push('/');
            out.push_str(&encode_multi(&value_of(&v.field_path)));
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    if let Some(verb) = template.verb() {
        out.push(':');
        out.push_str(&encode_segment(verb));
    }
    out
}
