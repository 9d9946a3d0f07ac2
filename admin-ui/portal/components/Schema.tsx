// A schema as a table of its fields (nested objects indented, three levels deep), with its
// JSON Schema on demand.
import { useState } from "preact/hooks";
import { Code } from "../../src/shared/ui";
import { deref, typeOf } from "../openapi";
import type { JsonSchema, PortalDocument } from "../types";

function SchemaRows({ doc, schema, depth, prefix }: { doc: PortalDocument; schema: JsonSchema | undefined; depth: number; prefix: string }) {
  const s = deref(doc, schema);
  const props = s?.properties && typeof s.properties === "object" ? Object.entries(s.properties) : [];
  const required: string[] = Array.isArray(s?.required) ? s.required : [];
  return (
    <>
      {props.map(([name, p]) => {
        const child = deref(doc, p?.type === "array" ? p.items : p);
        const nested = depth < 3 && child?.properties && !(typeof p?.$ref === "string" && depth > 0 && p.$ref === schema?.$ref);
        return (
          <>
            <tr key={prefix + name}>
              <td class="mono" style={{ paddingLeft: `${8 + depth * 18}px` }}>
                {prefix}
                {name}
              </td>
              <td class="mono">{typeOf(doc, p)}</td>
              <td>{required.includes(name) ? <span class="req">required</span> : ""}</td>
              <td class="desc">{deref(doc, p)?.description ?? ""}</td>
            </tr>
            {nested ? <SchemaRows doc={doc} schema={p?.type === "array" ? p.items : p} depth={depth + 1} prefix={`${prefix}${name}${p?.type === "array" ? "[]" : ""}.`} /> : null}
          </>
        );
      })}
    </>
  );
}

export function Schema({ doc, schema, title }: { doc: PortalDocument; schema: JsonSchema; title: string }) {
  const s = deref(doc, schema);
  const [raw, setRaw] = useState(false);
  return (
    <div class="schema">
      <div class="row">
        <h4>{title}</h4>
        <span class="mono muted">{typeOf(doc, schema)}</span>
        <button class="link" onClick={() => setRaw(!raw)}>
          {raw ? "hide JSON Schema" : "JSON Schema"}
        </button>
      </div>
      {s?.properties ? (
        <table class="props">
          <thead>
            <tr>
              <th>field</th>
              <th>type</th>
              <th></th>
              <th>description</th>
            </tr>
          </thead>
          <tbody>
            <SchemaRows doc={doc} schema={schema} depth={0} prefix="" />
          </tbody>
        </table>
      ) : (
        <p class="muted">{s?.description ?? "No fields listed."}</p>
      )}
      {raw ? <Code>{JSON.stringify(s, null, 2)}</Code> : null}
    </div>
  );
}
