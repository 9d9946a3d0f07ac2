#!/usr/bin/env bash
# Builds the grpc-java interop server (InteropServer.java beside this script) for
# gateway/tests/grpc_interop.rs from Debian packages only (no Maven Central): OpenJDK
# (default-jdk-headless), grpc-java 1.41 (libgrpc-java), protobuf-java (libprotobuf-java),
# Netty 4.1 (libnetty-java) and the jars they need at run time, all from /usr/share/java.
#
#   gateway/tests/grpcjava/build.sh      # prints the path of the launcher, $RUN/grpcjava/run
#   "$(gateway/tests/grpcjava/build.sh)" --descriptor FILE --port N [options]
#
# Installs what is missing (ops/lib.sh ensure_packages), compiles into $RUN/grpcjava/classes
# only when the source, the classpath or the JDK changed, writes the launcher
# $RUN/grpcjava/run (`exec java ... InteropServer "$@"`) and prints its path, one line on
# stdout; everything else goes to stderr.
set -euo pipefail

# shellcheck source=../../../ops/lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../../ops/lib.sh"

SRC="$ROOT/gateway/tests/grpcjava/InteropServer.java"
OUT="$RUN/grpcjava"
JARS=/usr/share/java

# libgrpc-java declares only libopencensus-java: grpc-java's own POMs (grpc-api, grpc-core,
# grpc-netty) need guava, perfmark, gson, jsr305 and error_prone annotations too; Debian's
# Netty (4.1.48) is built against an external JCTools (libjctools-java, a dependency of
# libnetty-java). protobuf-java is only for the descriptor and DynamicMessage: the method's
# marshaller is the server's own, so grpc-protobuf (and proto-google-common-protos, not
# in Debian) is not needed. animal-sniffer annotations are compile-time only.
ensure_packages default-jdk-headless libgrpc-java libprotobuf-java libnetty-java \
    libguava-java libperfmark-java libgoogle-gson-java libjsr305-java liberror-prone-java \
    libjctools-java

# The runtime classpath, resolved from grpc-java's POM dependencies (epoll left out: NIO).
cp_jars=(
    grpc-api grpc-context grpc-core grpc-netty grpc-stub
    protobuf
    guava perfmark-api gson jsr305 error_prone_annotations jctools-core
    netty-common netty-buffer netty-transport netty-resolver netty-codec netty-handler
    netty-codec-http netty-codec-http2 netty-codec-socks netty-handler-proxy
)
classpath=""
for j in "${cp_jars[@]}"; do
    f="$JARS/$j.jar"
    [ -f "$f" ] || die "$f is missing (its Debian package did not install it)"
    # The versioned file the symlink names, so the stamp below changes on an upgrade.
    classpath+="${classpath:+:}$(readlink -f "$f")"
done

java_home=/usr/lib/jvm/default-java
[ -x "$java_home/bin/javac" ] || die "$java_home/bin/javac is missing (default-jdk-headless)"

mkdir -p "$OUT"
stamp="$(
    {
        # The contents only: sha256sum FILE prints the path as given, which differs by caller.
        cat "$SRC" "${BASH_SOURCE[0]}" | sha256sum
        echo "$classpath"
        readlink -f "$java_home/bin/javac"
    } | sha256sum | cut -d' ' -f1
)"
if [ ! -f "$OUT/classes/.stamp" ] || [ "$(cat "$OUT/classes/.stamp")" != "$stamp" ] ||
    [ ! -f "$OUT/classes/InteropServer.class" ]; then
    log "compiling $SRC into $OUT/classes"
    # Built aside and renamed: a concurrent build.sh or a running server never sees half.
    rm -rf "$OUT/classes.$$" "$OUT/classes.old.$$"
    mkdir -p "$OUT/classes.$$"
    "$java_home/bin/javac" -nowarn -encoding UTF-8 --release 17 -cp "$classpath" \
        -d "$OUT/classes.$$" "$SRC" >&2 || die "javac $SRC failed"
    echo "$stamp" >"$OUT/classes.$$/.stamp"
    [ -d "$OUT/classes" ] && mv "$OUT/classes" "$OUT/classes.old.$$"
    mv "$OUT/classes.$$" "$OUT/classes"
    rm -rf "$OUT/classes.old.$$"
fi

# The launcher: exec, so the test's child is the JVM itself (its stdin, its pid). A small
# heap to start with and the serial collector: a test server on a 2-core machine beside
# other tests. At most 512 MiB: the interop suite's 100 MiB reply is a 100 MB string and its
# 100 MB encoding at once (256 MiB ran out of memory); the other tests use ~70 MB.
cat >"$OUT/run.$$" <<EOF
#!/bin/sh
exec "$java_home/bin/java" -Xms32m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \\
    -Xshare:auto -cp "$OUT/classes:$classpath" InteropServer "\$@"
EOF
chmod 755 "$OUT/run.$$"
mv -f "$OUT/run.$$" "$OUT/run"
echo "$OUT/run"
