//! `google.api.http` path templates (googleapis `google/api/http.proto`):
//!
//! ```text
//! Template = "/" Segments [ Verb ] ;
//! Segments = Segment { "/" Segment } ;
//! Segment  = "*" | "**" | LITERAL | Variable ;
//! Variable = "{" FieldPath [ "=" Segments ] "}" ;
//! FieldPath = IDENT { "." IDENT } ;
//! Verb     = ":" LITERAL ;
//! ```
//!
//! - `*` matches one segment, `**` zero or more (only as the last segment); a bare `{x}` is
//!   `{x=*}`. The template `/` (no segments) matches only the path `/`.
//! - A LITERAL is one or more RFC 3986 `pchar`s other than `*` (percent-encoding allowed); it
//!   is compared with the request segment after both are percent-decoded.
//! - The verb is split off the last segment as grpc-gateway does: after a variable (`}`) at
//!   the first `:`, otherwise at the last `:` (so `/v1/a:b:c` is literal `a:b`, verb `c`).
//! - Variable values are percent-decoded as http.proto says: a single-segment variable
//!   decodes everything; a multi-segment one (`**`, or several segments) everything except
//!   `%2F` / `%2f`, which stay as they are.
//!
//! Matching works on the RAW (still percent-encoded) path segments; a router splits the verb
//! off the last segment (see [`PathTemplate::match_path`] for the one-template version).
//!
//! Templates and rewrite paths come from configuration documents anyone with write access to
//! the tree can edit (docs/operations/config-tree.md, "The configuration tree"), so everything here works on
//! bytes, never slices a `str` inside a character, and returns an error for any input; their
//! size is bounded ([`MAX_TEMPLATE_BYTES`], [`MAX_TEMPLATE_SEGMENTS`], [`MAX_REWRITE_BYTES`]) so
//! that a document cannot make validation or routing slow.

use std::fmt;

/// The longest path template, in bytes.
pub const MAX_TEMPLATE_BYTES: usize = 4096;
/// The most segments a path template may have (variables' segments included).
pub const MAX_TEMPLATE_SEGMENTS: usize = 128;
/// The longest rewrite path of an HTTP backend, in bytes.
pub const MAX_REWRITE_BYTES: usize = 4096;

/// One segment of a template, as a router indexes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A literal segment, percent-decoded (compared with the decoded request segment).
    Literal(String),
    /// `*`: exactly one segment.
    Single,
    /// `**`: zero or more segments; only ever the last segment of a template.
    Multi,
}

/// A variable of a template: the field path it binds and the segments it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    /// The field path, e.g. `name` or `parent.name`.
    pub field_path: String,
    /// The first segment (index into [`PathTemplate::segments`]) the variable covers.
    pub start: usize,
    /// One past its last segment.
    pub end: usize,
    /// Whether its value is multi-segment (several segments, or `**`): `%2F` stays encoded
    /// when decoding, and `/` is kept when re-encoding.
    pub multi: bool,
}

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    /// The template as written.
    pub raw: String,
    segments: Vec<Segment>,
    variables: Vec<Variable>,
    verb: Option<String>,
}

/// Why a template (or a rewrite path) does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Byte offset in the template where the problem is.
    pub pos: usize,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.pos, self.problem)
    }
}

impl std::error::Error for TemplateError {}

fn err<T>(pos: usize, problem: impl Into<String>) -> Result<T, TemplateError> {
    Err(TemplateError {
        pos,
        problem: problem.into(),
    })
}

/// The character starting at byte `pos` of `raw`, for error messages (`'\u{fffd}'` when `pos`
/// is not at a character boundary or past the end: never a panic).
fn char_at(raw: &str, pos: usize) -> char {
    raw.get(pos..)
        .and_then(|rest| rest.chars().next())
        .unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// RFC 3986 `pchar` minus `%` (checked separately) and minus the template's own
/// metacharacters `* { } /`.
fn is_literal_char(c: u8) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Whether every `%` in `s` starts a valid `%XX` escape.
pub fn is_valid_percent_encoding(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            match (
                b.get(i + 1).copied().and_then(hex_val),
                b.get(i + 2).copied().and_then(hex_val),
            ) {
                (Some(_), Some(_)) => i += 3,
                _ => return false,
            }
        } else {
            i += 1;
        }
    }
    true
}

