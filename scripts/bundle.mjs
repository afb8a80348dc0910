#!/usr/bin/env node
// Bundles the compiled CLI and server (dist/src, from `tsc -p tsconfig.build.json`) into dist/bundle/, which
// bin/berth runs.
//
//   node scripts/bundle.mjs
//
// Why: `berth serve` loads about 500 ES modules (zod, ajv, hono, the MCP SDK and Berth's own), and on this
// 2-core host Node's module loader, not the code, was a third of a restart: resolving, stat-ing and reading
// each file. A restart re-adopting 30 sessions has a 3 s target (issue 7). The bundle is a handful of files
// (one per lazily loaded CLI verb group), with the same code.
//
// Native and WebAssembly packages stay outside (better-sqlite3, pg, cedar-wasm load files beside their own
// modules), resolved from node_modules as before. Source paths that Berth finds at run time (package.json,
// the console, the guest kernel) are found by walking up to package.json, which works from dist/bundle too.
// Written to a temporary directory and swapped in, so a CLI starting meanwhile sees the old bundle or the
// new one, not half of one.
import { existsSync, renameSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'rolldown';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const ENTRY = join(ROOT, 'dist/src/cli/main.js');
const OUT = join(ROOT, 'dist/bundle');

/** Packages that read files beside their own modules (a .node addon, a .wasm) or are loaded only on request. */
const EXTERNAL = [/^better-sqlite3($|\/)/, /^pg($|\/)/, /^@cedar-policy\/cedar-wasm($|\/)/];

if (!existsSync(ENTRY)) {
  console.error(`bundle: ${ENTRY} is missing; compile first: tsc -p tsconfig.build.json`);
  process.exit(1);
}
const tmp = `${OUT}.tmp-${process.pid}`;
rmSync(tmp, { recursive: true, force: true });
await build({
  input: { berth: ENTRY },
  platform: 'node',
  external: EXTERNAL,
  logLevel: 'warn',
  output: { dir: tmp, format: 'esm', entryFileNames: '[name].js', chunkFileNames: '[name]-[hash].js', sourcemap: false },
});
const old = `${OUT}.old-${process.pid}`;
if (existsSync(OUT)) renameSync(OUT, old);
renameSync(tmp, OUT);
rmSync(old, { recursive: true, force: true });
