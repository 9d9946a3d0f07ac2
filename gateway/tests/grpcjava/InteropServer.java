// A gRPC server on grpc-java (Netty transport), as a backend team on the JVM would run one,
// for gateway/tests/grpc_interop.rs: the gateway's generic invocation against a third gRPC
// stack Portico did not write (nothing shared with gRPC C-core or grpc-js). Built from
// Debian's packages only (grpc-java 1.41, protobuf-java 3.21, Netty 4.1) by build.sh beside
// it, which prints the launcher to run:
//
//   "$(gateway/tests/grpcjava/build.sh)" --descriptor FILE --port N [--gzip]
//       [--max-streams N] [--strict-pings] [--max-age-ms N]
//
// It publishes the same interop.v1.Interop/Call and /Echo as grpcio_server.py, loaded at run time from
// the FileDescriptorSet that script writes (--descriptor-only) with protobuf-java's
// descriptor API and DynamicMessage (no protoc, no generated stubs): the method is
// registered with ServerServiceDefinition.builder, a MethodDescriptor with a DynamicMessage
// marshaller and ServerCalls.asyncUnaryCall. Same behaviour: greeting "hello <name>" and pad
// dots after delay_ms; mode "nonfinite"/"nonfinite2" fill the double/float fields and
// wrappers with NaN and infinities; keys and metadata_bytes tell what metadata arrived (name
// + value + 32 per entry); peer is the client's address as host:port (one per connection);
// Echo answers its Everything request as DynamicMessage parsed it (unknown fields kept).
// It serves on 127.0.0.1:--port, prints "ready" on stdout, stops at once when stdin closes,
// and stops gracefully on a line "graceful MS" (Server.shutdown: GOAWAY, listener closed,
// calls in flight get MS ms, then shutdownNow).
//
// Where grpc-java 1.41 differs from grpcio (what the options can and cannot do):
// - --gzip sets gzip on every call (ServerCall.setCompression), as a team would; grpc-java
//   then compresses every reply message, but only to a client that lists gzip in
//   grpc-accept-encoding (ServerCallImpl falls back to identity otherwise), where grpcio
//   compresses regardless.
// - --strict-pings is NettyServerBuilder.permitKeepAliveTime(5 min) and
//   permitKeepAliveWithoutCalls(false) (grpc-core's min_ping_interval_without_data_ms
//   300000). grpc-java's strike limit is fixed (io.grpc.netty.KeepAliveEnforcer
//   MAX_PING_STRIKES = 2): the connection is closed with GOAWAY ENHANCE_YOUR_CALM
//   "too_many_pings" at the third unwelcome PING, not the second as with grpcio's
//   max_ping_strikes 1. These are grpc-java's defaults anyway: without the flag the policy
//   is the same.
// - --max-streams N is maxConcurrentCallsPerConnection (SETTINGS_MAX_CONCURRENT_STREAMS).
// - --max-age-ms N is maxConnectionAge (+/-10% jitter, as grpc-core) with
//   maxConnectionAgeGrace 5 s; grpc-java raises an age below 1 s to 1 s.
// - Metadata: grpc-java's maxInboundMetadataSize is 8 KiB by default, as grpc-core's (its
//   HPACK header list size, SETTINGS_MAX_HEADER_LIST_SIZE 8192). keys are what a grpc-java
//   handler's Metadata holds: that includes content-type, grpc-accept-encoding,
//   grpc-timeout and user-agent when sent (grpcio hides all but user-agent), and counts them
//   in metadata_bytes.
// - The server sends its own PINGs (Netty transport's BDP flow-control probes).

import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.Descriptors.MethodDescriptor;
import com.google.protobuf.Descriptors.ServiceDescriptor;
import com.google.protobuf.DynamicMessage;
import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.Grpc;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.ServerCalls;
import io.grpc.stub.StreamObserver;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

public final class InteropServer {
    private static final Context.Key<Metadata> HEADERS = Context.key("headers");
    private static final Context.Key<String> PEER = Context.key("peer");

    private static final class Args {
        String descriptor;
        Integer port;
        boolean gzip;
        int maxStreams;
        boolean strictPings;
        int maxAgeMs;
    }

    private static void usage(String why) {
        System.err.println("InteropServer: " + why);
        System.err.println(
                "usage: InteropServer --descriptor FILE --port N [--gzip] [--max-streams N]"
                        + " [--strict-pings] [--max-age-ms N]");
        System.exit(2);
    }

