// The signing test vectors the portal's Signing page shows and recomputes in the browser: the
// worked examples of docs/PROTOCOL.md ("Signing a request" and "Callbacks"), value for value.
// registry/src/portal/mod.rs's tests parse the JSON below, recompute every string-to-sign and
// signature with the gateway's own signer and find each in docs/PROTOCOL.md, so the page and
// the guide cannot drift apart. Keep the JSON between the markers plain (no comments, no
// trailing commas).

export interface Vector {
  /** "request" (a call to the gateway) or "callback" (a POST the gateway sends your app). */
  kind: "request" | "callback";
  title: string;
  appKey: string;
  secret: string;
  timestamp: string;
  method: string;
  path: string;
  query: string;
  nonce: string;
  body: string;
  /** The string-to-sign, lines joined by "\n". */
  stringToSign: string;
  signature: string;
}

export const VECTORS: Vector[] = /* JSON-BEGIN */ [
  {
    "kind": "request",
    "title": "Worked example 1: GET with a query",
    "appKey": "merchant-1",
    "secret": "s3cr3t-value",
    "timestamp": "1796000000000",
    "method": "GET",
    "path": "/v1/orders/42",
    "query": "b=2&a=hello%20world&a=%2F&c=x+y&d=%E2%9C%93",
    "nonce": "n0nce-0001",
    "body": "",
    "stringToSign": "GET\n/v1/orders/42\na=%2F&a=hello%20world&b=2&c=x%2By&d=%E2%9C%93\nmerchant-1\n1796000000000\nn0nce-0001\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "signature": "769729970a6fb2f192b1f144cd7b5373cec72689e24dd90516fcb9751d369c73"
  },
  {
    "kind": "request",
    "title": "Worked example 2: POST with a body",
    "appKey": "merchant-1",
    "secret": "s3cr3t-value",
    "timestamp": "1796000000000",
    "method": "POST",
    "path": "/v1/orders",
    "query": "",
    "nonce": "n0nce-0002",
    "body": "{\"item\":\"book\",\"qty\":2}",
    "stringToSign": "POST\n/v1/orders\n\nmerchant-1\n1796000000000\nn0nce-0002\n6383114cff22e5f82e81e96fbe30c7239424b9ed893e27fea7eb67532aa03fb9",
    "signature": "b9e9eca162235cc9db8be41daeb80d676ab36455aae179bba0a19d9325af4107"
  },
  {
    "kind": "callback",
    "title": "Worked example 3: verifying a callback",
    "appKey": "merchant-1",
    "secret": "s3cr3t-value",
    "timestamp": "1796000000000",
    "method": "POST",
    "path": "/hooks/portico",
    "query": "shop=7",
    "nonce": "cb0123456789abcdef",
    "body": "{\"id\":\"1796000000000-0\",\"topic\":\"orders\",\"published_at\":\"2026-11-30T00:53:20Z\",\"payload\":{\"order_id\":\"1001\",\"state\":\"paid\"}}",
    "stringToSign": "PORTICO-CALLBACK-v1\nPOST\n/hooks/portico\nshop=7\nmerchant-1\n1796000000000\ncb0123456789abcdef\nd36fe8c2c2e5ba4aabf0ed96bb96a2fedd39b119aa375440f901da1ee64dab91",
    "signature": "cff5413a59f1ff12680e8afab43fce035f3a11a53afdf3a75415389897772714"
  }
] /* JSON-END */;

/** The first line of a callback's string-to-sign (its own signing domain). */
export const CALLBACK_DOMAIN = "PORTICO-CALLBACK-v1";
