// The merchant signature (docs/PROTOCOL.md, "Signing a request"), in the browser: the
// canonical query, SHA-256 of the body and HMAC-SHA256 with WebCrypto (`crypto.subtle`). A
// page served over plain HTTP from another host than localhost has no `crypto.subtle`
// (browsers keep it to secure contexts); the small SHA-256 below stands in then, so the
// portal signs alike everywhere. The secret never leaves the page.

const enc = new TextEncoder();

export const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

export function hex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}

/** Percent-decodes `%XX` (only) to bytes; every other character is its UTF-8 bytes. */
function decode(s: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < s.length; i++) {
    if (s[i] === "%" && /^[0-9A-Fa-f]{2}$/.test(s.slice(i + 1, i + 3))) {
      out.push(parseInt(s.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      const cp = s.codePointAt(i) ?? 0;
      if (cp > 0xffff) i++;
      out.push(...enc.encode(String.fromCodePoint(cp)));
    }
  }
  return out;
}

/** Keeps `A-Z a-z 0-9 - _ . ~`, writes every other byte as `%XX` (upper-case hex). */
function encode(bytes: number[]): string {
  let s = "";
  for (const b of bytes) {
    const c = String.fromCharCode(b);
    s += b < 128 && /[A-Za-z0-9\-_.~]/.test(c) ? c : "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return s;
}

/** The canonical query of a raw query string (without `?`), docs/PROTOCOL.md. */
export function canonicalQuery(raw: string): string {
  const pairs = raw
    .split("&")
    .filter((p) => p !== "")
    .map((p) => {
      const i = p.indexOf("=");
      return i < 0 ? [encode(decode(p)), ""] : [encode(decode(p.slice(0, i))), encode(decode(p.slice(i + 1)))];
    });
  pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  return pairs.map(([n, v]) => `${n}=${v}`).join("&");
}

// ---- SHA-256 and HMAC without crypto.subtle (FIPS 180-4) ----
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
  0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
  0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
  0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
  0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

export function sha256Plain(data: Uint8Array): Uint8Array {
  const h = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
  const len = data.length;
  const padded = new Uint8Array(((len + 9 + 63) >> 6) << 6);
  padded.set(data);
  padded[len] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(len / 0x20000000));
  view.setUint32(padded.length - 4, (len << 3) >>> 0);
  const w = new Uint32Array(64);
  const rotr = (x: number, n: number) => (x >>> n) | (x << (32 - n));
  for (let off = 0; off < padded.length; off += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(off + i * 4);
    for (let i = 16; i < 64; i++) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 64; i++) {
      const t1 = (hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i]) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) >>> 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) >>> 0;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  const out = new Uint8Array(32);
  const ov = new DataView(out.buffer);
  h.forEach((x, i) => ov.setUint32(i * 4, x));
  return out;
}

export function hmacPlain(key: Uint8Array, msg: Uint8Array): Uint8Array {
  let k = key.length > 64 ? sha256Plain(key) : key;
  const block = new Uint8Array(64);
  block.set(k);
  const inner = new Uint8Array(64 + msg.length);
  const outer = new Uint8Array(64 + 32);
  for (let i = 0; i < 64; i++) {
    inner[i] = block[i] ^ 0x36;
    outer[i] = block[i] ^ 0x5c;
  }
  inner.set(msg, 64);
  outer.set(sha256Plain(inner), 64);
  k = sha256Plain(outer);
  return k;
}

/** Whether this page has WebCrypto (a secure context). */
export const webCrypto = typeof crypto !== "undefined" && !!crypto.subtle;

async function sha256Hex(data: Uint8Array): Promise<string> {
  if (webCrypto) return hex(new Uint8Array(await crypto.subtle.digest("SHA-256", data as BufferSource)));
  return hex(sha256Plain(data));
}

/** Lowercase hex HMAC-SHA256 of `message` with `secret` (WebCrypto, else the built-in one). */
export async function hmacHex(secret: string, message: string): Promise<string> {
  const key = enc.encode(secret);
  const msg = enc.encode(message);
  if (webCrypto) {
    const k = await crypto.subtle.importKey("raw", key as BufferSource, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return hex(new Uint8Array(await crypto.subtle.sign("HMAC", k, msg as BufferSource)));
  }
  return hex(hmacPlain(key, msg));
}

/** A fresh nonce: 24 characters of `A-Z a-z 0-9` from the browser's CSPRNG. */
export function freshNonce(): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  return Array.from(bytes, (b) => alphabet[b % alphabet.length]).join("");
}

export interface SignInput {
  method: string;
  path: string;
  query: string;
  appKey: string;
  secret: string;
  timestamp: string;
  nonce: string;
  body: string;
}

export interface Signed {
  stringToSign: string;
  signature: string;
  headers: Record<string, string>;
}

/** Signs a request as docs/PROTOCOL.md says: the string-to-sign, the signature, the headers. */
export async function sign(r: SignInput): Promise<Signed> {
  const bodyHash = r.body === "" ? EMPTY_SHA256 : await sha256Hex(enc.encode(r.body));
  const stringToSign = [r.method.toUpperCase(), r.path, canonicalQuery(r.query), r.appKey, r.timestamp, r.nonce, bodyHash].join("\n");
  const signature = await hmacHex(r.secret, stringToSign);
  return {
    stringToSign,
    signature,
    headers: {
      "X-Portico-AppKey": r.appKey,
      "X-Portico-Timestamp": r.timestamp,
      "X-Portico-Nonce": r.nonce,
      "X-Portico-Signature": signature,
    },
  };
}
