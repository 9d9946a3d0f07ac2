import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const here = dirname(fileURLToPath(import.meta.url));

// The console is served by portico-registry at `/` (registry/src/console.rs), the merchants'
// developer portal (portal/, a second entry) at `/portal/` (registry/src/portal/); `npm run dev`
// proxies the admin API to a registry at $PORTICO_REGISTRY (default http://127.0.0.1:9000).
export default defineConfig({
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2020",
    sourcemap: false,
    chunkSizeWarningLimit: 400,
    rollupOptions: {
      input: {
        console: resolve(here, "index.html"),
        portal: resolve(here, "portal/index.html"),
      },
    },
  },
  server: {
    host: "127.0.0.1",
    proxy: {
      "/api": process.env.PORTICO_REGISTRY ?? "http://127.0.0.1:9000",
      "/portal/openapi.json": process.env.PORTICO_REGISTRY ?? "http://127.0.0.1:9000",
      "/portal/apps": process.env.PORTICO_REGISTRY ?? "http://127.0.0.1:9000",
      "/portal/try": process.env.PORTICO_REGISTRY ?? "http://127.0.0.1:9000",
    },
  },
});
