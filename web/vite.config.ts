import { defineConfig } from "vite";

// The build is committed in dist/ and embedded in the changegate binary, so
// `cargo build` needs neither Node nor the network. Hashed file names let the
// server cache assets for good; the page itself is never cached.
export default defineConfig({
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "assets",
    sourcemap: false,
    rollupOptions: {
      output: {
        entryFileNames: "assets/app-[hash].js",
        chunkFileNames: "assets/[name]-[hash].js",
        assetFileNames: "assets/[name]-[hash][extname]",
      },
    },
  },
});
