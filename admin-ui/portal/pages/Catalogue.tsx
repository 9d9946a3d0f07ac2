// The catalogue: every API of the document by tag, searchable by id, path or description.
import { useState } from "preact/hooks";
import type { Op, PortalDocument } from "../types";

export function Catalogue({ doc, ops }: { doc: PortalDocument; ops: Op[] }) {
  const [q, setQ] = useState(new URLSearchParams(location.hash.split("?")[1] ?? "").get("q") ?? "");
  const words = q.toLowerCase().split(/\s+/).filter(Boolean);
  const shown = ops.filter((o) => {
    const hay = `${o.id} ${o.method} ${o.path} ${o.op.summary ?? ""} ${o.op.description ?? ""} ${(o.op.tags ?? []).join(" ")}`.toLowerCase();
    return words.every((w) => hay.includes(w));
  });
  const groups = new Map<string, Op[]>();
  for (const o of shown) {
    const tag = o.op.tags?.[0] ?? "other";
    groups.set(tag, [...(groups.get(tag) ?? []), o]);
  }
  return (
    <div>
      <h1>{doc.info?.title}</h1>
      <p class="muted">{doc.info?.description?.split("\n\n")[0]}</p>
      <input class="search" type="search" name="search" placeholder="Search APIs by id, path or description" value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} autofocus />
      <p class="sub" data-count={shown.length}>
        {shown.length} of {ops.length} operations
      </p>
      {[...groups.entries()].map(([tag, list]) => (
        <section class="group">
          <h3>{tag}</h3>
          <table class="catalogue">
            <tbody>
              {list.map((o) => (
                <tr data-api={o.op["x-portico-api"]}>
                  <td>
                    <span class={`verb ${o.method}`}>{o.method.toUpperCase()}</span>
                  </td>
                  <td class="mono">
                    <a href={`#/api/${encodeURIComponent(o.id)}`}>{o.path}</a>
                  </td>
                  <td class="mono">{o.op["x-portico-api"]}</td>
                  <td>{o.op["x-portico-auth"] === "signature" ? <span class="pill">signed</span> : <span class="pill ok">public</span>}</td>
                  <td class="desc">{o.op.summary !== o.op["x-portico-api"] ? o.op.summary : ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      ))}
      {shown.length === 0 ? <p class="muted">No API matches “{q}”.</p> : null}
    </div>
  );
}
