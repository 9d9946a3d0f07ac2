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
    # A target added later (e.g. JSON->protobuf transcoding) gets its seeds here.


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
