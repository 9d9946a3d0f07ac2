"""A gRPC server on Python grpcio (gRPC C-core), as a backend team would run one, for
gateway/tests/grpc_interop.rs: the gateway's generic invocation against a gRPC stack
Portico did not write.

It publishes interop.v1.Interop (Call and Echo), defined here with protobuf's descriptor API
(no protoc), and writes that FileDescriptorSet (with the well-known types' files) to
--descriptor-out for the gateway's configuration tree. Then it serves on 127.0.0.1:--port
and prints "ready" on stdout. With --descriptor-only it writes the set and exits: the
grpc-js server (grpcjs_server.js) and the grpc-java server (grpcjava/InteropServer.java)
load the service from that same set, so every stack publishes one definition.

Call(Req) answers Rep: greeting "hello <name>" and pad dots after delay_ms (grpc-core
sends a reply uncompressed when gzip would not make it smaller: pad makes it compressible); mode "nonfinite" fills the
double/float fields and wrappers with NaN and infinities; keys and metadata_bytes tell what
metadata arrived (its size counted as gRPC servers do: name + value + 32 per entry); peer
is the client's address as the server saw it (one per connection: a rotation shows as a
new peer).

Echo(Everything) answers the request as this runtime parsed it (upb, the class made from
the descriptor at run time) and serialized it again. Everything has every field kind: each
scalar type (single and repeated, packed, and some not), an enum with a negative value,
nested messages, a oneof, proto3 `optional` fields, maps with 12 key kinds (message, enum,
Value and Any values among them) and every well-known type. --json-reference (no server)
reads JSON documents for Everything, one a line, and answers json_format's
MessageToJson(Parse(document)) for each (function json_reference): the reference the
interop suite holds the gateway's answers to.

Options: --gzip (compress every reply, as `compression=grpc.Compression.Gzip` does),
--max-streams N (`grpc.max_concurrent_streams`), --strict-pings (a PING policy stricter than
grpc-core's default: one unwelcome ping and the connection is closed with GOAWAY
too_many_pings), --max-age-ms N (`grpc.max_connection_age_ms`: each connection is sent GOAWAY
after about N ms, +/-10% jitter, and closed 5 s later at most).

It stops when stdin closes (at once). A line "graceful MS" on stdin stops it as
`server.stop(MS / 1000)` does: GOAWAY, no new calls, calls in flight get MS ms to finish.
"""

import argparse
import json
import math
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


WKT_FILES = ["any", "duration", "empty", "field_mask", "struct", "timestamp", "wrappers"]

SCALARS = [
    ("double", "TYPE_DOUBLE"), ("float", "TYPE_FLOAT"), ("int32", "TYPE_INT32"),
    ("int64", "TYPE_INT64"), ("uint32", "TYPE_UINT32"), ("uint64", "TYPE_UINT64"),
    ("sint32", "TYPE_SINT32"), ("sint64", "TYPE_SINT64"), ("fixed32", "TYPE_FIXED32"),
    ("fixed64", "TYPE_FIXED64"), ("sfixed32", "TYPE_SFIXED32"), ("sfixed64", "TYPE_SFIXED64"),
    ("bool", "TYPE_BOOL"), ("string", "TYPE_STRING"), ("bytes", "TYPE_BYTES"),
]

# The well-known types as Everything's fields: (field name, type).
WKTS = [
    ("ts", "Timestamp"), ("dur", "Duration"), ("mask", "FieldMask"), ("st", "Struct"),
    ("val", "Value"), ("lv", "ListValue"), ("any", "Any"), ("empty", "Empty"),
    ("w_double", "DoubleValue"), ("w_float", "FloatValue"), ("w_int64", "Int64Value"),
    ("w_uint64", "UInt64Value"), ("w_int32", "Int32Value"), ("w_uint32", "UInt32Value"),
    ("w_bool", "BoolValue"), ("w_string", "StringValue"), ("w_bytes", "BytesValue"),
]

