// A gRPC server on Node @grpc/grpc-js (pure JavaScript on Node's http2, nothing shared with
// gRPC C-core), as a backend team would run one, for gateway/tests/grpc_interop.rs: the
// gateway's generic invocation against a second gRPC stack Portico did not write. grpc-js
// and @grpc/proto-loader are pinned in gateway/tests/grpcjs/package.json (installed by
// ops/lib.sh ensure_grpcjs into gateway/tests/grpcjs/node_modules).
//
//   node grpcjs_server.js --descriptor FILE --port N [--gzip] [--max-streams N]
//                         [--strict-pings] [--max-age-ms N]
//
// It publishes the same interop.v1.Interop (Call, Echo) as grpcio_server.py, loaded from the
// FileDescriptorSet that script writes (--descriptor-only), so both stacks serve one
// definition, with the same behaviour: greeting "hello <name>" and pad dots after delay_ms;
// mode "nonfinite"/"nonfinite2" fill the double/float fields and wrappers with NaN and
// infinities; keys and metadata_bytes tell what metadata arrived (name + value + 32 per
// entry); peer is the client's address (one per connection). It serves on 127.0.0.1:--port,
// prints "ready" on stdout, stops at once when stdin closes, and stops gracefully on a line
// "graceful MS" (tryShutdown: GOAWAY, listener closed, calls in flight get MS ms, then
// forceShutdown). Echo answers its Everything request as proto-loader handed it over
// (protobufjs decode, then toObject with the options below: longs and enums as strings,
// defaults filled in), given back (fromObject, encode). What that runtime does to it
// (grpc_interop.rs `every_field_kind_...` holds it to json_format): it writes every
// implicit-presence field, zeros included, on the wire (defaults: true); it keeps unknown
// enum numbers; it loads maps from a descriptor set as repeated entry messages (the same
// bytes); it keeps an Any as type_url and value bytes.
//
// Where grpc-js differs from grpcio (what the options can and cannot do in 1.14):
// - --gzip sets `grpc.default_compression_algorithm` (gzip), as a team would, but the
//   grpc-js server never compresses a reply (server-interceptors.js: "response compression
//   is currently not supported"); replies go out `grpc-encoding: identity`. It does
//   decompress gzip/deflate requests.
// - --strict-pings has no equivalent: the grpc-js server has no PING policy
//   (`grpc.http2.min_ping_interval_without_data_ms`, `grpc.http2.max_ping_strikes` and
//   `grpc.keepalive_permit_without_calls` are client-side options in grpc-js, ignored by its
//   server) and answers every PING; the flag is refused so no test believes it is on.
// - --max-age-ms is `grpc.max_connection_age_ms` (with +/-10% jitter, like grpc-core) and
//   `grpc.max_connection_age_grace_ms` 5000.
// - Metadata: Node's http2 accepts a header list up to its `maxHeaderListSize` (64 KiB by
//   default), far above grpc-core's 8 KiB; an entry grpc-js finds invalid (a non-ASCII value)
//   is logged and dropped, not refused.
'use strict';

const path = require('path');
const fs = require('fs');

const modules = process.env.PORTICO_GRPCJS_DIR
  ? path.join(process.env.PORTICO_GRPCJS_DIR, 'node_modules')
  : path.join(__dirname, 'grpcjs', 'node_modules');
const grpc = require(path.join(modules, '@grpc/grpc-js'));
const protoLoader = require(path.join(modules, '@grpc/proto-loader'));

function parseArgs(argv) {
  const a = { gzip: false, strictPings: false, maxStreams: 0, maxAgeMs: 0 };
  for (let i = 0; i < argv.length; i++) {
    switch (argv[i]) {
      case '--descriptor': a.descriptor = argv[++i]; break;
      case '--port': a.port = Number(argv[++i]); break;
      case '--gzip': a.gzip = true; break;
      case '--max-streams': a.maxStreams = Number(argv[++i]); break;
      case '--max-age-ms': a.maxAgeMs = Number(argv[++i]); break;
      case '--strict-pings': a.strictPings = true; break;
      default: throw new Error('unknown argument ' + argv[i]);
    }
  }
  if (!a.descriptor || !Number.isInteger(a.port)) {
    throw new Error('usage: grpcjs_server.js --descriptor FILE --port N [options]');
  }
  if (a.strictPings) {
    throw new Error('--strict-pings: the grpc-js server has no PING policy to make strict');
  }
  return a;
}

function main() {
  const a = parseArgs(process.argv.slice(2));
  const definition = protoLoader.loadFileDescriptorSetFromBuffer(fs.readFileSync(a.descriptor), {
    keepCase: true, // the descriptor's own field names (delay_ms, w_double, ...)
    longs: String,
    enums: String,
    defaults: true,
  });
  const proto = grpc.loadPackageDefinition(definition);

  function call(call, callback) {
    const req = call.request;
    const answer = () => {
      const keys = new Set();
      let bytes = 0;
      const repr = call.metadata.internalRepr;
      for (const [key, values] of repr) {
        keys.add(key);
        for (const v of values) {
          bytes += key.length + (Buffer.isBuffer(v) ? v.length : Buffer.byteLength(v)) + 32;
        }
      }
      const rep = {
        greeting: 'hello ' + req.name + '.'.repeat(req.pad),
        keys: [...keys].sort(),
        metadata_bytes: bytes,
        peer: call.getPeer(),
      };
      if (req.mode === 'nonfinite') {
        rep.w_double = { value: NaN };
        rep.w_float = { value: Infinity };
        rep.d = -Infinity;
        rep.f = NaN;
      } else if (req.mode === 'nonfinite2') {
        rep.w_double = { value: -Infinity };
        rep.w_float = { value: NaN };
        rep.d = NaN;
        rep.f = Infinity;
      }
      callback(null, rep);
    };
    if (req.delay_ms > 0) setTimeout(answer, req.delay_ms);
    else answer();
  }

  const options = {};
  if (a.gzip) options['grpc.default_compression_algorithm'] = 2; // gzip (ignored by the server)
  if (a.maxStreams) options['grpc.max_concurrent_streams'] = a.maxStreams;
  if (a.maxAgeMs) {
    options['grpc.max_connection_age_ms'] = a.maxAgeMs;
    options['grpc.max_connection_age_grace_ms'] = 5000;
  }
  const server = new grpc.Server(options);
  // Echo: the request as proto-loader hands it to a handler (protobufjs decode, then
  // toObject with the options above), given back (fromObject, then encode).
  function echo(call, callback) {
    callback(null, call.request);
  }

  server.addService(proto.interop.v1.Interop.service, { call, echo });
  server.bindAsync(`127.0.0.1:${a.port}`, grpc.ServerCredentials.createInsecure(), (err) => {
    if (err) {
      process.stderr.write(`cannot bind 127.0.0.1:${a.port}: ${err.message}\n`);
      process.exit(2);
    }
    process.stdout.write('ready\n');
  });

  // Ends with its parent: stdin closes when the test drops the process.
  let buffered = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (chunk) => {
    buffered += chunk;
    let nl;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const words = buffered.slice(0, nl).trim().split(/\s+/);
      buffered = buffered.slice(nl + 1);
      if (words.length === 2 && words[0] === 'graceful') {
        const grace = Number(words[1]);
        const force = setTimeout(() => {
          server.forceShutdown();
          process.exit(0);
        }, grace);
        server.tryShutdown(() => {
          clearTimeout(force);
          process.exit(0);
        });
      }
    }
  });
  process.stdin.on('end', () => {
    server.forceShutdown();
    process.exit(0);
  });
}

main();