fn decode(raw: &str, keep_encoded_slash: bool) -> Option<String> {
    let b = raw.as_bytes();
    if !b.contains(&b'%') {
        return Some(raw.to_owned());
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hi = b.get(i + 1).copied().and_then(hex_val)?;
            let lo = b.get(i + 2).copied().and_then(hex_val)?;
            let byte = hi * 16 + lo;
            if byte == b'/' && keep_encoded_slash {
                out.extend_from_slice(&b[i..i + 3]);
            } else {
                out.push(byte);
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Whether the raw segment `raw` percent-decodes to `decoded`.
fn same_decoded(raw: &str, decoded: &str) -> bool {
    if raw.contains('%') {
        decode_segment(raw).as_deref() == Some(decoded)
    } else {
        raw == decoded
    }
}

/// Percent-decodes everything (single-segment rule). `None` for an invalid `%` escape or a
/// result that is not UTF-8.
pub fn decode_segment(raw: &str) -> Option<String> {
    decode(raw, false)
}

/// Percent-decodes everything except `%2F` / `%2f` (multi-segment rule). `None` as for
/// [`decode_segment`].
pub fn decode_multi(raw: &str) -> Option<String> {
    decode(raw, true)
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn encode_into(out: &mut String, value: &str, multi: bool) {
    let b = value.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let keep = c.is_ascii_alphanumeric()
            || matches!(c, b'-' | b'_' | b'.' | b'~')
            || (multi && c == b'/');
        if keep {
            out.push(char::from(c));
        } else if multi
            && c == b'%'
            && b.get(i + 1) == Some(&b'2')
            && matches!(b.get(i + 2), Some(b'F') | Some(b'f'))
        {
            // A `%2F` kept encoded by the multi-segment decoding: pass it on as it came.
            out.push_str(&value[i..i + 3]);
            i += 3;
            continue;
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(c >> 4)]));
            out.push(char::from(HEX[usize::from(c & 15)]));
        }
        i += 1;
    }
}

/// Percent-encodes a single-segment variable value: everything except `[-_.~0-9a-zA-Z]`.
pub fn encode_segment(value: &str) -> String {
    let mut s = String::with_capacity(value.len());
    encode_into(&mut s, value, false);
    s
}

/// Percent-encodes a multi-segment variable value: everything except `[-_.~/0-9a-zA-Z]`;
/// a `%2F` left encoded by [`decode_multi`] is passed on unchanged.
pub fn encode_multi(value: &str) -> String {
    let mut s = String::with_capacity(value.len());
    encode_into(&mut s, value, true);
    s
}

/// Whether `s` is a field path `IDENT { "." IDENT }`, IDENT = `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_field_path(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|id| {
            let mut cs = id.bytes();
            matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
                && cs.all(|c| c.is_ascii_alphanumeric() || c == b'_')
        })
}

struct Parser<'a> {
    raw: &'a str,
    s: &'a [u8],
    pos: usize,
    /// Where the segments end (the verb's `:`, or the end of the template).
    end: usize,
    segments: Vec<Segment>,
    variables: Vec<Variable>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        if self.pos < self.end {
            self.s.get(self.pos).copied()
        } else {
            None
        }
    }

    /// The byte at `at` if it is before the end of the segments.
    fn byte(&self, at: usize) -> Option<u8> {
        if at < self.end {
            self.s.get(at).copied()
        } else {
            None
        }
    }

    fn char_here(&self) -> char {
        char_at(self.raw, self.pos)
    }

    /// Adds a segment, refusing more than [`MAX_TEMPLATE_SEGMENTS`].
    fn push(&mut self, seg: Segment) -> Result<(), TemplateError> {
        if self.segments.len() >= MAX_TEMPLATE_SEGMENTS {
            return err(
                self.pos,
                format!("more than {MAX_TEMPLATE_SEGMENTS} segments"),
            );
        }
        self.segments.push(seg);
        Ok(())
    }

    /// Segments = Segment { "/" Segment }
    fn segments(&mut self, in_variable: bool) -> Result<(), TemplateError> {
        loop {
            self.segment(in_variable)?;
            if self.peek() == Some(b'/') {
                self.pos += 1;
            } else {
                return Ok(());
            }
        }
    }

    fn segment(&mut self, in_variable: bool) -> Result<(), TemplateError> {
        let start = self.pos;
        match self.peek() {
            None | Some(b'/') => err(start, "empty segment"),
            Some(b'}') => err(start, "empty segment before '}'"),
            Some(b'*') => {
                self.pos += 1;
                let seg = if self.peek() == Some(b'*') {
                    self.pos += 1;
                    Segment::Multi
                } else {
                    Segment::Single
                };
                match self.peek() {
                    None | Some(b'/') | Some(b'}') => self.push(seg),
                    Some(_) => err(self.pos, "'*' and '**' must be a whole segment"),
                }
            }
            Some(b'{') => {
                if in_variable {
                    return err(start, "variables cannot be nested");
                }
                self.variable()
            }
            Some(_) => {
                while let Some(c) = self.peek() {
                    if matches!(c, b'/' | b'{' | b'}' | b'*') {
                        break;
                    }
                    if c == b'%' {
                        let hex = |at: usize| self.byte(at).and_then(hex_val).is_some();
                        if !(hex(self.pos + 1) && hex(self.pos + 2)) {
                            return err(self.pos, "invalid percent-encoding");
                        }
                        self.pos += 3;
                        continue;
                    }
                    if !is_literal_char(c) {
                        return err(
                            self.pos,
                            format!(
                                "character {:?} is not allowed in a literal (percent-encode it)",
                                self.char_here()
                            ),
                        );
                    }
                    self.pos += 1;
                }
                if let Some(c) = self.peek() {
                    if c == b'{' || c == b'*' {
                        return err(
                            self.pos,
                            format!("'{}' must start a segment", char::from(c)),
                        );
                    }
                }
                // Only ASCII bytes were accepted above, so this is a whole `str`.
                let raw = self.raw.get(start..self.pos).unwrap_or_default();
                let Some(lit) = decode_segment(raw) else {
                    return err(start, "literal is not UTF-8 after percent-decoding");
                };
                if lit == "." || lit == ".." {
                    return err(start, "'.' and '..' segments are not allowed");
                }
                self.push(Segment::Literal(lit))
            }
        }
    }

    /// Variable = "{" FieldPath [ "=" Segments ] "}"
    fn variable(&mut self) -> Result<(), TemplateError> {
        let open = self.pos;
        self.pos += 1;
        let fp_start = self.pos;
        while let Some(c) = self.peek() {
            if c == b'=' || c == b'}' {
                break;
            }
            self.pos += 1;
        }
        // Cut at ASCII bytes (`{`, `=`, `}`, the end), so always at character boundaries.
        let field_path = self.raw.get(fp_start..self.pos).unwrap_or_default();
        if !is_field_path(field_path) {
            return err(
                fp_start,
                format!("{field_path:?} is not a field path (IDENT {{\".\" IDENT}})"),
            );
        }
        if self.variables.iter().any(|v| v.field_path == field_path) {
            return err(fp_start, format!("variable {field_path:?} appears twice"));
        }
        let start = self.segments.len();
        match self.peek() {
            Some(b'=') => {
                self.pos += 1;
                self.segments(true)?;
            }
            Some(b'}') => self.push(Segment::Single)?,
            _ => return err(open, "unclosed '{'"),
        }
        if self.peek() != Some(b'}') {
            return err(self.pos, "expected '}' to close the variable");
        }
        self.pos += 1;
        match self.peek() {
            None | Some(b'/') => {}
            Some(_) => return err(self.pos, "a variable must be a whole segment"),
        }
        let end = self.segments.len();
        let multi =
            end.saturating_sub(start) != 1 || self.segments.get(start) == Some(&Segment::Multi);
        self.variables.push(Variable {
            field_path: field_path.to_owned(),
            start,
            end,
            multi,
        });
        Ok(())
    }
}