    private static Args parse(String[] argv) {
        Args a = new Args();
        for (int i = 0; i < argv.length; i++) {
            String arg = argv[i];
            boolean hasValue = i + 1 < argv.length;
            try {
                switch (arg) {
                    case "--descriptor":
                        if (!hasValue) usage(arg + " needs a value");
                        a.descriptor = argv[++i];
                        break;
                    case "--port":
                        if (!hasValue) usage(arg + " needs a value");
                        a.port = Integer.parseInt(argv[++i]);
                        break;
                    case "--max-streams":
                        if (!hasValue) usage(arg + " needs a value");
                        a.maxStreams = Integer.parseInt(argv[++i]);
                        break;
                    case "--max-age-ms":
                        if (!hasValue) usage(arg + " needs a value");
                        a.maxAgeMs = Integer.parseInt(argv[++i]);
                        break;
                    case "--gzip":
                        a.gzip = true;
                        break;
                    case "--strict-pings":
                        a.strictPings = true;
                        break;
                    default:
                        usage("unknown argument " + arg);
                }
            } catch (NumberFormatException e) {
                usage(arg + ": not an integer: " + argv[i]);
            }
        }
        if (a.descriptor == null || a.port == null) usage("--descriptor and --port are required");
        return a;
    }

    /** Every file of a FileDescriptorSet, built in dependency order (any order in the set). */
    private static Map<String, FileDescriptor> load(FileDescriptorSet set)
            throws DescriptorValidationException {
        Map<String, FileDescriptorProto> protos = new HashMap<>();
        for (FileDescriptorProto f : set.getFileList()) protos.put(f.getName(), f);
        Map<String, FileDescriptor> built = new HashMap<>();
        for (String name : protos.keySet()) build(name, protos, built);
        return built;
    }

    private static FileDescriptor build(
            String name, Map<String, FileDescriptorProto> protos, Map<String, FileDescriptor> built)
            throws DescriptorValidationException {
        FileDescriptor done = built.get(name);
        if (done != null) return done;
        FileDescriptorProto proto = protos.get(name);
        if (proto == null) throw new IllegalArgumentException("the set lacks " + name);
        FileDescriptor[] deps = new FileDescriptor[proto.getDependencyCount()];
        for (int i = 0; i < deps.length; i++) deps[i] = build(proto.getDependency(i), protos, built);
        FileDescriptor file = FileDescriptor.buildFrom(proto, deps);
        built.put(name, file);
        return file;
    }

    /** Messages of one type on the wire: protobuf's binary encoding, by DynamicMessage. */
    private static final class DynamicMarshaller
            implements io.grpc.MethodDescriptor.Marshaller<DynamicMessage> {
        private final Descriptor type;

        DynamicMarshaller(Descriptor type) {
            this.type = type;
        }

        @Override
        public InputStream stream(DynamicMessage value) {
            return value.toByteString().newInput();
        }

        @Override
        public DynamicMessage parse(InputStream stream) {
            try {
                return DynamicMessage.parseFrom(type, stream);
            } catch (IOException e) {
                throw Status.INTERNAL
                        .withDescription("cannot parse " + type.getFullName())
                        .withCause(e)
                        .asRuntimeException();
            }
        }
    }

