// The merchants' developer portal (docs/operations/portal.md, "The merchants' portal"), served by
// the registry at /portal/ without the admin token. Everything it shows comes from the
// registry's generated OpenAPI documents: /portal/openapi.json (every public API) or, after a
// merchant signs in with an app key and secret, /portal/apps/<key>/openapi.json (signed in
// the browser: the secret never leaves the page). "Try it" signs in the browser too and asks
// the registry to forward the signed request to a sandbox listener (POST /portal/try).
// The portal is self-contained: merchants have no repository, so its Signing, Errors and
// Notifications pages say everything (docs/PROTOCOL.md in merchant words), and no page points
// to a file (registry/tests/portal.rs and portal_e2e.rs check it).
// This file is the shell: the header, the signed-in banner and which page a hash shows; the
// pages are in pages/, their parts in components/, the calls in api.ts.
import { render } from "preact";
import { useMemo, useState } from "preact/hooks";
import { errorLine } from "../src/shared/http";
import { useLoad } from "../src/shared/hooks";
import { publicDocument } from "./api";
import { useHash } from "./hash";
import { operations } from "./openapi";
import { ApiPage } from "./pages/ApiPage";
import { AppSignIn } from "./pages/AppSignIn";
import { Catalogue } from "./pages/Catalogue";
import { Errors } from "./pages/Errors";
import { Notifications } from "./pages/Notifications";
import { Signing } from "./pages/Signing";
import type { Creds } from "./types";
import "./portal.css";

function Portal() {
  const hash = useHash();
  // The public document at first; "My app" puts the app's own in its place.
  const catalogue = useLoad(publicDocument);
  const doc = catalogue.data;
  const [creds, setCreds] = useState<Creds>({ appKey: "", secret: "" });
  const ops = useMemo(() => operations(doc), [doc]);
  const route = hash.replace(/^#/, "").split("?")[0];
  let page;
  if (catalogue.error) page = <p class="bad">The API catalogue could not be loaded: {errorLine(catalogue.error)}</p>;
  else if (!doc) page = <p class="muted">Loading the API catalogue…</p>;
  else if (route.startsWith("/api/")) {
    const id = decodeURIComponent(route.slice(5));
    const op = ops.find((o) => o.id === id);
    page = op ? <ApiPage doc={doc} op={op} creds={creds} setCreds={setCreds} /> : <p class="bad">No API {id} in this catalogue.</p>;
  } else if (route === "/signing") page = <Signing />;
  else if (route === "/errors") page = <Errors doc={doc} />;
  else if (route === "/notifications") page = <Notifications doc={doc} />;
  else if (route === "/app") page = <AppSignIn creds={creds} setCreds={setCreds} onDoc={catalogue.set} />;
  else page = <Catalogue doc={doc} ops={ops} />;
  return (
    <div class="shell">
      <header>
        <a class="brand" href="#/">
          Portico <span>developer portal</span>
        </a>
        <nav>
          <a href="#/">APIs</a>
          <a href="#/signing">Signing</a>
          <a href="#/errors">Errors</a>
          <a href="#/notifications">Notifications</a>
          <a href="#/app">My app</a>
          <a href="/portal/openapi.json" target="_blank" rel="noopener">
            OpenAPI
          </a>
        </nav>
      </header>
      {doc?.["x-portico-app"] ? (
        <div class="banner">
          Showing the APIs of app <b>{doc["x-portico-app"]}</b>.{" "}
          <button class="link" onClick={() => (catalogue.set(null), catalogue.reload())}>
            Show all public APIs
          </button>
        </div>
      ) : null}
      <main>{page}</main>
    </div>
  );
}

render(<Portal />, document.getElementById("portal")!);
