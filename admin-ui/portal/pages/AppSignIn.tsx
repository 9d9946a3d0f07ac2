// "My app": the app key and secret sign a request for the app's own document (its APIs, its
// rate limits, its topics); the secret stays in the page.
import { useAction } from "../../src/shared/hooks";
import { Button, ErrorText } from "../../src/shared/ui";
import { appDocument } from "../api";
import { Credentials } from "../components/Credentials";
import type { Creds, PortalDocument } from "../types";

export function AppSignIn({ creds, setCreds, onDoc }: { creds: Creds; setCreds: (c: Creds) => void; onDoc: (d: PortalDocument) => void }) {
  const { run: load, busy, error } = useAction(async () => {
    onDoc(await appDocument(creds));
    location.hash = "#/";
  });
  return (
    <div>
      <h1>Your app's APIs</h1>
      <p>
        Enter your app key and secret to see the APIs granted to your app (and its own rate limits). The request is signed in this browser like any call; the secret is not sent.
      </p>
      <Credentials creds={creds} setCreds={setCreds} />
      <div class="row">
        <Button kind="primary" disabled={busy || !creds.appKey || !creds.secret} onClick={load}>
          Show my APIs
        </Button>
        <ErrorText error={error} />
      </div>
    </div>
  );
}
