// Calls {{API_ID}} ({{METHOD}} {{PATH}}) through a Portico gateway, signed as the signing
// guide says (the developer portal's Signing page). Java 11+, no dependencies:
//
//   PORTICO_APP_KEY=<app key> PORTICO_SECRET=<secret> java PorticoCall.java
//
// PORTICO_BASE_URL overrides the gateway address. PORTICO_TIMESTAMP and PORTICO_NONCE fix the
// signed values, to compare with the guide's worked examples (leave them unset otherwise).
import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public class PorticoCall {
    static final String METHOD = "{{METHOD}}";
    // The path and query, exactly as sent (percent-encoded).
    static final String TARGET = {{TARGET}};
    // The exact bytes sent and signed.
    static final byte[] BODY = {{BODY}}.getBytes(StandardCharsets.UTF_8);
    // false: a public API (auth none), no signature needed.
    static final boolean SIGNED = {{SIGNED}};

    static String env(String name, String fallback) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? fallback : v;
    }

    static boolean kept(int b) {
        return (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')
                || b == '-' || b == '_' || b == '.' || b == '~';
    }

    static int hexValue(int b) {
        return Character.digit(b, 16);
    }

    // Percent-decodes to bytes ('+' stays '+'; an invalid escape stays as it is), then keeps
    // only A-Z a-z 0-9 - _ . ~ and writes every other byte as %XX (upper-case hex).
    static String reencode(String text) {
        byte[] raw = text.getBytes(StandardCharsets.UTF_8);
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        for (int i = 0; i < raw.length; i++) {
            if (raw[i] == '%' && i + 2 < raw.length && hexValue(raw[i + 1]) >= 0 && hexValue(raw[i + 2]) >= 0) {
                bytes.write(hexValue(raw[i + 1]) * 16 + hexValue(raw[i + 2]));
                i += 2;
            } else {
                bytes.write(raw[i]);
            }
        }
        StringBuilder out = new StringBuilder();
        for (byte b : bytes.toByteArray()) {
            int v = b & 0xff;
            if (kept(v)) {
                out.append((char) v);
            } else {
                out.append(String.format("%%%02X", v));
            }
        }
        return out.toString();
    }

    static String canonicalQuery(String query) {
        List<String[]> pairs = new ArrayList<>();
        for (String part : query.split("&")) {
            if (part.isEmpty()) {
                continue;
            }
            int i = part.indexOf('=');
            pairs.add(i < 0 ? new String[] {reencode(part), ""}
                    : new String[] {reencode(part.substring(0, i)), reencode(part.substring(i + 1))});
        }
        pairs.sort((a, b) -> a[0].equals(b[0]) ? a[1].compareTo(b[1]) : a[0].compareTo(b[0]));
        StringBuilder out = new StringBuilder();
        for (String[] p : pairs) {
            if (out.length() > 0) {
                out.append('&');
            }
            out.append(p[0]).append('=').append(p[1]);
        }
        return out.toString();
    }

    static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder();
        for (byte b : bytes) {
            out.append(String.format("%02x", b & 0xff));
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        String baseUrl = env("PORTICO_BASE_URL", "{{BASE_URL}}").replaceAll("/+$", "");
        String appKey = env("PORTICO_APP_KEY", "{{APP_KEY}}");
        String secret = env("PORTICO_SECRET", "");
        int q = TARGET.indexOf('?');
        String path = q < 0 ? TARGET : TARGET.substring(0, q);
        String query = q < 0 ? "" : TARGET.substring(q + 1);
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(baseUrl + TARGET))
                .method(METHOD, BODY.length == 0 ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofByteArray(BODY));
        if (BODY.length > 0) {
            request.header("Content-Type", "application/json");
        }
        if (SIGNED) {
            if (secret.isEmpty()) {
                System.err.println("set PORTICO_SECRET (and PORTICO_APP_KEY) to your app's secret and key");
                System.exit(2);
            }
            String ts = env("PORTICO_TIMESTAMP", String.valueOf(System.currentTimeMillis()));
            byte[] random = new byte[12];
            new SecureRandom().nextBytes(random);
            String nonce = env("PORTICO_NONCE", Base64.getUrlEncoder().withoutPadding().encodeToString(random));
            String bodyHash = hex(MessageDigest.getInstance("SHA-256").digest(BODY));
            String stringToSign = String.join("\n", METHOD, path, canonicalQuery(query), appKey, ts, nonce, bodyHash);
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            request.header("X-Portico-AppKey", appKey)
                    .header("X-Portico-Timestamp", ts)
                    .header("X-Portico-Nonce", nonce)
                    .header("X-Portico-Signature", hex(mac.doFinal(stringToSign.getBytes(StandardCharsets.UTF_8))));
        }
        HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        HttpResponse<String> response = client.send(request.build(), HttpResponse.BodyHandlers.ofString());
        System.out.println("HTTP " + response.statusCode());
        System.out.println(response.body());
        System.exit(response.statusCode() < 400 ? 0 : 1);
    }
}