# Everything's maps: (key kind, value kind or type name).
MAPS = [
    ("string", "int32"), ("int32", "string"), ("int64", ".interop.v1.Nested"),
    ("uint32", "double"), ("uint64", "sint64"), ("sint32", "float"), ("sint64", ".interop.v1.Colour"),
    ("fixed32", "bytes"), ("fixed64", "bool"), ("sfixed32", "uint64"), ("sfixed64", "string"),
    ("bool", "string"), ("string", ".google.protobuf.Value"), ("string", ".google.protobuf.Any"),
]


def file_descriptor():
    f = descriptor_pb2.FileDescriptorProto()
    f.name = "interop/v1/interop.proto"
    f.package = "interop.v1"
    f.syntax = "proto3"
    f.dependency.extend("google/protobuf/%s.proto" % w for w in WKT_FILES)
    T = descriptor_pb2.FieldDescriptorProto

    def field(msg, name, number, kind, type_name=None, repeated=False, packed=None, oneof=None):
        fd = msg.field.add()
        fd.name = name
        fd.number = number
        fd.type = kind
        fd.label = T.LABEL_REPEATED if repeated else T.LABEL_OPTIONAL
        if type_name:
            fd.type_name = type_name
        if packed is not None:
            fd.options.packed = packed
        if oneof is not None:
            fd.oneof_index = oneof
        return fd

    def kind_of(k):
        """A scalar kind's (type, type_name), or a message's / enum's by its full name."""
        if k.startswith("."):
            enum = k.endswith("Colour")
            return (T.TYPE_ENUM if enum else T.TYPE_MESSAGE), k
        return getattr(T, "TYPE_" + k.upper()), None

    req = f.message_type.add()
    req.name = "Req"
    field(req, "name", 1, T.TYPE_STRING)
    field(req, "delay_ms", 2, T.TYPE_INT32)
    field(req, "mode", 3, T.TYPE_STRING)
    field(req, "pad", 4, T.TYPE_INT32)
    rep = f.message_type.add()
    rep.name = "Rep"
    field(rep, "greeting", 1, T.TYPE_STRING)
    field(rep, "w_double", 2, T.TYPE_MESSAGE, ".google.protobuf.DoubleValue")
    field(rep, "w_float", 3, T.TYPE_MESSAGE, ".google.protobuf.FloatValue")
    field(rep, "d", 4, T.TYPE_DOUBLE)
    field(rep, "f", 5, T.TYPE_FLOAT)
    field(rep, "keys", 6, T.TYPE_STRING, repeated=True)
    field(rep, "metadata_bytes", 7, T.TYPE_INT32)
    field(rep, "peer", 8, T.TYPE_STRING)

    colour = f.enum_type.add()
    colour.name = "Colour"
    for name, number in [("COLOUR_UNSPECIFIED", 0), ("RED", 1), ("GREEN", 2), ("BLUE", -3)]:
        v = colour.value.add()
        v.name = name
        v.number = number

    nested = f.message_type.add()
    nested.name = "Nested"
    field(nested, "a", 1, T.TYPE_INT32)
    field(nested, "b", 2, T.TYPE_STRING)
    field(nested, "child", 3, T.TYPE_MESSAGE, ".interop.v1.Nested")
    field(nested, "colours", 4, T.TYPE_ENUM, ".interop.v1.Colour", repeated=True)

    # Everything: what Echo takes and gives back, every field kind (module docs).
    ev = f.message_type.add()
    ev.name = "Everything"
    for i, (name, kind) in enumerate(SCALARS):
        field(ev, "f_" + name, 1 + i, getattr(T, kind))
        field(ev, "r_" + name, 101 + i, getattr(T, kind), repeated=True)
    field(ev, "f_enum", 16, T.TYPE_ENUM, ".interop.v1.Colour")
    field(ev, "r_enum", 116, T.TYPE_ENUM, ".interop.v1.Colour", repeated=True)
    field(ev, "f_nested", 17, T.TYPE_MESSAGE, ".interop.v1.Nested")
    field(ev, "r_nested", 117, T.TYPE_MESSAGE, ".interop.v1.Nested", repeated=True)
    # Not packed (proto3 packs repeated scalars unless told otherwise).
    field(ev, "u_int32", 130, T.TYPE_INT32, repeated=True, packed=False)
    field(ev, "u_double", 131, T.TYPE_DOUBLE, repeated=True, packed=False)
    field(ev, "u_sint64", 132, T.TYPE_SINT64, repeated=True, packed=False)
    field(ev, "u_enum", 133, T.TYPE_ENUM, ".interop.v1.Colour", repeated=True, packed=False)
    # A oneof, and proto3 `optional` fields (each its own synthetic oneof).
    ev.oneof_decl.add().name = "choice"
    field(ev, "c_string", 40, T.TYPE_STRING, oneof=0)
    field(ev, "c_int64", 41, T.TYPE_INT64, oneof=0)
    field(ev, "c_nested", 42, T.TYPE_MESSAGE, ".interop.v1.Nested", oneof=0)
    field(ev, "c_colour", 43, T.TYPE_ENUM, ".interop.v1.Colour", oneof=0)
    for j, (name, kind) in enumerate([("o_int32", T.TYPE_INT32), ("o_double", T.TYPE_DOUBLE),
                                      ("o_string", T.TYPE_STRING)]):
        ev.oneof_decl.add().name = "_" + name
        field(ev, name, 45 + j, kind, oneof=1 + j).proto3_optional = True
    for i, (name, wkt) in enumerate(WKTS):
        field(ev, name, 50 + i, T.TYPE_MESSAGE, ".google.protobuf." + wkt)
    field(ev, "r_ts", 70, T.TYPE_MESSAGE, ".google.protobuf.Timestamp", repeated=True)
    field(ev, "r_any", 71, T.TYPE_MESSAGE, ".google.protobuf.Any", repeated=True)
    field(ev, "r_val", 72, T.TYPE_MESSAGE, ".google.protobuf.Value", repeated=True)
    field(ev, "r_w_int64", 73, T.TYPE_MESSAGE, ".google.protobuf.Int64Value", repeated=True)
    for i, (key, value) in enumerate(MAPS):
        vname = value.rsplit(".", 1)[-1].lower()
        name = "m_%s_%s" % (key, vname)
        entry = ev.nested_type.add()
        entry.name = "".join(p.capitalize() for p in name.split("_")) + "Entry"
        entry.options.map_entry = True
        field(entry, "key", 1, kind_of(key)[0])
        field(entry, "value", 2, *kind_of(value))
        field(ev, name, 150 + i, T.TYPE_MESSAGE, ".interop.v1.Everything." + entry.name,
              repeated=True)

    svc = f.service.add()
    svc.name = "Interop"
    m = svc.method.add()
    m.name = "Call"
    m.input_type = ".interop.v1.Req"
    m.output_type = ".interop.v1.Rep"
    m = svc.method.add()
    m.name = "Echo"
    m.input_type = ".interop.v1.Everything"
    m.output_type = ".interop.v1.Everything"
    return f