/// Splits the verb off a template as grpc-gateway's tokenizer does: the last top-level token,
/// after a variable (`}`) at its first `:`, otherwise at its last `:`. Returns where the
/// segments end and the verb, percent-decoded.
fn split_verb(raw: &str) -> Result<(usize, Option<String>), TemplateError> {
    let s = raw.as_bytes();
    let mut depth = 0usize;
    let mut tail = 0;
    let mut after_var = false;
    for (i, &c) in s.iter().enumerate() {
        match c {
            b'{' => depth = depth.saturating_add(1),
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    tail = i + 1;
                    after_var = true;
                }
            }
            b'/' if depth == 0 => {
                tail = i + 1;
                after_var = false;
            }
            _ => {}
        }
    }
    // `tail` follows an ASCII `/` or `}` and the verb an ASCII `:`: whole `str`s.
    let t = raw.get(tail..).unwrap_or_default();
    let colon = if after_var { t.find(':') } else { t.rfind(':') };
    match colon {
        Some(c) => {
            let at = tail + c;
            let verb = raw.get(at + 1..).unwrap_or_default();
            if verb.is_empty() {
                return err(at, "empty verb after ':'");
            }
            for (j, b) in verb.bytes().enumerate() {
                if !(is_literal_char(b) || b == b'%') || b == b':' {
                    return err(
                        at + 1 + j,
                        format!(
                            "character {:?} is not allowed in a verb",
                            char_at(raw, at + 1 + j)
                        ),
                    );
                }
            }
            let Some(v) = decode_segment(verb).filter(|_| is_valid_percent_encoding(verb)) else {
                return err(at + 1, "invalid percent-encoding in the verb");
            };
            Ok((at, Some(v)))
        }
        None => Ok((s.len(), None)),
    }
}

