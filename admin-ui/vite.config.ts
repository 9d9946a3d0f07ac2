import { defineConfig } from "vite";

// The console is served by portico-registry at `/` (registry/src/console.rs); `npm run dev`
// proxies the admin API to a registry at $PORTICO_REGISTRY (default http://127.0.0.1:9000).
export default defineConfig({
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2020",
    sourcemap: false,
    chunkSizeWarningLimit: 400,
  },
  server: {
    host: "127.0.0.1",
    proxy: {
      "/api": process.env.PORTICO_REGISTRY ?? "http://127.0.0.1:9000",
    },
  },
});
