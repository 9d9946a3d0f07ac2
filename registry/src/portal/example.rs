//! Example values made from a JSON Schema: what the portal shows as an API's example request
//! and answer, and what its code snippets send. The schema's own `examples`, `example`,
//! `const`, `default` and `enum` come first; otherwise a value of the right type that the
//! schema accepts (formats and the proto3 JSON patterns of [`super::schema`] included).
//! Objects get every property (one member per `oneof`), arrays one item, maps one entry.
//!
//! `$ref`s are resolved as JSON pointers into the document being built (`#/components/...`).
//! A recursive type stops where it would repeat itself; fields of type
//! `google.protobuf.Any` are left out (their `@type` would have to name a type the gateway
//! knows).

use super::schema::DURATION_PATTERN;
use serde_json::{json, Map, Value};

/// The deepest nesting of objects and arrays in an example.
const MAX_DEPTH: usize = 8;

/// An example value of `schema`; `root` is the document its `$ref`s point into. `hint` is
/// the property name it is for, if any (an `...id` string gets an id-like value).
pub fn example(schema: &Value, root: &Value, hint: Option<&str>) -> Option<Value> {
    let mut stack = Vec::new();
    make(schema, root, hint, 0, &mut stack)
}

/// The value a JSON pointer (`#/a/b`) names in `root`.
pub fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    let decoded: String = percent_decode(pointer);
    root.pointer(&decoded)
}

fn percent_decode(s: &str) -> String {
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(s).collect();
    String::from_utf8(bytes).unwrap_or_else(|_| s.to_owned())
}

/// Whether a property name is an identifier (`id`, `order_id`, `orderId`, `shop.id`).
pub fn id_like(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    last == "id" || last.ends_with("_id") || last.ends_with("Id")
}

fn make(
    schema: &Value,
    root: &Value,
    hint: Option<&str>,
    depth: usize,
    stack: &mut Vec<String>,
) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let obj = match schema {
        Value::Bool(true) => return Some(json!("example")),
        Value::Object(o) => o,
        _ => return None,
    };
    if let Some(Value::String(reference)) = obj.get("$ref") {
        if stack.iter().any(|s| s == reference) {
            return None;
        }
        let target = resolve(root, reference)?;
        if target.get("title").and_then(Value::as_str) == Some("google.protobuf.Any") {
            return None;
        }
        stack.push(reference.clone());
        let out = make(target, root, hint, depth, stack);
        stack.pop();
        return out;
    }
    if let Some(Value::Array(items)) = obj.get("examples") {
        if let Some(first) = items.first() {
            return Some(first.clone());
        }
    }
    for key in ["example", "const", "default"] {
        if let Some(v) = obj.get(key) {
            return Some(v.clone());
        }
    }
    if let Some(Value::Array(values)) = obj.get("enum") {
        let meaningful = values.iter().find(|v| {
            !v.as_str().is_some_and(|s| {
                s.ends_with("_UNSPECIFIED") || s == "NaN" || s.contains("Infinity")
            })
        });
        return meaningful.or(values.first()).cloned();
    }
    if let Some(Value::Array(parts)) = obj.get("allOf") {
        let mut merged: Option<Value> = None;
        for part in parts {
            let Some(v) = make(part, root, hint, depth, stack) else {
                continue;
            };
            merged = Some(match (merged, v) {
                (Some(Value::Object(mut a)), Value::Object(b)) => {
                    a.extend(b);
                    Value::Object(a)
                }
                (_, v) => v,
            });
        }
        if merged.is_some() {
            return merged;
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(choices)) = obj.get(key) {
            if let Some(v) = choices
                .iter()
                .find_map(|c| make(c, root, hint, depth, stack))
            {
                return Some(v);
            }
        }
    }
    let ty = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if obj.contains_key("properties") => "object",
        _ if obj.contains_key("items") => "array",
        _ => "any",
    };
    Some(match ty {
        "object" => object(obj, root, depth, stack),
        "array" => {
            let item = obj
                .get("items")
                .and_then(|items| make(items, root, hint, depth + 1, stack));
            let min = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            match item {
                Some(v) => Value::Array(vec![v; usize::try_from(min.max(1)).unwrap_or(1)]),
                None => json!([]),
            }
        }
        "string" => string(obj, hint),
        "integer" => integer(obj),
        "number" => {
            let min = obj.get("minimum").and_then(Value::as_f64);
            match min {
                Some(m) if m > 1.5 => json!(m),
                _ => json!(1.5),
            }
        }
        "boolean" => json!(true),
        "null" => Value::Null,
        // A schema that says nothing: a whole body is most likely an object.
        _ if depth == 0 && hint.is_none() => json!({}),
        _ => json!("example"),
    })
}

