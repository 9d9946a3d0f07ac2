#!/usr/bin/env python3
"""Checks that the docs stay true and that every pointer into them can be followed.
Run by ops/test.sh (step protocol-doc); exits 1 on any problem, naming file and line.

1. docs/PROTOCOL.md: its worked examples (string-to-sign and signature) are what ops/sign.py
   computes, and its Python snippet signs the same way.
2. No dead citation in code comments, console/portal UI text, ops scripts, benches,
   benches/RESULTS.md and the docs (every tracked text file; a citation may wrap over
   comment lines):
   - no issue number ("issue 25", "Issue #8", "#16"): an issue tracker is not in the
     repository; name the doc section or the figure instead;
   - no "§3.1"-style section number unless it is an RFC's ("RFC 9110 §5.1"): Portico's
     docs have no numbered sections;
   - `docs/X.md, "Heading"` (or `docs/X.md "Heading"`, any .md of the repository): the
     file exists and has that heading (case-insensitive; a heading's trailing
     parenthetical may be left out: "One snapshot" for "One snapshot (`gateway/src/runtime.rs`)");
   - `docs/X.md#anchor` and markdown links `[..](#anchor)`, `[..](X.md#anchor)`: the file
     exists and has a heading with that GitHub anchor.
3. docs/ARCHITECTURE.md names every source file: each `*.rs` under a crate's src/ and each
   file of admin-ui/src and admin-ui/portal. The rule (also stated in ARCHITECTURE.md,
   "How this page names files"): a file is named by its path from the repository root, or
   from a folder a heading or table row of the page gives in backticks (a heading's
   `gateway/src/` holds for its subsections; a crate row `gateway/` means `gateway/src/`),
   or by a glob in backticks (`admin-ui/src/pages/*.tsx`) that covers all its files. Every
   path the page names must exist.
"""

import hashlib
import hmac
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "ops"))
sys.dont_write_bytecode = True
import sign  # noqa: E402
import fnmatch  # noqa: E402
import subprocess  # noqa: E402

KEY, SECRET, TS = "merchant-1", "s3cr3t-value", "1796000000000"
EXAMPLES = [
    ("GET", "/v1/orders/42?b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93", "n0nce-0001", b""),
    ("POST", "/v1/orders", "n0nce-0002", b'{"item":"book","qty":2}'),
]


def protocol_problems():
    doc = open(os.path.join(ROOT, "docs", "PROTOCOL.md"), encoding="utf-8").read()
    problems = []

    # The worked examples: each string-to-sign appears as a code block, and its signature.
    blocks = re.findall(r"```\n(.*?)\n```", doc, re.S)
    for method, target, nonce, body in EXAMPLES:
        sts, headers = sign.signed_headers(method, target, KEY, SECRET, body, TS, nonce)
        if sts not in blocks:
            problems.append("no code block with the string-to-sign of %s %s" % (method, target))
        if headers["X-Portico-Signature"] not in doc:
            problems.append("signature of %s %s missing" % (method, target))

    # The Python snippet: its canonical_query and signing agree with sign.py.
    m = re.search(r"```python\n(.*?)```", doc, re.S)
    if not m:
        problems.append("no python snippet")
    else:
        code = m.group(1).split("\nprint(call(")[0]
        ns = {}
        exec(code, ns)  # defines functions only
        for method, target, nonce, body in EXAMPLES:
            query = target.partition("?")[2]
            if ns["canonical_query"](query) != sign.canonical_query(query):
                problems.append("snippet canonical_query differs for %r" % query)
        raw = "a=%zz&+=x y&&b=%2f&B=1&~=."
        if ns["canonical_query"](raw) != sign.canonical_query(raw):
            problems.append("snippet canonical_query differs for %r" % raw)
        sts = "\n".join(["GET", "/v1/orders/42", ns["canonical_query"](EXAMPLES[0][1].partition("?")[2]),
                         KEY, TS, "n0nce-0001", hashlib.sha256(b"").hexdigest()])
        sig = hmac.new(SECRET.encode(), sts.encode(), hashlib.sha256).hexdigest()
        if sig != "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73":
            problems.append("snippet signs vector 1 as %s" % sig)

    # The callback example: its string-to-sign and signature are what sign.py computes.
    cb_body = (
        b'{"id":"1796000000000-0","topic":"orders","published_at":"2026-11-30T00:53:20Z",'
        b'"payload":{"order_id":"1001","state":"paid"}}'
    )
    cb_sts = sign.callback_string_to_sign(
        "/hooks/portico", "shop=7", KEY, TS, "cb0123456789abcdef", cb_body
    )
    if ("```\n%s\n```" % cb_sts) not in doc:
        problems.append("no code block with the callback example's string-to-sign")
    if sign.signature(SECRET, cb_sts) not in doc:
        problems.append("the callback example's signature is missing")

    return ["docs/PROTOCOL.md: " + p for p in problems]