    /** Keeps each call's metadata and peer for the handler; sets gzip on it with --gzip. */
    private static ServerInterceptor observe(boolean gzip) {
        return new ServerInterceptor() {
            @Override
            public <Q, R> ServerCall.Listener<Q> interceptCall(
                    ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
                if (gzip) call.setCompression("gzip");
                SocketAddress remote = call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR);
                String peer = String.valueOf(remote);
                if (remote instanceof InetSocketAddress) {
                    InetSocketAddress inet = (InetSocketAddress) remote;
                    peer = inet.getHostString() + ":" + inet.getPort();
                }
                Context context =
                        Context.current().withValue(HEADERS, headers).withValue(PEER, peer);
                return Contexts.interceptCall(context, call, headers, next);
            }
        };
    }

    public static void main(String[] argv) throws Exception {
        Args a = parse(argv);
        Map<String, FileDescriptor> files =
                load(FileDescriptorSet.parseFrom(Files.readAllBytes(Paths.get(a.descriptor))));
        ServiceDescriptor service = null;
        for (FileDescriptor f : files.values()) {
            ServiceDescriptor s = f.findServiceByName("Interop");
            if (s != null && s.getFullName().equals("interop.v1.Interop")) service = s;
        }
        if (service == null) throw new IllegalArgumentException("no interop.v1.Interop in the set");
        MethodDescriptor method = service.findMethodByName("Call");
        Descriptor reqType = method.getInputType();
        Descriptor repType = method.getOutputType();
        FieldDescriptor name = reqType.findFieldByName("name");
        FieldDescriptor delayMs = reqType.findFieldByName("delay_ms");
        FieldDescriptor mode = reqType.findFieldByName("mode");
        FieldDescriptor pad = reqType.findFieldByName("pad");
        FieldDescriptor greeting = repType.findFieldByName("greeting");
        FieldDescriptor wDouble = repType.findFieldByName("w_double");
        FieldDescriptor wFloat = repType.findFieldByName("w_float");
        FieldDescriptor d = repType.findFieldByName("d");
        FieldDescriptor f = repType.findFieldByName("f");
        FieldDescriptor keys = repType.findFieldByName("keys");
        FieldDescriptor metadataBytes = repType.findFieldByName("metadata_bytes");
        FieldDescriptor peerField = repType.findFieldByName("peer");

        io.grpc.MethodDescriptor<DynamicMessage, DynamicMessage> call =
                io.grpc.MethodDescriptor.<DynamicMessage, DynamicMessage>newBuilder()
                        .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
                        .setFullMethodName(
                                io.grpc.MethodDescriptor.generateFullMethodName(
                                        service.getFullName(), method.getName()))
                        .setRequestMarshaller(new DynamicMarshaller(reqType))
                        .setResponseMarshaller(new DynamicMarshaller(repType))
                        .build();

        // delay_ms without holding a thread: the reply is scheduled (grpcio sleeps in one of
        // 32 workers; nothing here depends on that limit).
        ScheduledExecutorService timer =
                Executors.newSingleThreadScheduledExecutor(
                        r -> {
                            Thread t = new Thread(r, "delays");
                            t.setDaemon(true);
                            return t;
                        });

        ServerCalls.UnaryMethod<DynamicMessage, DynamicMessage> handler =
                (DynamicMessage req, StreamObserver<DynamicMessage> reply) -> {
                    Metadata headers = HEADERS.get();
                    String peer = PEER.get();
                    Runnable answer =
                            () -> {
                                DynamicMessage.Builder rep = DynamicMessage.newBuilder(repType);
                                int dots = Math.max(0, (Integer) req.getField(pad));
                                rep.setField(
                                        greeting, "hello " + req.getField(name) + ".".repeat(dots));
                                TreeSet<String> seen = new TreeSet<>();
                                int bytes = 0;
                                for (String key : headers.keys()) {
                                    seen.add(key);
                                    if (key.endsWith(Metadata.BINARY_HEADER_SUFFIX)) {
                                        for (byte[] v : headers.getAll(
                                                Metadata.Key.of(key, Metadata.BINARY_BYTE_MARSHALLER))) {
                                            bytes += key.length() + v.length + 32;
                                        }
                                    } else {
                                        // ASCII: one char per byte (a non-ASCII byte decodes
                                        // to one replacement char).
                                        for (String v : headers.getAll(
                                                Metadata.Key.of(key, Metadata.ASCII_STRING_MARSHALLER))) {
                                            bytes += key.length() + v.length() + 32;
                                        }
                                    }
                                }
                                for (String key : seen) rep.addRepeatedField(keys, key);
                                rep.setField(metadataBytes, bytes);
                                rep.setField(peerField, peer);
                                String m = (String) req.getField(mode);
                                if (m.equals("nonfinite")) {
                                    rep.setField(wDouble, wrapper(wDouble, Double.NaN));
                                    rep.setField(wFloat, wrapper(wFloat, Float.POSITIVE_INFINITY));
                                    rep.setField(d, Double.NEGATIVE_INFINITY);
                                    rep.setField(f, Float.NaN);
                                } else if (m.equals("nonfinite2")) {
                                    rep.setField(wDouble, wrapper(wDouble, Double.NEGATIVE_INFINITY));
                                    rep.setField(wFloat, wrapper(wFloat, Float.NaN));
                                    rep.setField(d, Double.NaN);
                                    rep.setField(f, Float.POSITIVE_INFINITY);
                                }
                                try {
                                    reply.onNext(rep.build());
                                    reply.onCompleted();
                                } catch (RuntimeException e) {
                                    // The call is gone (cancelled, deadline): nobody to answer.
                                }
                            };
                    int delay = (Integer) req.getField(delayMs);
                    if (delay > 0) timer.schedule(answer, delay, TimeUnit.MILLISECONDS);
                    else answer.run();
                };

        // Echo: the request parsed by protobuf-java (DynamicMessage of the descriptor
        // loaded at run time, the marshaller above) and serialized again.
        MethodDescriptor echoMethod = service.findMethodByName("Echo");
        io.grpc.MethodDescriptor<DynamicMessage, DynamicMessage> echo =
                io.grpc.MethodDescriptor.<DynamicMessage, DynamicMessage>newBuilder()
                        .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
                        .setFullMethodName(
                                io.grpc.MethodDescriptor.generateFullMethodName(
                                        service.getFullName(), echoMethod.getName()))
                        .setRequestMarshaller(new DynamicMarshaller(echoMethod.getInputType()))
                        .setResponseMarshaller(new DynamicMarshaller(echoMethod.getOutputType()))
                        .build();
        ServerCalls.UnaryMethod<DynamicMessage, DynamicMessage> echoHandler =
                (DynamicMessage req, StreamObserver<DynamicMessage> reply) -> {
                    reply.onNext(req);
                    reply.onCompleted();
                };

        ServerServiceDefinition definition =
                ServerServiceDefinition.builder(service.getFullName())
                        .addMethod(call, ServerCalls.asyncUnaryCall(handler))
                        .addMethod(echo, ServerCalls.asyncUnaryCall(echoHandler))
                        .build();

        NettyServerBuilder builder =
                NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", a.port))
                        .addService(ServerInterceptors.intercept(definition, observe(a.gzip)));
        if (a.maxStreams > 0) builder.maxConcurrentCallsPerConnection(a.maxStreams);
        if (a.strictPings) {
            builder.permitKeepAliveTime(5, TimeUnit.MINUTES).permitKeepAliveWithoutCalls(false);
        }
        if (a.maxAgeMs > 0) {
            builder.maxConnectionAge(a.maxAgeMs, TimeUnit.MILLISECONDS)
                    .maxConnectionAgeGrace(5, TimeUnit.SECONDS);
        }
        Server server = builder.build();
        try {
            server.start();
        } catch (IOException e) {
            System.err.println("cannot bind 127.0.0.1:" + a.port + ": " + e);
            System.exit(2);
        }
        System.out.println("ready");
        System.out.flush();

        // Ends with its parent: stdin closes when the test drops the process. "graceful MS"
        // stops it gracefully (the test's view of a backend's rolling restart).
        Thread watch =
                new Thread(
                        () -> {
                            BufferedReader in =
                                    new BufferedReader(
                                            new InputStreamReader(System.in, StandardCharsets.UTF_8));
                            try {
                                String line;
                                while ((line = in.readLine()) != null) {
                                    String[] words = line.trim().split("\\s+");
                                    if (words.length == 2 && words[0].equals("graceful")) {
                                        long grace = Long.parseLong(words[1]);
                                        server.shutdown();
                                        Thread stop =
                                                new Thread(
                                                        () -> {
                                                            try {
                                                                server.awaitTermination(
                                                                        grace, TimeUnit.MILLISECONDS);
                                                            } catch (InterruptedException e) {
                                                                // exiting anyway
                                                            }
                                                            server.shutdownNow();
                                                            System.exit(0);
                                                        },
                                                        "graceful");
                                        stop.setDaemon(true);
                                        stop.start();
                                    }
                                }
                            } catch (IOException | NumberFormatException e) {
                                // treated as stdin closing
                            }
                            server.shutdownNow();
                            System.exit(0);
                        },
                        "stdin");
        watch.setDaemon(true);
        watch.start();
        server.awaitTermination();
        System.exit(0);
    }

    private static DynamicMessage wrapper(FieldDescriptor field, Object value) {
        Descriptor type = field.getMessageType();
        return DynamicMessage.newBuilder(type).setField(type.findFieldByName("value"), value).build();
    }
}
