// The portal's routes live in the URL's hash (the registry serves one page at /portal/):
// #/ (catalogue, ?q= a search), #/api/<operationId>, #/signing, #/errors, #/notifications, #/app.
import { useEffect, useState } from "preact/hooks";

/** The current hash (`#/` when none); a change scrolls to the top. */
export function useHash(): string {
  const [hash, setHash] = useState(location.hash || "#/");
  useEffect(() => {
    const on = () => {
      setHash(location.hash || "#/");
      window.scrollTo(0, 0);
    };
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return hash;
}
