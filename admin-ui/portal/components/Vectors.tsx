// docs/PROTOCOL.md's worked examples (portal/vectors.ts) as the Signing and Notifications
// pages show them, each recomputed in this browser and marked when it matches.
import { useEffect, useState } from "preact/hooks";
import { Code } from "../../src/shared/ui";
import { canonicalQuery, hmacHex, sign } from "../sign";
import { CALLBACK_DOMAIN, VECTORS } from "../vectors";

async function computeVector(v: (typeof VECTORS)[number]): Promise<{ sts: string; signature: string }> {
  const s = await sign({ method: v.method, path: v.path, query: v.query, appKey: v.appKey, secret: v.secret, timestamp: v.timestamp, nonce: v.nonce, body: v.body });
  if (v.kind !== "callback") return { sts: s.stringToSign, signature: s.signature };
  const sts = `${CALLBACK_DOMAIN}\n${s.stringToSign}`;
  return { sts, signature: await hmacHex(v.secret, sts) };
}

export function VectorSection({ v, i, computed }: { v: (typeof VECTORS)[number]; i: number; computed?: { sts: string; signature: string } }) {
  return (
    <section class="vector" data-vector={i + 1}>
      <h3>{v.title}</h3>
      <p class="sub">
        App key <code>{v.appKey}</code>, secret <code>{v.secret}</code>, timestamp <code>{v.timestamp}</code>, nonce <code>{v.nonce}</code>
        {v.body ? (
          <>
            , body ({new TextEncoder().encode(v.body).length} bytes, exactly as sent) <code>{v.body}</code>
          </>
        ) : (
          ", no body"
        )}
        :
      </p>
      <Code>{`${v.method} ${v.path}${v.query ? `?${v.query}` : ""}`}</Code>
      {v.query ? (
        <p class="sub">
          Canonical query: <code>{canonicalQuery(v.query)}</code>
        </p>
      ) : null}
      <p class="sub">The string-to-sign:</p>
      <Code data-sts>
        {v.stringToSign}
      </Code>
      <p>
        Signature: <code>{v.signature}</code>{" "}
        {computed ? (
          computed.signature === v.signature && computed.sts === v.stringToSign ? (
            <span class="pill ok" data-check="match">
              this browser computes the same
            </span>
          ) : (
            <span class="pill bad" data-check="mismatch">
              this browser computes {computed.signature}
            </span>
          )
        ) : null}
      </p>
    </section>
  );
}

export function useVectors(): { sts: string; signature: string }[] {
  const [computed, setComputed] = useState<{ sts: string; signature: string }[]>([]);
  useEffect(() => {
    Promise.all(VECTORS.map(computeVector)).then(setComputed);
  }, []);
  return computed;
}