# --- dead citations --------------------------------------------------------------------------

# Text files a reader meets: code (comments, UI text), scripts, docs, benches and RESULTS.md.
SCANNED = (".rs", ".ts", ".tsx", ".html", ".css", ".py", ".sh", ".toml", ".md", ".yml", ".mjs", ".js", ".lua")
SKIPPED = ("ops/check_docs.py",)  # this file spells the patterns it looks for
ISSUE = re.compile(r"\b[Ii]ssues?\s+#?\d+\b|(?:(?<=^)|(?<=[\s(\[,;]))#\d{1,4}\b(?![0-9A-Fa-f])")
SECTION = re.compile(r"§\s*\d+(?:\.\d+)*")
RFC_BEFORE = re.compile(r"RFC\s*\d+,?\s*$")
QUOTED_CITE = re.compile(r'((?:[\w.-]+/)*[\w.-]+\.md),?\s+\\?"([^"\\\n]{1,120})\\?"')
ANCHOR_CITE = re.compile(r"((?:[\w.-]+/)*[\w.-]+\.md)#([\w-]+)")
MD_LINK = re.compile(r"\]\(([^)\s]*)\)")
COMMENT_PREFIX = {
    ".rs": re.compile(r"^\s*(?://[/!]?\s?)?"),
    ".ts": re.compile(r"^\s*(?://\s?|\*\s?|/\*+\s?|\{/\*\s?)?"),
    ".py": re.compile(r"^\s*(?:#\s?)?"),
}
for ext in (".tsx", ".js", ".mjs"):
    COMMENT_PREFIX[ext] = COMMENT_PREFIX[".ts"]
for ext in (".sh", ".toml", ".yml"):
    COMMENT_PREFIX[ext] = COMMENT_PREFIX[".py"]
COMMENT_PREFIX[".lua"] = re.compile(r"^\s*(?:--\s?)?")


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=False)
    if out.returncode == 0 and out.stdout:
        names = [n for n in out.stdout.decode().split("\0") if n]
    else:  # outside a git checkout: walk the tree
        names = []
        for d, subdirs, fs in os.walk(ROOT):
            subdirs[:] = [s for s in subdirs if s not in (".git", "target", "node_modules", ".run")]
            names += [os.path.relpath(os.path.join(d, f), ROOT) for f in fs]
    return sorted(n for n in names if os.path.isfile(os.path.join(ROOT, n)))


def read(rel):
    try:
        return open(os.path.join(ROOT, rel), encoding="utf-8").read()
    except (OSError, UnicodeDecodeError):
        return None


def flatten(rel, text):
    """The file as one line, comment markers and line-end string escapes dropped, so that a
    citation wrapped over lines reads as one; and each line's offset in it."""
    prefix = COMMENT_PREFIX.get(os.path.splitext(rel)[1])
    parts, starts, at = [], [], 0
    for line in text.split("\n"):
        if prefix is not None:
            line = prefix.sub("", line, count=1)
        line = re.sub(r"\\$", "", line.rstrip())
        starts.append(at)
        parts.append(line)
        at += len(line) + 1
    return " ".join(parts), starts