impl PathTemplate {
    /// Parses a template, e.g. `/v1/{name=shelves/*/books/*}:get`.
    pub fn parse(raw: &str) -> Result<PathTemplate, TemplateError> {
        let s = raw.as_bytes();
        if s.len() > MAX_TEMPLATE_BYTES {
            return err(
                MAX_TEMPLATE_BYTES,
                format!("longer than {MAX_TEMPLATE_BYTES} bytes"),
            );
        }
        if s.first() != Some(&b'/') {
            return err(0, "a template must start with '/'");
        }
        if raw == "/" {
            return Ok(PathTemplate {
                raw: raw.to_owned(),
                segments: Vec::new(),
                variables: Vec::new(),
                verb: None,
            });
        }
        let (end, verb) = split_verb(raw)?;
        let mut p = Parser {
            raw,
            s,
            pos: 1,
            end,
            segments: Vec::new(),
            variables: Vec::new(),
        };
        p.segments(false)?;
        if p.pos != end {
            return err(p.pos, format!("unexpected {:?}", p.char_here()));
        }
        if let Some(i) = p.segments.iter().position(|g| *g == Segment::Multi) {
            if i + 1 != p.segments.len() {
                return err(1, "'**' may only be the last segment");
            }
        }
        Ok(PathTemplate {
            raw: raw.to_owned(),
            segments: p.segments,
            variables: p.variables,
            verb,
        })
    }

    /// The segments, variables flattened into them (`{x}` is a [`Segment::Single`]).
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The variables, in template order.
    pub fn variables(&self) -> &[Variable] {
        &self.variables
    }

    /// The custom verb (percent-decoded), e.g. `cancel` for `/v1/{name=*}:cancel`.
    pub fn verb(&self) -> Option<&str> {
        self.verb.as_deref()
    }

    /// The variable binding `field_path`, if any.
    pub fn variable(&self, field_path: &str) -> Option<&Variable> {
        self.variables.iter().find(|v| v.field_path == field_path)
    }

    /// Whether two templates match exactly the same paths (same segments and verb, variable
    /// names aside): `/v1/{a}` and `/v1/*` are the same shape.
    pub fn same_shape(&self, other: &PathTemplate) -> bool {
        self.segments == other.segments && self.verb == other.verb
    }

    /// Matches RAW (still percent-encoded) path segments, the verb already split off the last
    /// one, and returns the variables as (field path, decoded value), in template order.
    /// `None` if the path does not match (or a value is not UTF-8 once decoded).
    pub fn match_segments(
        &self,
        segs: &[&str],
        verb: Option<&str>,
    ) -> Option<Vec<(String, String)>> {
        match (self.verb.as_deref(), verb) {
            (None, None) => {}
            (Some(want), Some(got)) => {
                if !same_decoded(got, want) {
                    return None;
                }
            }
            _ => return None,
        }
        let multi = self.segments.last() == Some(&Segment::Multi);
        let fixed = if multi {
            self.segments.len() - 1
        } else {
            self.segments.len()
        };
        if segs.len() < fixed || (!multi && segs.len() != fixed) {
            return None;
        }
        for (seg, raw) in self.segments[..fixed].iter().zip(segs) {
            match seg {
                Segment::Literal(lit) => {
                    if !same_decoded(raw, lit) {
                        return None;
                    }
                }
                Segment::Single => {
                    if raw.is_empty() {
                        return None;
                    }
                }
                Segment::Multi => return None,
            }
        }
        let mut vars = Vec::with_capacity(self.variables.len());
        for v in &self.variables {
            let end = if v.end == self.segments.len() && multi {
                segs.len()
            } else {
                v.end
            };
            let covered = segs.get(v.start..end)?;
            let value = if v.multi {
                decode_multi(&covered.join("/"))?
            } else {
                decode_segment(covered.first()?)?
            };
            vars.push((v.field_path.clone(), value));
        }
        Some(vars)
    }

    /// Matches a whole raw path (no query): splits it into segments and, if this template
    /// has a verb, the verb off the last segment (the last segment must end with `:<verb>`).
    pub fn match_path(&self, path: &str) -> Option<Vec<(String, String)>> {
        let rest = path.strip_prefix('/')?;
        let mut segs: Vec<&str> = if rest.is_empty() {
            Vec::new()
        } else {
            rest.split('/').collect()
        };
        let verb = match &self.verb {
            None => None,
            Some(v) => {
                let last = segs.pop()?;
                let idx = last.rfind(':')?;
                let got = &last[idx + 1..];
                if !same_decoded(got, v) {
                    return None;
                }
                if idx == 0 {
                    return None;
                }
                segs.push(&last[..idx]);
                Some(got)
            }
        };
        self.match_segments(&segs, verb)
    }
}

impl fmt::Display for PathTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// An HTTP backend's rewrite path, e.g. `/internal/orders/{order_id}`: literal text with
/// `{field.path}` placeholders filled from the matched binding's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    parts: Vec<RewritePart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RewritePart {
    Text(String),
    Var(String),
}

