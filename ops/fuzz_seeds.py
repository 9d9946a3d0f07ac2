#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets (fuzz/fuzz_targets/*.rs) from the example tree
ops/examples/standalone and the worked examples of docs/PROTOCOL.md, into
fuzz/corpus/<target>/seed-<sha1>. Idempotent: a seed's name is its content's hash.

    python3 ops/fuzz_seeds.py TARGET...

The input formats are those of fuzz/src/lib.rs: fields separated by line feeds; a snapshot
input is records (0x1e) of `path 0x1f bytes`, a descriptor path `descriptors/#` being renamed
to the SHA-256 of its bytes. A target without seeds here starts from libFuzzer's own inputs.
"""

import hashlib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "ops", "examples", "standalone")
RECORD, UNIT = b"\x1e", b"\x1f"


def example_docs():
    """(tree path, bytes) of every document of the example tree."""
    docs = []
    for dirpath, _, files in os.walk(EXAMPLE):
        for f in sorted(files):
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, EXAMPLE)
            path, _ = os.path.splitext(rel)
            with open(full, "rb") as fh:
                docs.append((path, fh.read()))
    return sorted(docs)


def apis():
    for path, data in example_docs():
        if path.startswith("apis/"):
            yield json.loads(data)


def sample_path(template):
    """A request path a template matches: variables filled with `x`, `**` with `a/b`."""
    path = re.sub(r"\{[^}=]+=([^}]*)\}", lambda m: m.group(1), template)
    path = re.sub(r"\{[^}]+\}", "x", path)
    return path.replace("**", "a/b").replace("*", "x")


def bindings(api):
    http = api["http"]
    yield http["path"]
    for b in http.get("additional_bindings", []):
        yield b["path"]


def seeds(target):
    if target == "template":
        for api in apis():
            for t in bindings(api):
                yield f"{t}\n{sample_path(t)}".encode()
        yield b"/v1/{name=shelves/*/books/*}:get\n/v1/shelves/s1/books/b%2F2:get"
        yield b"/v1/a%20b/{p=**}:undelete\n/v1/a b/x/y%2Fz:undelete"
    elif target == "rewrite":
        for api in apis():
            rewrite = (api["backend"].get("http") or {}).get("path")
            if rewrite:
                t = api["http"]["path"]
                yield f"{rewrite}\n{t}\n{sample_path(t)}\nv%2F\u20ac".encode()
        yield "/x/%E2%82%AC/{id}\n/v1/{id}\n/v1/%E2%9C%93\n\u20ac".encode()
    elif target == "sign":
        yield (b"b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93\nGET\n/v1/orders/42\n"
               b"merchant-1\n1796000000000\nn0nce-0001\ns3cr3t-value\n")
        yield (b"\nPOST\n/v1/orders\nmerchant-1\n1796000000000\nn0nce-0002\ns3cr3t-value\n"
               b'{"item":"book","qty":2}')
        yield b"a=%zz&b=%&c=%4&n=\xe2\x9c\x93&flag&=v\nget\n/p\nk\n1\nnnnnnnnn\nx\nzz"
    elif target == "snapshot":
        docs = [(("descriptors/#" if p.startswith("descriptors/") else p), b)
                for p, b in example_docs()]
        yield RECORD.join(p.encode() + UNIT + b for p, b in docs)
        for p, b in docs:
            yield p.encode() + UNIT + b
    elif target == "wsframe":
        # A read size, then masked client frames: an ack, a resume, a ping, a fragmented
        # text message, a close.
        def frame(fin, op, payload, mask=b"\x01\x02\x03\x04"):
            head = bytes([(0x80 if fin else 0) | op])
            n = len(payload)
            if n < 126:
                head += bytes([0x80 | n])
            else:
                head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
            return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        yield b"\x07" + frame(True, 1, b'{"type":"ack","ids":["1796000000000-0"]}')
        yield b"\x03" + frame(True, 1, b'{"type":"resume","after":"1796000000000-0"}')
        yield b"\x01" + frame(True, 9, b"hi") + frame(True, 8, b"\x03\xe8bye")
        yield b"\x05" + frame(False, 1, b"Hel") + frame(True, 10, b"") + frame(True, 0, b"lo")
        yield b"\x40" + frame(True, 1, b"x" * 300)
        # The control path: a ping flood (pauses read from the tail: 0 ms), then pings and
        # pongs a second apart.
        yield b"\x02" + b"".join(frame(True, 9, bytes([i])) for i in range(80)) + b"\x00" * 80
        yield b"\x01" + b"".join(frame(True, 9 + i % 2, b"p") for i in range(20)) + b"\xff" * 20
    elif target == "transcode":
        # Byte 0: bit 0 = direction (0 request JSON, 1 reply protobuf), the rest = the type
        # (fuzz/fuzz_targets/transcode.rs: Everything, Scalars, Legacy, Struct, Timestamp).
        everything, scalars, legacy, struct, timestamp = (bytes([2 * i]) for i in range(5))
        yield everything + json.dumps({
            "scalars": {"fInt32": -1, "fInt64": "9007199254740993", "fDouble": "NaN",
                        "fString": "h\u00e9\"llo", "fBytes": "AAEC/w==", "fEnum": "GREEN"},
            "maybeInt": 0, "choiceText": "", "ints": [1, "2", 3.0], "colours": ["RED", 2],
            "labels": {"a": "b"}, "colourById": {"-1": "BLUE"}, "byFlag": {"true": 1.5},
            "next": {"next": {"names": ["x"]}}, "at": "2026-01-02T03:04:05.1Z",
            "took": "1.5s", "attributes": {"k": [1, None, {"z": True}]}, "anything": "v",
            "wInt64": "5", "mask": "a.bC", "fieldWithAHighNumber": 7}).encode()
        yield scalars + b'{"f_int32": "42", "fUint64": 1e3, "fFloat": "-Infinity", "fBool": false}'
        yield legacy + b'{"count": 0, "on": true, "packed": [1, 2], "unpacked": [3]}'
        yield struct + b'{"a": [1, "x", null, {"b": {}}], "c": 2.5}'
        yield timestamp + b'"2026-11-30T10:00:00.000001Z"'
        # Replies: Scalars {fInt32: 1, fString: "x", fEnum: 1}; Everything {scalars: that,
        # ints: [1, 2] packed, labels {k: v}, at {seconds: 1}}; a Struct {a: 1.0}.
        s = b"\x18\x01\x72\x01x\x80\x01\x01"
        yield bytes([3]) + s
        yield (bytes([1]) + b"\x0a" + bytes([len(s)]) + s + b"\x42\x02\x01\x02"
               + b"\x8a\x01\x06\x0a\x01k\x12\x01v" + b"\xc2\x01\x02\x08\x01")
        yield bytes([7]) + b"\x0a\x0e\x0a\x01a\x12\x09\x11" + b"\x00" * 6 + b"\xf0\x3f"
        yield bytes([9]) + b"\x08\x80\xa3\x8a\xcc\x06\x10\x01"
    elif target == "cache_key":
        # Two keys as the cache stage writes them (binding, app, path, query, a selector),
        # then the separator forgery (docs/SECURITY.md, "Trust between merchants") and
        # a long key.
        yield (b"b0\x00amerchant-1\x00p/v1/acct/ACC-1\x00qfields=all\x00sACC-1\xff"
               b"b0\x00amerchant-3\x00p/v1/acct/ACC-1\x00q\x00sACC-1")
        yield b"qa\x1fb\x00sc\xffqa\x00sb\x1fc"
        yield b"q" + b"x" * 300 + b"\xffq" + b"y" * 10
    # A target added later gets its seeds here.


def main():
    for target in sys.argv[1:]:
        out = os.path.join(ROOT, "fuzz", "corpus", target)
        os.makedirs(out, exist_ok=True)
        n = 0
        for seed in seeds(target):
            name = "seed-" + hashlib.sha1(seed).hexdigest()
            path = os.path.join(out, name)
            if not os.path.exists(path):
                with open(path, "wb") as fh:
                    fh.write(seed)
            n += 1
        print(f"{target}: {n} seeds in {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main()