def line_of(starts, offset):
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1


def slug(heading):
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


_HEADINGS = {}


def headings(rel):
    """(names, anchors) of a markdown file's headings; None if there is no such file."""
    if rel in _HEADINGS:
        return _HEADINGS[rel]
    text = read(rel)
    if text is None:
        _HEADINGS[rel] = None
        return None
    names, anchors, seen, fence = set(), set(), {}, False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            continue
        m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        h = m.group(1)
        plain = re.sub(r"[`*]", "", h)
        names.add(plain.lower())
        names.add(re.sub(r"\s*\([^()]*\)\s*$", "", plain).lower())
        a = slug(h.replace("`", ""))
        n = seen.get(a, 0)
        seen[a] = n + 1
        anchors.add(a if n == 0 else "%s-%d" % (a, n))
    _HEADINGS[rel] = (names, anchors)
    return _HEADINGS[rel]


def resolve_md(rel, cited, names):
    """The repository path a cited .md means, relative to the citing file or the root."""
    for cand in (os.path.normpath(os.path.join(os.path.dirname(rel), cited)), os.path.normpath(cited),
                 os.path.normpath(os.path.join("docs", cited))):
        if cand in names:
            return cand
    return None


def citation_problems(files):
    problems, names = [], set(files)
    for rel in files:
        if not rel.endswith(SCANNED) or rel in SKIPPED:
            continue
        text = read(rel)
        if text is None:
            continue
        flat, starts = flatten(rel, text)

        def report(offset, what):
            problems.append("%s:%d: %s" % (rel, line_of(starts, offset), what))

        for m in ISSUE.finditer(flat):
            if rel.endswith(".css") or (m.group(0).startswith("#") and rel.endswith(".html")):
                continue
            report(m.start(), "cites %r, an issue a reader cannot open: name the doc section or figure" % m.group(0))
        for m in SECTION.finditer(flat):
            if not RFC_BEFORE.search(flat[max(0, m.start() - 20):m.start()]):
                report(m.start(), "cites %r, a numbered section of no document in the repository: "
                                  "name the section (docs/X.md, \"Heading\") or the RFC" % m.group(0))
        for m in QUOTED_CITE.finditer(flat):
            target = resolve_md(rel, m.group(1), names)
            if target is None:
                if "/" in m.group(1) or m.group(1).isupper() or m.group(1)[:-3].isupper():
                    report(m.start(), "cites %s, which does not exist" % m.group(1))
                continue
            heading = re.sub(r"\s+", " ", m.group(2)).strip().lower()
            if heading not in headings(target)[0]:
                report(m.start(), "cites %s, \"%s\": no such heading" % (target, m.group(2)))
        anchor_cites = [(m.start(), m.group(1), m.group(2)) for m in ANCHOR_CITE.finditer(flat)]
        if rel.endswith(".md"):
            for m in MD_LINK.finditer(text):
                link = m.group(1)
                if re.match(r"[a-z]+:", link) or not link:
                    continue
                path, _, anchor = link.partition("#")
                if not path:
                    target = rel
                else:
                    target = os.path.normpath(os.path.join(os.path.dirname(rel), path))
                    if not os.path.exists(os.path.join(ROOT, target)):
                        problems.append("%s:%d: links to %s, which does not exist"
                                        % (rel, text.count("\n", 0, m.start()) + 1, path))
                        continue
                if anchor and target.endswith(".md") and anchor not in headings(target)[1]:
                    problems.append("%s:%d: links to %s#%s: no such heading"
                                    % (rel, text.count("\n", 0, m.start()) + 1, target, anchor))
        for offset, cited, anchor in anchor_cites:
            target = resolve_md(rel, cited, names)
            if target is None:
                report(offset, "cites %s, which does not exist" % cited)
            elif anchor not in headings(target)[1]:
                report(offset, "cites %s#%s: no such heading" % (target, anchor))
    return problems


