"""A gRPC server on Python grpcio (gRPC C-core), as a backend team would run one, for
gateway/tests/grpc_interop.rs: the gateway's generic invocation against a gRPC stack
Portico did not write.

It publishes interop.v1.Interop/Call, defined here with protobuf's descriptor API (no
protoc), and writes that FileDescriptorSet (with google/protobuf/wrappers.proto) to
--descriptor-out for the gateway's configuration tree. Then it serves on 127.0.0.1:--port
and prints "ready" on stdout. With --descriptor-only it writes the set and exits: the
grpc-js server (grpcjs_server.js) loads the service from that same set, so both stacks
publish one definition.

Call(Req) answers Rep: greeting "hello <name>" and pad dots after delay_ms (grpc-core
sends a reply uncompressed when gzip would not make it smaller: pad makes it compressible); mode "nonfinite" fills the
double/float fields and wrappers with NaN and infinities; keys and metadata_bytes tell what
metadata arrived (its size counted as gRPC servers do: name + value + 32 per entry); peer
is the client's address as the server saw it (one per connection: a rotation shows as a
new peer).

Options: --gzip (compress every reply, as `compression=grpc.Compression.Gzip` does),
--max-streams N (`grpc.max_concurrent_streams`), --strict-pings (a PING policy stricter than
grpc-core's default: one unwelcome ping and the connection is closed with GOAWAY
too_many_pings), --max-age-ms N (`grpc.max_connection_age_ms`: each connection is sent GOAWAY
after about N ms, +/-10% jitter, and closed 5 s later at most).

It stops when stdin closes (at once). A line "graceful MS" on stdin stops it as
`server.stop(MS / 1000)` does: GOAWAY, no new calls, calls in flight get MS ms to finish.
"""

import argparse
import math
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2


def file_descriptor():
    f = descriptor_pb2.FileDescriptorProto()
    f.name = "interop/v1/interop.proto"
    f.package = "interop.v1"
    f.syntax = "proto3"
    f.dependency.append("google/protobuf/wrappers.proto")
    T = descriptor_pb2.FieldDescriptorProto

    def field(msg, name, number, kind, type_name=None, repeated=False):
        fd = msg.field.add()
        fd.name = name
        fd.number = number
        fd.type = kind
        fd.label = T.LABEL_REPEATED if repeated else T.LABEL_OPTIONAL
        if type_name:
            fd.type_name = type_name

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
    svc = f.service.add()
    svc.name = "Interop"
    m = svc.method.add()
    m.name = "Call"
    m.input_type = ".interop.v1.Req"
    m.output_type = ".interop.v1.Rep"
    return f


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int)
    p.add_argument("--descriptor-out", required=True)
    p.add_argument("--descriptor-only", action="store_true")
    p.add_argument("--gzip", action="store_true")
    p.add_argument("--max-streams", type=int, default=0)
    p.add_argument("--strict-pings", action="store_true")
    p.add_argument("--max-age-ms", type=int, default=0)
    a = p.parse_args()

    wrappers = descriptor_pb2.FileDescriptorProto.FromString(wrappers_pb2.DESCRIPTOR.serialized_pb)
    mine = file_descriptor()
    fds = descriptor_pb2.FileDescriptorSet()
    fds.file.extend([wrappers, mine])
    with open(a.descriptor_out, "wb") as out:
        out.write(fds.SerializeToString())
    if a.descriptor_only:
        return
    if a.port is None:
        p.error("--port is required unless --descriptor-only")

    pool = descriptor_pool.DescriptorPool()
    pool.Add(wrappers)
    pool.Add(mine)
    Req = message_factory.GetMessageClass(pool.FindMessageTypeByName("interop.v1.Req"))
    Rep = message_factory.GetMessageClass(pool.FindMessageTypeByName("interop.v1.Rep"))

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
            )
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
