// The copy-ready code of an API (curl, Python, Node.js, Java, Go), one tab each.
import { useState } from "preact/hooks";
import { Button, Code, copyText } from "../../src/shared/ui";
import type { CodeSample } from "../types";

export function Snippets({ samples }: { samples: CodeSample[] }) {
  const [tab, setTab] = useState(0);
  const [copied, setCopied] = useState("");
  if (!samples?.length) return null;
  const s = samples[Math.min(tab, samples.length - 1)];
  return (
    <div class="snippets">
      <div class="tabs" role="tablist">
        {samples.map((x, i) => (
          <button role="tab" data-snippet={x["x-id"]} class={i === tab ? "tab on" : "tab"} aria-selected={i === tab} onClick={() => (setTab(i), setCopied(""))}>
            {x.label}
          </button>
        ))}
        <span class="grow" />
        <Button data-action="copy-snippet" onClick={async () => setCopied((await copyText(s.source)) ? `Copied the ${s.label} snippet` : "Copy failed: select the text instead")}>
          Copy
        </Button>
      </div>
      <p class="sub">
        Save as <code>{s["x-file"]}</code> and run <code>{s["x-run"]}</code>.{" "}
        <span class="copied" role="status">
          {copied}
        </span>
      </p>
      <Code data-snippet-source={s["x-id"]}>{s.source}</Code>
    </div>
  );
}
