// What the gateways serve of a document, next to what the tree says (docs/operations/registry.md,
// "What the gateways serve"): a document refused by any gateway is shown as refused, with the
// reason, the version still served and who wrote it; never as if it were served.
import { Item, Refusal } from "./api";
import { ago, fmtTime } from "./ui";

/** The refusals of a listed document (none when the gateways accept it or were not read). */
export function refusalsOf(item?: Item<unknown> | null): Refusal[] {
  return item?.served?.refused ?? [];
}

/** The headline of a refusal: "not valid JSON" when the document is not JSON, else the first gateway's reason. */
export function refusalHeadline(item: Item<unknown>): string {
  if (item.error) return "not valid JSON";
  return refusalsOf(item)[0]?.reason ?? "";
}

/** Why and by whom a document is refused, and which version is still served. */
export function RefusedNote({ item, served }: { item: Item<unknown>; served?: string }) {
  const refused = refusalsOf(item);
  if (!refused.length) return null;
  const kept = refused.find((r) => r.kept_previous)?.kept ?? null;
  const nodes = refused.map((r) => r.node_id).join(", ");
  const keptAny = refused.some((r) => r.kept_previous);
  return (
    <div class="refused-note" data-testid="refused">
      <div class="bad-text">
        <b>refused</b>: {refusalHeadline(item)}
        {served !== undefined && (
          <>
            , gateways still serve: <b data-testid="still-served">{served}</b>
          </>
        )}
      </div>
      <div class="sub">
        by {nodes}
        {item.error ? <> · {refused[0]?.reason}</> : null}
      </div>
      <div class="sub">
        {keptAny ? (
          <>
            the previous version is served
            {kept?.updated_by || kept?.updated_at ? (
              <>
                {" "}
                (written by {kept?.updated_by ?? "?"}
                {kept?.updated_at ? <span title={fmtTime(kept.updated_at)}> {ago(kept.updated_at)}</span> : null})
              </>
            ) : null}
          </>
        ) : (
          <>no previous version: not served at all</>
        )}
        {item.written_at ? (
          <>
            {" "}
            · the refused one was written <span title={fmtTime(item.written_at)}>{ago(item.written_at)}</span>
          </>
        ) : null}
      </div>
    </div>
  );
}
