// Calls {{API_ID}} ({{METHOD}} {{PATH}}) through a Portico gateway, signed as the signing
// guide says (the developer portal's Signing page). Node.js 18+, no dependencies.
//
//   PORTICO_APP_KEY=<app key> PORTICO_SECRET=<secret> node call.mjs
//
// PORTICO_BASE_URL overrides the gateway address. PORTICO_TIMESTAMP and PORTICO_NONCE fix the
// signed values, to compare with the guide's worked examples (leave them unset otherwise).
import { createHash, createHmac, randomBytes } from "node:crypto";

const BASE_URL = process.env.PORTICO_BASE_URL || "{{BASE_URL}}";
const APP_KEY = process.env.PORTICO_APP_KEY || "{{APP_KEY}}";
const SECRET = process.env.PORTICO_SECRET || "";
const METHOD = "{{METHOD}}";
const TARGET = {{TARGET}}; // the path and query, exactly as sent (percent-encoded)
const BODY = Buffer.from({{BODY}}, "utf8"); // the exact bytes sent and signed
const SIGNED = {{SIGNED}}; // false: a public API (auth none), no signature needed

const isKept = (b) =>
  (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) || (b >= 0x30 && b <= 0x39) || b === 0x2d || b === 0x5f || b === 0x2e || b === 0x7e;
const isHex = (b) => (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

// Percent-decodes to bytes ('+' stays '+'; an invalid escape stays as it is), then keeps only
// A-Z a-z 0-9 - _ . ~ and writes every other byte as %XX (upper-case hex).
function reencode(text) {
  const raw = Buffer.from(text, "utf8");
  const bytes = [];
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] === 0x25 && i + 2 < raw.length && isHex(raw[i + 1]) && isHex(raw[i + 2])) {
      bytes.push(parseInt(String.fromCharCode(raw[i + 1], raw[i + 2]), 16));
      i += 2;
    } else {
      bytes.push(raw[i]);
    }
  }
  return bytes.map((b) => (isKept(b) ? String.fromCharCode(b) : "%" + b.toString(16).toUpperCase().padStart(2, "0"))).join("");
}

function canonicalQuery(query) {
  const pairs = query
    .split("&")
    .filter((part) => part !== "")
    .map((part) => {
      const i = part.indexOf("=");
      return i < 0 ? [reencode(part), ""] : [reencode(part.slice(0, i)), reencode(part.slice(i + 1))];
    });
  pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  return pairs.map(([name, value]) => `${name}=${value}`).join("&");
}

const q = TARGET.indexOf("?");
const path = q < 0 ? TARGET : TARGET.slice(0, q);
const query = q < 0 ? "" : TARGET.slice(q + 1);
const headers = BODY.length ? { "Content-Type": "application/json" } : {};
if (SIGNED) {
  if (!SECRET) {
    console.error("set PORTICO_SECRET (and PORTICO_APP_KEY) to your app's secret and key");
    process.exit(2);
  }
  const ts = process.env.PORTICO_TIMESTAMP || String(Date.now());
  const nonce = process.env.PORTICO_NONCE || randomBytes(12).toString("base64url");
  const stringToSign = [METHOD, path, canonicalQuery(query), APP_KEY, ts, nonce, createHash("sha256").update(BODY).digest("hex")].join("\n");
  headers["X-Portico-AppKey"] = APP_KEY;
  headers["X-Portico-Timestamp"] = ts;
  headers["X-Portico-Nonce"] = nonce;
  headers["X-Portico-Signature"] = createHmac("sha256", SECRET).update(stringToSign, "utf8").digest("hex");
}
const resp = await fetch(BASE_URL.replace(/\/+$/, "") + TARGET, {
  method: METHOD,
  headers,
  body: BODY.length ? BODY : undefined,
});
console.log(`HTTP ${resp.status}`);
console.log(await resp.text());
process.exit(resp.status < 400 ? 0 : 1);