fn object(obj: &Map<String, Value>, root: &Value, depth: usize, stack: &mut Vec<String>) -> Value {
    let mut out = Map::new();
    // One member of each oneof (the first), as the gateway refuses two.
    let mut skipped: Vec<String> = Vec::new();
    if let Some(Value::Array(oneofs)) = obj.get("x-oneofs") {
        for oneof in oneofs {
            if let Some(Value::Array(fields)) = oneof.get("fields") {
                skipped.extend(
                    fields
                        .iter()
                        .skip(1)
                        .filter_map(Value::as_str)
                        .map(str::to_owned),
                );
            }
        }
    }
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (name, schema) in props {
            if skipped.contains(name) {
                continue;
            }
            match make(schema, root, Some(name), depth + 1, stack) {
                Some(v) => {
                    out.insert(name.clone(), v);
                }
                None if required.contains(&name.as_str()) => {
                    out.insert(name.clone(), Value::Null);
                }
                None => {}
            }
        }
    }
    if out.is_empty() {
        if let Some(extra @ Value::Object(_)) = obj.get("additionalProperties") {
            let key = match obj.get("propertyNames").and_then(|p| p.get("enum")) {
                Some(Value::Array(keys)) => keys
                    .first()
                    .and_then(Value::as_str)
                    .unwrap_or("true")
                    .to_owned(),
                _ if obj.get("propertyNames").is_some() => "1".to_owned(),
                _ => "key".to_owned(),
            };
            if let Some(v) = make(extra, root, None, depth + 1, stack) {
                out.insert(key, v);
            }
        }
    }
    Value::Object(out)
}

fn string(obj: &Map<String, Value>, hint: Option<&str>) -> Value {
    let format = obj.get("format").and_then(Value::as_str).unwrap_or("");
    let pattern = obj.get("pattern").and_then(Value::as_str).unwrap_or("");
    let text = match format {
        "date-time" => "2026-01-02T03:04:05Z",
        "date" => "2026-01-02",
        "time" => "03:04:05Z",
        "byte" => "aGVsbG8=",
        "int64" | "uint64" => "1",
        "uuid" => "123e4567-e89b-12d3-a456-426614174000",
        "email" => "merchant@example.com",
        "uri" | "url" => "https://example.com/",
        _ if obj.get("contentEncoding").and_then(Value::as_str) == Some("base64") => "aGVsbG8=",
        _ if pattern == DURATION_PATTERN => "1.5s",
        _ if pattern == "^-?[0-9]+$" || pattern == "^[0-9]+$" => "1",
        _ if hint.is_some_and(id_like) => "42",
        _ => "example",
    };
    let mut s = text.to_owned();
    let min = obj.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    while (s.chars().count() as u64) < min {
        s.push('x');
    }
    if let Some(max) = obj.get("maxLength").and_then(Value::as_u64) {
        s = s
            .chars()
            .take(usize::try_from(max).unwrap_or(usize::MAX))
            .collect();
    }
    Value::String(s)
}

fn integer(obj: &Map<String, Value>) -> Value {
    let min = obj.get("minimum").and_then(Value::as_i64);
    let max = obj.get("maximum").and_then(Value::as_i64);
    let mut v: i64 = 1;
    if let Some(m) = min {
        v = v.max(m);
    }
    if let Some(m) = obj.get("exclusiveMinimum").and_then(Value::as_i64) {
        v = v.max(m + 1);
    }
    if let Some(m) = max {
        v = v.min(m);
    }
    json!(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_follow_the_schema() {
        let root = json!({"components": {"schemas": {
            "T": {"type": "object", "properties": {
                "orderId": {"type": "string"},
                "qty": {"type": "integer", "minimum": 0},
                "total": {"type": "string", "format": "int64", "pattern": "^-?[0-9]+$"},
                "status": {"$ref": "#/components/schemas/S"},
                "at": {"type": "string", "format": "date-time"},
                "wait": {"type": "string", "pattern": DURATION_PATTERN},
                "tags": {"type": "array", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "next": {"$ref": "#/components/schemas/T"},
                "any": {"$ref": "#/components/schemas/A"},
                "a": {"type": "string"}, "b": {"type": "string"},
            }, "x-oneofs": [{"name": "choice", "fields": ["a", "b"]}]},
            "S": {"type": "string", "enum": ["S_UNSPECIFIED", "S_PAID"]},
            "A": {"title": "google.protobuf.Any", "type": "object"},
        }}});
        let v = example(&json!({"$ref": "#/components/schemas/T"}), &root, None).unwrap();
        assert_eq!(
            v,
            json!({"orderId": "42", "qty": 1, "total": "1", "status": "S_PAID",
                   "at": "2026-01-02T03:04:05Z", "wait": "1.5s", "tags": ["example"],
                   "labels": {"key": "example"}, "a": "example"})
        );
        let given = json!({"type": "object", "required": ["n"], "properties": {
            "n": {"type": "integer", "examples": [7]}, "s": {"type": "string", "minLength": 10}}});
        assert_eq!(
            example(&given, &root, None).unwrap(),
            json!({"n": 7, "s": "examplexxx"})
        );
        assert_eq!(
            resolve(&root, "#/components/schemas/S/enum/1"),
            Some(&json!("S_PAID"))
        );
    }
}