# --- ARCHITECTURE.md names every source file ----------------------------------------------------

UI_DIRS = ("admin-ui/src/", "admin-ui/portal/")
TREE_GLYPHS = "│├└─┬┴┼╲╱▲▼◀▶ "
PATH_TOKEN = re.compile(r"(?<![\w/.*<-])((?:[\w.-]+/)*[\w*.-]+\.(?:rs|tsx|ts|css|html|json)|(?:[\w.-]+/)+\*)(?![\w/])")
FOLDER_TOKEN = re.compile(r"`((?:[\w.-]+/)+)`")


def source_files(files):
    return [f for f in files
            if (f.endswith(".rs") and "/src/" in f and not f.startswith(("fuzz/", "target/")))
            or f.startswith(UI_DIRS)]


def architecture_problems(files):
    arch = "docs/ARCHITECTURE.md"
    text = read(arch) or ""
    names = set(files)
    crates = {f.split("/")[0] for f in files if f.count("/") == 1 and f.endswith("/Cargo.toml")}
    named, problems = set(), []
    # Folders in force: per heading level, the folders its heading gives.
    stack = []  # (level, [folders])
    fence, entry = False, ""
    rule = False  # the paragraph stating the rule gives examples, not names
    for no, line in enumerate(text.split("\n"), 1):
        if line.startswith("**How this page names files.**"):
            rule = True
        if rule:
            rule = line.strip() != ""
            continue
        if line.startswith("```"):
            fence, entry = not fence, ""
            continue
        heading = None if fence else re.match(r"(#{1,6})\s+(.*)", line)
        if heading:
            level = len(heading.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            given = FOLDER_TOKEN.findall(heading.group(2))
            given += [os.path.dirname(p) + "/" for p in re.findall(r"`((?:[\w.-]+/)+[\w.-]+\.\w+)`", heading.group(2))]
            stack.append((level, given))
            continue
        bases = [""]
        for _, folders in stack:
            bases += folders
        if line.startswith("|"):
            first = line.split("|")[1]
            bases += FOLDER_TOKEN.findall(first)
        if fence:
            # A tree: a line starting in the first column is an entry; an entry `folder/`
            # holds for the file names on its lines (the entry's and the indented ones below).
            if line[:1].strip() and line[:1] not in TREE_GLYPHS:
                first = line.split()[0]
                entry = first if first.endswith("/") else ""
            if entry:
                bases += [b + entry for b in bases]
        more = []
        for b in bases:
            if b.rstrip("/") in crates:
                more.append(b.rstrip("/") + "/src/")
            elif "/src/" in b:
                more.append(b.split("/src/")[0] + "/src/")
        bases += more
        for m in PATH_TOKEN.finditer(line):
            token = m.group(1)
            hits = set()
            for b in bases:
                cand = os.path.normpath(b + token)
                if "*" in token:
                    hits |= {f for f in files if fnmatch.fnmatch(f, cand) and "/" not in f[len(os.path.dirname(cand)) + 1:]}
                elif cand in names or os.path.exists(os.path.join(ROOT, cand)):
                    hits.add(cand)
            if not hits:
                problems.append("%s:%d: names %s, which is not a file (from %s)"
                                % (arch, no, token, ", ".join(b or "the root" for b in bases)))
            named |= hits
    for f in source_files(files):
        if f not in named:
            problems.append("%s: does not name %s (see its \"How this page names files\")" % (arch, f))
    return problems


def main() -> int:
    problems = protocol_problems()
    files = tracked_files()
    problems += citation_problems(files)
    problems += architecture_problems(files)
    for p in problems:
        print(p)
    print("check_docs: %s" % ("ok" if not problems else "%d problems" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
