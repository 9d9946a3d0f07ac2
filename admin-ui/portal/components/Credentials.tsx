// The app key and secret fields ("try it" and "My app" share them and what was typed).
import type { Creds } from "../types";

export function Credentials({ creds, setCreds, autocomplete }: { creds: Creds; setCreds: (c: Creds) => void; autocomplete?: string }) {
  return (
    <div class="grid2">
      <label>
        App key
        <input name="app-key" value={creds.appKey} onInput={(e) => setCreds({ ...creds, appKey: (e.target as HTMLInputElement).value.trim() })} autocomplete={autocomplete} />
      </label>
      <label>
        Secret
        <input name="secret" type="password" value={creds.secret} onInput={(e) => setCreds({ ...creds, secret: (e.target as HTMLInputElement).value })} autocomplete={autocomplete} />
      </label>
    </div>
  );
}
