import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, get, request, session } from "./api";
import { navigate, usePath } from "./router";
import { useAction } from "./shared/hooks";
import { Button, ErrorBanner, Field, Link, Toasts, cx, usePoll } from "./ui";
import { ApisPage } from "./pages/Apis";
import { ApiDetailPage } from "./pages/ApiDetail";
import { SwitchesPage } from "./pages/Switches";
import { AppsPage } from "./pages/Apps";
import { HealthPage } from "./pages/Health";
import { ClusterPage, ClustersPage } from "./pages/Clusters";
import { AlertBanner, AlertsPage } from "./pages/Alerts";
import { ReportsPage } from "./pages/Reports";
import { NotificationsPage } from "./pages/Notifications";
import "./styles.css";

const NAV = [
  { to: "/apis", label: "Services & APIs", icon: "M4 5h16v4H4zM4 11h16v4H4zM4 17h10v3H4z" },
  { to: "/switches", label: "Switches", icon: "M7 7h10a5 5 0 010 10H7A5 5 0 017 7zm10 2.5a2.5 2.5 0 100 5 2.5 2.5 0 000-5z" },
  { to: "/apps", label: "Apps", icon: "M12 3l8 4v6c0 4-3.5 7-8 8-4.5-1-8-4-8-8V7z" },
  { to: "/notifications", label: "Notifications", icon: "M4 6h16v10H8l-4 4zM8 10h8M8 13h5" },
  { to: "/clusters", label: "Clusters", icon: "M5 5h5v5H5zM14 5h5v5h-5zM5 14h5v5H5zM14 14h5v5h-5z" },
  { to: "/health", label: "Nodes & health", icon: "M3 12h4l3-7 4 14 3-7h4" },
  { to: "/alerts", label: "Alerts", icon: "M12 4a5 5 0 015 5v4l2 3H5l2-3V9a5 5 0 015-5zM10 19a2 2 0 004 0" },
  { to: "/reports", label: "Reports", icon: "M5 20V10M10 20V4M15 20v-7M20 20V8" },
];

function SignIn({ onDone }: { onDone: () => void }) {
  const [token, setToken] = useState("");
  const [operator, setOperator] = useState(session.operator());
  const { run, busy, error } = useAction(async () => {
    // Any authenticated read proves the token.
    await request("GET", "/audit", { token: token.trim(), query: { limit: "1" } });
    session.signIn(token.trim(), operator.trim() || "console");
    onDone();
  });
  const submit = (e: Event) => {
    e.preventDefault();
    run();
  };
  return (
    <div class="signin">
      <form class="signin-card" onSubmit={submit}>
        <div class="brand brand-lg">
          <Logo /> Portico <span>console</span>
        </div>
        <p class="muted">Sign in with the registry's admin token. It is kept in this tab only (sessionStorage).</p>
        <Field label="Admin token">
          <input name="token" type="password" autoComplete="off" value={token} onInput={(e) => setToken((e.target as HTMLInputElement).value)} required data-autofocus />
        </Field>
        <Field label="Your name" hint="Recorded in the audit log and on the switches you flip.">
          <input name="operator" value={operator} placeholder="e.g. sre-alice" onInput={(e) => setOperator((e.target as HTMLInputElement).value)} required />
        </Field>
        <ErrorBanner
          error={error}
          title={error instanceof ApiError && error.status === 401 ? "That token was refused" : "Sign-in failed"}
        />
        <Button kind="primary" busy={busy} type="submit" class="btn-block">
          Sign in
        </Button>
      </form>
    </div>
  );
}

function Logo() {
  return (
    <svg width="26" height="26" viewBox="0 0 32 32" aria-hidden="true">
      <rect width="32" height="32" rx="7" fill="#2f6fed" />
      <path d="M8 25V9h4v16zm6 0V7h4v18zm6 0V11h4v14z" fill="#fff" />
    </svg>
  );
}

function RegistryStatus() {
  const [state, setState] = useState<{ ok: boolean; text: string } | null>(null);
  usePoll(async () => {
    try {
      const r = await get<{ status: string; zookeeper: string; root: string }>("/health");
      setState({ ok: r.data.status === "ok", text: `ZooKeeper ${r.data.zookeeper} · ${r.data.root}` });
    } catch (e) {
      setState({ ok: false, text: e instanceof ApiError ? `${e.code}: ${e.message}` : "registry unreachable" });
    }
  }, 5000);
  if (!state) return null;
  return (
    <div class={cx("reg-status", state.ok ? "ok" : "bad")} title={state.text}>
      <i /> {state.ok ? "Registry connected" : "Registry degraded"}
      <span class="reg-detail">{state.text}</span>
    </div>
  );
}

function Shell() {
  const path = usePath();
  const [, force] = useState(0);
  useEffect(() => {
    const off = () => {
      session.signOut();
      force((n) => n + 1);
    };
    window.addEventListener("portico:unauthorized", off);
    return () => window.removeEventListener("portico:unauthorized", off);
  }, []);
  if (!session.token()) return <SignIn onDone={() => force((n) => n + 1)} />;
  if (path === "/" || path === "") {
    navigate("/apis", true);
    return null;
  }
  let page;
  const m = path.match(/^\/apis\/([^/]+)$/);
  if (m) page = <ApiDetailPage id={decodeURIComponent(m[1])} />;
  else if (path.startsWith("/apis")) page = <ApisPage />;
  else if (path.startsWith("/switches")) page = <SwitchesPage />;
  else if (path.startsWith("/apps")) page = <AppsPage />;
  else if (path.startsWith("/health")) page = <HealthPage />;
  else if (path.startsWith("/alerts")) page = <AlertsPage />;
  else if (path.startsWith("/reports")) page = <ReportsPage />;
  else if (path.startsWith("/notifications")) page = <NotificationsPage />;
  else if (path.match(/^\/clusters\/[^/]+$/)) page = <ClusterPage name={decodeURIComponent(path.slice("/clusters/".length))} />;
  else if (path.startsWith("/clusters")) page = <ClustersPage />;
  else
    page = (
      <div class="page">
        <h1>Not found</h1>
        <p>
          No console page at <code>{path}</code>. <Link to="/apis">Go to Services &amp; APIs</Link>.
        </p>
      </div>
    );
  return (
    <div class="shell">
      <aside class="sidebar">
        <div class="sidebar-inner">
        <div class="brand">
          <Logo /> Portico
        </div>
        <nav>
          {NAV.map((n) => (
            <Link key={n.to} to={n.to} class={cx("nav-item", path.startsWith(n.to) && "active")}>
              <svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true">
                <path d={n.icon} fill="none" stroke="currentColor" stroke-width="1.8" stroke-linejoin="round" />
              </svg>
              {n.label}
            </Link>
          ))}
        </nav>
        <div class="sidebar-foot">
          <RegistryStatus />
          <div class="whoami">
            Signed in as <b>{session.operator() || "console"}</b>
          </div>
          <button
            class="linkish"
            onClick={() => {
              session.signOut();
              force((n) => n + 1);
            }}
          >
            Sign out
          </button>
          <a class="linkish" href="/api/v1/openapi.json" target="_blank" rel="noreferrer">
            API reference (OpenAPI)
          </a>
        </div>
        </div>
      </aside>
      <main class="content">
        <AlertBanner />
        {page}
      </main>
      <Toasts />
    </div>
  );
}

const root = document.getElementById("app");
if (root) render(<Shell />, root);
