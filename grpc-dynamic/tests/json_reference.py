"""The reference side of grpc-dynamic's JSON conformance test (tests/json_conformance.rs):
protobuf's own proto3 JSON mapping, google.protobuf.json_format, over stdin/stdout.

One JSON object a line in, one a line out, in order:

  {"fds": <base64 FileDescriptorSet>}                     -> {"ok": true}
      the test's types, added to the default pool (the well-known types are already
      there, so Any can name any of them)
  {"op": "reply", "type": T, "bin": <base64>}             -> {"ok": true, "json": <text>}
      MessageToJson of the binary message, with the gateway's options (the defaults:
      lowerCamelCase names, unpopulated fields left out, enums by name, 64-bit integers
      as strings)
  {"op": "request", "type": T, "json": <text>, "bins": [<base64>, ...]}
      -> {"parsed": R, "bins": [R, ...]} where R is {"ok": true, "canon": <base64>,
      "text": <MessageToJson or why not>, and for a binary whose message differs from
      the parsed one "difference": where} or {"ok": false, "error": <text>}
      json_format.Parse of the text (unknown fields ignored, as the gateway does), and each
      binary decoded; "canon" is the deterministic serialization, so equal messages have
      equal canon (map order and packed/unpacked repeated fields do not matter)

Any failure to do one of these is answered as {"ok": false, "error": ...}, never a crash.
"""

import base64
import json
import sys

from google.protobuf import (  # noqa: F401  (the well-known types into the default pool)
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)

POOL = descriptor_pool.Default()
CLASSES = {}


def cls(name):
    if name not in CLASSES:
        CLASSES[name] = message_factory.GetMessageClass(POOL.FindMessageTypeByName(name))
    return CLASSES[name]


def to_json(message):
    return json_format.MessageToJson(message, indent=None)


def described(message):
    """The message as JSON for a failure report, or why it has none."""
    try:
        return to_json(message)
    except Exception as e:  # noqa: BLE001
        return "(no JSON: %s: %s)" % (type(e).__name__, e)


def normalized(message):
    """The message with every Any's value re-serialized deterministically (its bytes are
    an inner message's, in whatever order its writer chose), at any depth."""
    if message.DESCRIPTOR.full_name == "google.protobuf.Any":
        if not message.type_url:
            return message
        inner = cls(message.type_url.rsplit("/", 1)[-1]).FromString(message.value)
        message.value = normalized(inner).SerializeToString(deterministic=True)
        return message
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                for v in value.values():
                    normalized(v)
        elif field.is_repeated:
            for v in value:
                normalized(v)
        else:
            normalized(value)
    return message


def canon(message):
    normalized(message)
    return {
        "ok": True,
        "canon": base64.b64encode(message.SerializeToString(deterministic=True)).decode(),
        "text": described(message),
    }


def difference(want, got, path=""):
    """Where two messages first differ ("<path>: python <value>, ours <value>", floats
    exact), or None."""
    if want.DESCRIPTOR.full_name == "google.protobuf.Any" and want.type_url == got.type_url:
        if want.type_url:
            inner = cls(want.type_url.rsplit("/", 1)[-1])
            return difference(inner.FromString(want.value), inner.FromString(got.value), path)
    fields = {f.name: f for f, _ in want.ListFields() + got.ListFields()}
    for name, f in fields.items():
        at = "%s.%s" % (path, name)
        a, b = getattr(want, name), getattr(got, name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            if set(a.keys()) != set(b.keys()):
                return "%s: python keys %s, ours %s" % (at, sorted(a.keys()), sorted(b.keys()))
            pairs = [("%s[%s]" % (at, k), a[k], b[k]) for k in a]
        elif f.is_repeated:
            if len(a) != len(b):
                return "%s: python %d items, ours %d" % (at, len(a), len(b))
            pairs = [("%s[%d]" % (at, i), x, y) for i, (x, y) in enumerate(zip(a, b))]
        else:
            pairs = [(at, a, b)]
        for at, x, y in pairs:
            if hasattr(x, "ListFields"):
                d = difference(x, y, at)
                if d:
                    return d
            elif repr(x) != repr(y):
                return "%s: python %r, ours %r" % (at, x, y)
    return None


def failed(e):
    return {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}


def handle(req):
    if "fds" in req:
        fds = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(req["fds"]))
        for f in fds.file:
            if not f.name.startswith("google/protobuf/"):
                POOL.AddSerializedFile(f.SerializeToString())
        return {"ok": True}
    kind = cls(req["type"])
    if req["op"] == "reply":
        try:
            message = kind.FromString(base64.b64decode(req["bin"]))
            return {"ok": True, "json": to_json(message)}
        except Exception as e:  # noqa: BLE001
            return failed(e)
    if req["op"] == "request":
        message = None
        try:
            message = json_format.Parse(req["json"], kind(), ignore_unknown_fields=True)
            parsed = canon(message)
        except Exception as e:  # noqa: BLE001
            parsed = failed(e)
        bins = []
        for b in req["bins"]:
            try:
                ours = kind.FromString(base64.b64decode(b))
                bins.append(canon(ours))
                if message is not None and bins[-1]["canon"] != parsed["canon"]:
                    bins[-1]["difference"] = difference(message, ours)
            except Exception as e:  # noqa: BLE001
                bins.append(failed(e))
        return {"parsed": parsed, "bins": bins}
    raise ValueError("unknown op %r" % req["op"])


def main():
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        out.write(json.dumps(handle(json.loads(line))) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