impl Rewrite {
    /// Parses a rewrite path: it starts with `/`, its `{...}` hold field paths, and its text
    /// is RFC 3986 path characters (`pchar` and `/`, with valid `%XX` escapes; no `?`, `#`,
    /// `{`, `}`, spaces, controls or raw non-ASCII: percent-encode them). The query is passed
    /// on separately. At most [`MAX_REWRITE_BYTES`] bytes.
    pub fn parse(raw: &str) -> Result<Rewrite, TemplateError> {
        let b = raw.as_bytes();
        if b.len() > MAX_REWRITE_BYTES {
            return err(
                MAX_REWRITE_BYTES,
                format!("longer than {MAX_REWRITE_BYTES} bytes"),
            );
        }
        if b.first() != Some(&b'/') {
            return err(0, "a rewrite path must start with '/'");
        }
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut i = 0;
        while let Some(&c) = b.get(i) {
            match c {
                b'{' => {
                    let Some(close) = b[i + 1..].iter().position(|&c| c == b'}') else {
                        return err(i, "unclosed '{'");
                    };
                    // Between two ASCII bytes: a whole `str`.
                    let name = raw.get(i + 1..i + 1 + close).unwrap_or_default();
                    if !is_field_path(name) {
                        return err(i + 1, format!("{name:?} is not a field path"));
                    }
                    if !text.is_empty() {
                        parts.push(RewritePart::Text(std::mem::take(&mut text)));
                    }
                    parts.push(RewritePart::Var(name.to_owned()));
                    i += close + 2;
                }
                b'}' => return err(i, "unmatched '}'"),
                b'?' | b'#' => return err(i, "a rewrite path has no query or fragment"),
                b'%' => {
                    let hex = |at: usize| b.get(at).copied().and_then(hex_val).is_some();
                    if !(hex(i + 1) && hex(i + 2)) {
                        return err(i, "invalid percent-encoding");
                    }
                    text.push_str(raw.get(i..i + 3).unwrap_or_default());
                    i += 3;
                }
                c if c == b'/' || is_literal_char(c) => {
                    text.push(char::from(c));
                    i += 1;
                }
                c if c.is_ascii_control() || c == b' ' => {
                    return err(i, "control characters and spaces are not allowed")
                }
                _ => {
                    return err(
                        i,
                        format!(
                            "character {:?} is not allowed in a rewrite path (percent-encode it)",
                            char_at(raw, i)
                        ),
                    )
                }
            }
        }
        if !text.is_empty() {
            parts.push(RewritePart::Text(text));
        }
        Ok(Rewrite { parts })
    }

    /// The field paths it uses.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            RewritePart::Var(v) => Some(v.as_str()),
            RewritePart::Text(_) => None,
        })
    }

    /// Renders the upstream path from the variables `template` matched (as returned by
    /// [`PathTemplate::match_segments`]). Single-segment values are percent-encoded except
    /// `[-_.~0-9a-zA-Z]`; multi-segment values keep their `/` (and their still-encoded `%2F`).
    /// `Err(field)` names a placeholder with no value.
    pub fn render(
        &self,
        template: &PathTemplate,
        vars: &[(String, String)],
    ) -> Result<String, String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                RewritePart::Text(t) => out.push_str(t),
                RewritePart::Var(name) => {
                    let Some((_, value)) = vars.iter().find(|(k, _)| k == name) else {
                        return Err(name.clone());
                    };
                    let multi = template.variable(name).is_some_and(|v| v.multi);
                    encode_into(&mut out, value, multi);
                }
            }
        }
        Ok(out)
    }
}

/// Renders an HTTP backend's rewrite path (see [`Rewrite`]) in one go: parses `rewrite`,
/// then fills it from `vars`. `Err` says what is wrong (a bad rewrite, a missing variable).
pub fn render_rewrite(
    rewrite: &str,
    template: &PathTemplate,
    vars: &[(String, String)],
) -> Result<String, String> {
    let r = Rewrite::parse(rewrite).map_err(|e| format!("rewrite path {rewrite:?}: {e}"))?;
    r.render(template, vars)
        .map_err(|f| format!("rewrite path {rewrite:?}: no value for {{{f}}}"))
}

