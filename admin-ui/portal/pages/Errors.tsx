// The error envelope and every code a merchant can meet, with what to do about it.
import { Code } from "../../src/shared/ui";
import type { PortalDocument } from "../types";

export function Errors({ doc }: { doc: PortalDocument }) {
  const codes = doc["x-portico-error-codes"] ?? [];
  const grpc = doc["x-portico-grpc-codes"] ?? [];
  return (
    <div data-page="errors">
      <h1>Errors</h1>
      <p>Every answer the gateway makes itself (rather than the API's backend) has this JSON body:</p>
      <Code>{'{"code": "SIGNATURE_INVALID", "message": "signature does not match", "request_id": "9f3c2a7e5b1d4c08"}'}</Code>
      <p>
        Branch on the HTTP status and <code>code</code>; <code>message</code> is text for people and may change. Every answer, success or not, carries <code>X-Portico-Request-Id</code>: send
        your own (1–64 of A-Z a-z 0-9 . _ -) to follow a call through your logs, and quote it when you ask for help.
      </p>
      <table class="props" data-errors>
        <thead>
          <tr>
            <th>status</th>
            <th>code</th>
            <th>meaning</th>
            <th>what to do</th>
          </tr>
        </thead>
        <tbody>
          {codes.map((c) => (
            <tr data-code={c.code}>
              <td>{c.status}</td>
              <td class="mono">{c.code}</td>
              <td class="desc">{c.meaning}</td>
              <td class="desc">{c.what_to_do}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Retrying</h2>
      <p>
        Retry on 429 and 503 after <code>Retry-After</code> seconds (or with backoff), with a <b>new nonce and timestamp</b>; do not retry other 4xx unchanged. Answers about the backend (502,
        503, 504) and internal errors (500) carry a fixed message: the request id is what operators need.
      </p>
      {grpc.length ? (
        <>
          <h2>gRPC-backed APIs</h2>
          <p class="sub">
            An API marked gRPC-backed reports its backend's error status with <code>code</code> the status name and <code>message</code> the backend's message (a fixed message for
            UNAVAILABLE, INTERNAL, UNKNOWN and DEADLINE_EXCEEDED), with this HTTP status:
          </p>
          <table class="props" data-grpc-codes>
            <tbody>
              {grpc.map((g) => (
                <tr>
                  <td class="mono">{g.code}</td>
                  <td>→ HTTP {g.status}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
    </div>
  );
}