def wkt_files():
    """The well-known types' FileDescriptorProtos, as protobuf's runtime has them."""
    import importlib

    return [
        descriptor_pb2.FileDescriptorProto.FromString(
            importlib.import_module("google.protobuf.%s_pb2" % w).DESCRIPTOR.serialized_pb
        )
        for w in WKT_FILES
    ]


def json_reference(pool):
    """--json-reference: for each line of stdin, a JSON document for Everything, one line
    on stdout: {"ok": true, "json": MessageToJson(Parse(document))} with the gateway's
    options (json_format's defaults: lowerCamelCase names, unpopulated fields left out,
    enums by name, 64-bit integers as strings), or {"ok": false, "error": why}."""
    from google.protobuf import json_format

    Everything = message_factory.GetMessageClass(pool.FindMessageTypeByName("interop.v1.Everything"))
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            m = json_format.Parse(line, Everything(), descriptor_pool=pool)
            # A round trip through the wire, as the servers' replies make one.
            m = Everything.FromString(m.SerializeToString())
            out = {"ok": True, "json": json_format.MessageToJson(m, indent=None,
                                                                 descriptor_pool=pool)}
        except Exception as e:  # noqa: BLE001
            out = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int)
    p.add_argument("--descriptor-out")
    p.add_argument("--json-reference", action="store_true")
    p.add_argument("--descriptor-only", action="store_true")
    p.add_argument("--gzip", action="store_true")
    p.add_argument("--max-streams", type=int, default=0)
    p.add_argument("--strict-pings", action="store_true")
    p.add_argument("--max-age-ms", type=int, default=0)
    a = p.parse_args()
    if not a.descriptor_out and not a.json_reference:
        p.error("--descriptor-out is required")

    wkts = wkt_files()
    mine = file_descriptor()
    pool = descriptor_pool.DescriptorPool()
    for f in wkts + [mine]:
        pool.Add(f)
    if a.json_reference:
        json_reference(pool)
        return
    fds = descriptor_pb2.FileDescriptorSet()
    fds.file.extend(wkts + [mine])
    with open(a.descriptor_out, "wb") as out:
        out.write(fds.SerializeToString())
    if a.descriptor_only:
        return
    if a.port is None:
        p.error("--port is required unless --descriptor-only")

    Req = message_factory.GetMessageClass(pool.FindMessageTypeByName("interop.v1.Req"))
    Rep = message_factory.GetMessageClass(pool.FindMessageTypeByName("interop.v1.Rep"))
    Everything = message_factory.GetMessageClass(pool.FindMessageTypeByName("interop.v1.Everything"))

    def call(request, context):
        if request.delay_ms > 0:
            time.sleep(request.delay_ms / 1000.0)
        metadata = context.invocation_metadata()
        rep = Rep(greeting="hello " + request.name + "." * request.pad)
        rep.keys.extend(sorted({k for k, _ in metadata}))
        rep.metadata_bytes = sum(len(k) + len(v) + 32 for k, v in metadata)
        peer = context.peer()
        rep.peer = peer[len("ipv4:"):] if peer.startswith("ipv4:") else peer
        if request.mode == "nonfinite":
            rep.w_double.value = math.nan
            rep.w_float.value = math.inf
            rep.d = -math.inf
            rep.f = math.nan
        elif request.mode == "nonfinite2":
            rep.w_double.value = -math.inf
            rep.w_float.value = math.nan
            rep.d = math.nan
            rep.f = math.inf
        return rep

    handler = grpc.method_handlers_generic_handler(
        "interop.v1.Interop",
        {
            "Call": grpc.unary_unary_rpc_method_handler(
                call,
                request_deserializer=Req.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
            # Echo: the request parsed by this runtime (upb, the class made from the
            # descriptor at run time) and serialized again.
            "Echo": grpc.unary_unary_rpc_method_handler(
                lambda request, context: request,
                request_deserializer=Everything.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            ),
        },
    )
    options = []
    if a.max_streams:
        options.append(("grpc.max_concurrent_streams", a.max_streams))
    if a.strict_pings:
        options += [
            ("grpc.http2.min_ping_interval_without_data_ms", 300000),
            ("grpc.http2.max_ping_strikes", 1),
        ]
    if a.max_age_ms:
        options += [
            ("grpc.max_connection_age_ms", a.max_age_ms),
            ("grpc.max_connection_age_grace_ms", 5000),
        ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=32),
        options=options,
        compression=grpc.Compression.Gzip if a.gzip else None,
    )
    server.add_generic_rpc_handlers((handler,))
    if server.add_insecure_port("127.0.0.1:%d" % a.port) == 0:
        print("cannot bind 127.0.0.1:%d" % a.port, file=sys.stderr, flush=True)
        sys.exit(2)
    server.start()
    print("ready", flush=True)

    # Ends with its parent: stdin closes when the test drops the process. "graceful MS"
    # stops it gracefully (the test's view of a backend's rolling restart).
    def watch():
        for line in sys.stdin:
            words = line.split()
            if len(words) == 2 and words[0] == "graceful":
                server.stop(int(words[1]) / 1000.0)
        server.stop(0)

    threading.Thread(target=watch, daemon=True).start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