/// Renders a rewrite path from `vars` without knowing the matched template: values are
/// encoded as multi-segment ones (everything but `[-_.~/0-9a-zA-Z]`; a `/` is kept, a `%2F`
/// kept encoded by the decoding passes on as it is), so `{path=**}` forwards its segments.
/// This is only safe when no single-segment value holds a `/` (decoded from `%2F`): the
/// gateway's route stage refuses such a value for an API with a rewrite path. With the
/// matched binding's template at hand, [`render_rewrite`] encodes each kind exactly.
/// `Err` says what is wrong.
pub fn render_path(rewrite: &str, vars: &[(String, String)]) -> Result<String, String> {
    let r = Rewrite::parse(rewrite).map_err(|e| format!("rewrite path {rewrite:?}: {e}"))?;
    let mut out = String::new();
    for p in &r.parts {
        match p {
            RewritePart::Text(t) => out.push_str(t),
            RewritePart::Var(name) => {
                let Some((_, value)) = vars.iter().find(|(k, _)| k == name) else {
                    return Err(format!("rewrite path {rewrite:?}: no value for {{{name}}}"));
                };
                encode_into(&mut out, value, true);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> PathTemplate {
        PathTemplate::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn m(tpl: &str, path: &str) -> Option<Vec<(String, String)>> {
        t(tpl).match_path(path)
    }

    fn v(pairs: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
        Some(
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        )
    }

    #[test]
    fn parses_shapes() {
        let p = t("/v1/{name=shelves/*/books/*}:get");
        assert_eq!(
            p.segments(),
            &[
                Segment::Literal("v1".into()),
                Segment::Literal("shelves".into()),
                Segment::Single,
                Segment::Literal("books".into()),
                Segment::Single
            ]
        );
        assert_eq!(p.verb(), Some("get"));
        assert_eq!(
            p.variables()[0],
            Variable {
                field_path: "name".into(),
                start: 1,
                end: 5,
                multi: true
            }
        );
        let p = t("/v1/{x}");
        assert_eq!(
            p.segments(),
            &[Segment::Literal("v1".into()), Segment::Single]
        );
        assert!(!p.variables()[0].multi);
        assert!(t("/v1/{x=**}").variables()[0].multi);
        assert!(t("/v1/{x}").same_shape(&t("/v1/*")));
        assert!(!t("/v1/{x}").same_shape(&t("/v1/{x}:do")));
        assert_eq!(t("/").segments(), &[]);
        assert_eq!(t("/v1/a:b:c").segments()[1], Segment::Literal("a:b".into()));
        assert_eq!(t("/v1/a:b:c").verb(), Some("c"));
        assert_eq!(t("/v1/a%20b").segments()[1], Segment::Literal("a b".into()));
        assert_eq!(t("/v1/**:undelete").verb(), Some("undelete"));
    }

    #[test]
    fn rejects_bad_templates() {
        for bad in [
            "",
            "v1/x",
            "/v1//x",
            "/v1/",
            "/v1/**/x",
            "/v1/{a=**}/x",
            "/v1/{a}/{a}",
            "/v1/{a={b}}",
            "/v1/{a",
            "/v1/{}",
            "/v1/{1a}",
            "/v1/{a.}",
            "/v1/a*",
            "/v1/*a",
            "/v1/x{a}",
            "/v1/{a}x",
            "/v1/{a}:",
            "/v1/%zz",
            "/v1/a b",
            "/v1/..",
            "/v1/%2e",
            "/v1/x}",
            "/v1/:verb",
            "/v1/{a=}",
        ] {
            assert!(
                PathTemplate::parse(bad).is_err(),
                "{bad:?} should not parse"
            );
        }
        let e = PathTemplate::parse("/v1/**/x").unwrap_err();
        assert!(e.problem.contains("last"), "{e}");
        let e = PathTemplate::parse("/v1/{a").unwrap_err();
        assert_eq!(e.pos, 4, "{e}");
    }

    #[test]
    fn literal() {
        assert_eq!(m("/v1/orders", "/v1/orders"), v(&[]));
        assert_eq!(m("/v1/orders", "/v1/orders/1"), None);
        assert_eq!(m("/v1/orders", "/v1/order"), None);
        assert_eq!(m("/v1/orders", "/v1"), None);
        assert_eq!(m("/", "/"), v(&[]));
        assert_eq!(m("/", "/x"), None);
        // literals compare decoded
        assert_eq!(m("/v1/orders", "/v1/%6Frders"), v(&[]));
        assert_eq!(m("/v1/a%20b", "/v1/a b"), v(&[]));
        assert_eq!(m("/v1/a%20b", "/v1/a%20b"), v(&[]));
    }

    #[test]
    fn single_and_field() {
        assert_eq!(m("/v1/*/x", "/v1/a/x"), v(&[]));
        assert_eq!(m("/v1/*/x", "/v1/a/b/x"), None);
        assert_eq!(
            m("/v1/orders/{order_id}", "/v1/orders/42"),
            v(&[("order_id", "42")])
        );
        assert_eq!(m("/v1/orders/{order_id}", "/v1/orders/"), None);
        assert_eq!(
            m("/v1/{parent.name}/items/{item.id}", "/v1/p1/items/i2"),
            v(&[("parent.name", "p1"), ("item.id", "i2")])
        );
    }

    #[test]
    fn multi() {
        assert_eq!(m("/v1/**", "/v1/a/b/c"), v(&[]));
        assert_eq!(m("/v1/**", "/v1"), v(&[]));
        assert_eq!(m("/v1/{path=**}", "/v1/a/b/c"), v(&[("path", "a/b/c")]));
        assert_eq!(m("/v1/{path=**}", "/v1"), v(&[("path", "")]));
        assert_eq!(
            m("/v1/{name=shelves/**}", "/v1/shelves/1/x"),
            v(&[("name", "shelves/1/x")])
        );
        assert_eq!(m("/v1/{name=shelves/**}", "/v1/books/1"), None);
    }

    #[test]
    fn nested_segments() {
        assert_eq!(
            m("/v1/{name=messages/*}", "/v1/messages/123"),
            v(&[("name", "messages/123")])
        );
        assert_eq!(m("/v1/{name=messages/*}", "/v1/messages"), None);
        assert_eq!(m("/v1/{name=messages/*}", "/v1/other/123"), None);
        let tpl = "/v1/{name=shelves/*/books/*}";
        assert_eq!(
            m(tpl, "/v1/shelves/s1/books/b2"),
            v(&[("name", "shelves/s1/books/b2")])
        );
        assert_eq!(m(tpl, "/v1/shelves/s1/books"), None);
        assert_eq!(m(tpl, "/v1/shelves/s1/cds/b2"), None);
        assert_eq!(m(tpl, "/v1/shelves/s1/books/b2/x"), None);
        assert_eq!(
            m(
                "/v1/{parent=shelves/*}/books/{book}",
                "/v1/shelves/s1/books/b2"
            ),
            v(&[("parent", "shelves/s1"), ("book", "b2")])
        );
    }

    #[test]
    fn custom_verb() {
        assert_eq!(
            m("/v1/{name=*}:cancel", "/v1/abc:cancel"),
            v(&[("name", "abc")])
        );
        assert_eq!(
            m("/v1/{name}:cancel", "/v1/abc:cancel"),
            v(&[("name", "abc")])
        );
        assert_eq!(m("/v1/{name=*}:cancel", "/v1/abc"), None);
        assert_eq!(m("/v1/{name=*}:cancel", "/v1/abc:other"), None);
        assert_eq!(m("/v1/{name=*}:cancel", "/v1/:cancel"), None);
        // without a verb in the template, the colon is part of the value (grpc-gateway)
        assert_eq!(
            m("/v1/{name}", "/v1/abc:cancel"),
            v(&[("name", "abc:cancel")])
        );
        assert_eq!(
            m("/v1/{name=**}:undelete", "/v1/a/b:undelete"),
            v(&[("name", "a/b")])
        );
        assert_eq!(m("/v1/a:b:c", "/v1/a:b:c"), v(&[]));
        assert_eq!(m("/v1/tasks:batchGet", "/v1/tasks:batchGet"), v(&[]));
        let p = t("/v1/{name}:cancel");
        assert_eq!(
            p.match_segments(&["v1", "x"], Some("cancel")),
            v(&[("name", "x")])
        );
        assert_eq!(p.match_segments(&["v1", "x"], None), None);
        assert_eq!(
            t("/v1/{name}").match_segments(&["v1", "x"], Some("cancel")),
            None
        );
    }

    #[test]
    fn percent_decoding() {
        // single-segment: everything decoded, %2F too
        assert_eq!(m("/v1/{id}", "/v1/a%2Fb%20c"), v(&[("id", "a/b c")]));
        assert_eq!(m("/v1/{id}", "/v1/%E2%9C%93"), v(&[("id", "\u{2713}")]));
        // multi-segment: %2F / %2f stay as they are
        assert_eq!(
            m("/v1/{p=**}", "/v1/a%2Fb/c%2fd%20e"),
            v(&[("p", "a%2Fb/c%2fd e")])
        );
        assert_eq!(
            m("/v1/{n=shelves/*}", "/v1/shelves/x%2Fy"),
            v(&[("n", "shelves/x%2Fy")])
        );
        // bad escapes and non-UTF-8 do not match
        assert_eq!(m("/v1/{id}", "/v1/%zz"), None);
        assert_eq!(m("/v1/{id}", "/v1/%ff"), None);
        // an encoded slash never splits a segment
        assert_eq!(m("/v1/a/b", "/v1/a%2Fb"), None);
    }

    #[test]
    fn non_matches() {
        assert_eq!(m("/v1/orders/{id}", "/v2/orders/1"), None);
        assert_eq!(m("/v1/orders/{id}", "v1/orders/1"), None);
        assert_eq!(m("/v1/orders/{id}", "/v1/orders/1/2"), None);
        assert_eq!(m("/v1/orders/{id}:x", "/v1/orders/1:y"), None);
    }

    #[test]
    fn decode_and_encode_helpers() {
        assert_eq!(decode_segment("a%2Fb"), Some("a/b".into()));
        assert_eq!(decode_multi("a%2Fb%2fc%41"), Some("a%2Fb%2fcA".into()));
        assert_eq!(decode_segment("%"), None);
        assert_eq!(decode_segment("%4"), None);
        assert!(is_valid_percent_encoding("a%20b"));
        assert!(!is_valid_percent_encoding("a%2"));
        assert_eq!(encode_segment("a/b c~"), "a%2Fb%20c~");
        assert_eq!(encode_multi("a/b c%2Fd"), "a/b%20c%2Fd");
        assert!(is_field_path("a.b_c.D1"));
        assert!(!is_field_path("a..b"));
        assert!(!is_field_path(""));
    }

    #[test]
    fn rewrite() {
        let tpl = t("/v1/orders/{order_id}/{rest=**}");
        let vars = tpl.match_path("/v1/orders/a%2Fb%20c/x/y%2Fz").unwrap();
        assert_eq!(
            render_rewrite("/internal/{order_id}/{rest}", &tpl, &vars),
            Ok("/internal/a%2Fb%20c/x/y%2Fz".to_owned())
        );
        assert_eq!(
            render_rewrite("/internal/static", &tpl, &vars),
            Ok("/internal/static".to_owned())
        );
        assert!(render_rewrite("/internal/{nope}", &tpl, &vars).is_err());
        assert_eq!(
            render_path("/internal/{order_id}/{rest}", &vars),
            Ok("/internal/a/b%20c/x/y%2Fz".to_owned())
        );
        assert!(render_path("/internal/{nope}", &vars).is_err());
        assert!(Rewrite::parse("internal").is_err());
        assert!(Rewrite::parse("/x/{a").is_err());
        assert!(Rewrite::parse("/x?y=1").is_err());
        let r = Rewrite::parse("/a/{x.y}/b/{z}").unwrap();
        assert_eq!(r.fields().collect::<Vec<_>>(), vec!["x.y", "z"]);
    }

    /// `"/x/%€{id}"` sliced the `str` inside `€` and panicked the control thread
    /// (a bad document is rejected alone: docs/ARCHITECTURE.md, "Configuration").
    #[test]
    fn rewrite_with_non_ascii_is_an_error_not_a_panic() {
        for bad in [
            "/x/%€{id}",
            "/x/%€",
            "/x/%2€",
            "/x/€",
            "/x/{id}€",
            "/x/%",
            "/x/%4",
            "/€{",
            "/x/{€}",
            "/x/{id€}",
            "/x/a b",
            "/x/\u{7f}",
            "/x/\"",
            "/x/<a>",
        ] {
            assert!(Rewrite::parse(bad).is_err(), "{bad:?} should not parse");
            assert!(render_path(bad, &[]).is_err());
        }
        let e = Rewrite::parse("/x/%€{id}").unwrap_err();
        assert_eq!(e.pos, 3, "{e}");
        let e = Rewrite::parse("/x/€").unwrap_err();
        assert!(e.problem.contains('€'), "{e}");
        // Encoded, it is fine.
        let r = Rewrite::parse("/x/%E2%82%AC/{id}:do;a=b@c").unwrap();
        assert_eq!(r.fields().collect::<Vec<_>>(), vec!["id"]);
        assert_eq!(
            render_path("/x/%E2%82%AC/{id}", &[("id".into(), "€".into())]),
            Ok("/x/%E2%82%AC/%E2%82%AC".to_owned())
        );
        assert!(Rewrite::parse(&format!("/{}", "a".repeat(MAX_REWRITE_BYTES))).is_err());
    }

    #[test]
    fn template_errors_name_whole_characters() {
        for bad in [
            "/v1/€",
            "/v1/x%€",
            "/€",
            "/v1/{€}",
            "/v1/{a=€}",
            "/v1/x:€",
            "/v1/{a}:v€",
        ] {
            let e = PathTemplate::parse(bad).unwrap_err();
            assert!(e.pos <= bad.len(), "{bad:?}: {e}");
        }
        let e = PathTemplate::parse("/v1/a€").unwrap_err();
        assert!(e.problem.contains('€'), "{e}");
        let e = PathTemplate::parse("/v1/{a}:v€").unwrap_err();
        assert!(e.problem.contains('€'), "{e}");
        assert!(PathTemplate::parse("/v1/%E2%82%AC").is_ok());
    }

    #[test]
    fn template_size_is_bounded() {
        let many = "/a".repeat(MAX_TEMPLATE_SEGMENTS);
        assert_eq!(t(&many).segments().len(), MAX_TEMPLATE_SEGMENTS);
        let e = PathTemplate::parse(&format!("{many}/a")).unwrap_err();
        assert!(e.problem.contains("segments"), "{e}");
        // 10,000 segments: refused quickly, by length.
        let huge = "/a".repeat(10_000);
        let e = PathTemplate::parse(&huge).unwrap_err();
        assert!(e.problem.contains("longer"), "{e}");
        // Variables count their segments.
        let vars: String = (0..MAX_TEMPLATE_SEGMENTS)
            .map(|i| format!("/{{v{i}}}"))
            .collect();
        assert!(PathTemplate::parse(&vars).is_ok());
        let nested = format!("/{{a={}}}", vec!["*"; MAX_TEMPLATE_SEGMENTS + 1].join("/"));
        assert!(PathTemplate::parse(&nested).is_err());
        // Unbalanced braces never underflow the depth count.
        assert!(PathTemplate::parse("/}}}:x").is_err());
        assert!(PathTemplate::parse("/{{{").is_err());
    }
}
