#!/usr/bin/env node
// Builds the in-sandbox agent: a static binary, so it runs in any root filesystem (no libc needed there).
//
//   node scripts/build-agent.mjs [--out PATH] [--force]
//
//   --out PATH  where to write the binary. Default: dist/agent/berth-agent (relative to the repo root).
//   --force     rebuild even when the cache key matches.
//
// The sources are src/drivers/agent/c/ (agent.h and its .c files, compiled together into one binary).
// Skips the build when the binary's cache key (a hash of every source's name and content and the compiler
// flags, kept in PATH.key) matches: editing, adding or removing any source rebuilds. The binary is written
// to a temporary name and renamed, so a running sandbox or test never sees a half-written file.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCE_DIR = join(ROOT, 'src/drivers/agent/c');
const DEFAULT_OUT = join(ROOT, 'dist/agent/berth-agent');
const CFLAGS = ['-O2', '-static', '-Wall', '-Wextra', '-Werror'];
const INSTALL_HINT = 'install a C toolchain with static glibc: apt-get install gcc libc6-dev';

/** The agent's sources (every .c and .h file), sorted so the key does not depend on directory order. */
export function agentSources() {
  const names = existsSync(SOURCE_DIR) ? readdirSync(SOURCE_DIR).filter((n) => /\.[ch]$/.test(n)).sort() : [];
  if (!names.some((n) => n.endsWith('.c'))) throw new Error(`agent sources missing: no .c file in ${SOURCE_DIR}`);
  return names.map((n) => join(SOURCE_DIR, n));
}

/** The cache key of a build: the flags and each source's name and content. */
export function agentCacheKey(sources = agentSources()) {
  const h = createHash('sha256').update(JSON.stringify(CFLAGS));
  for (const f of sources) h.update(`\0${f.slice(SOURCE_DIR.length + 1)}\0`).update(readFileSync(f));
  return h.digest('hex');
}

/**
 * Compiles the agent to `out` unless a binary built from the same sources and flags is already there.
 * @param {{ out?: string, force?: boolean, log?: (line: string) => void }} [opts]
 * @returns {{ path: string, built: boolean }}
 */
export function buildAgent(opts = {}) {
  const out = resolve(opts.out ?? DEFAULT_OUT);
  const log = opts.log ?? ((line) => process.stderr.write(`${line}\n`));
  const sources = agentSources();
  const key = agentCacheKey(sources);
  const keyFile = `${out}.key`;
  const keyOf = (f) => (existsSync(f) ? readFileSync(f, 'utf8').trim() : '');
  if (!opts.force && existsSync(out) && keyOf(keyFile) === key) return { path: out, built: false };

  const probe = spawnSync('gcc', ['--version'], { encoding: 'utf8' });
  if (probe.error) throw new Error(`gcc not found (${probe.error.code ?? probe.error.message}): ${INSTALL_HINT}`);

  mkdirSync(dirname(out), { recursive: true });
  const tmp = `${out}.tmp-${process.pid}`;
  const cc = spawnSync('gcc', [...CFLAGS, '-o', tmp, ...sources.filter((f) => f.endsWith('.c'))], { encoding: 'utf8' });
  if (cc.status !== 0) {
    rmSync(tmp, { force: true });
    const text = `${cc.stderr ?? ''}${cc.stdout ?? ''}`.trim();
    const hint = /cannot find -lc|crt1\.o|stdio\.h/.test(text) ? `\n(${INSTALL_HINT})` : '';
    throw new Error(`gcc failed to build the agent:\n${text}${hint}`);
  }
  renameSync(tmp, out);
  writeFileSync(keyFile, `${key}\n`);
  log(`built ${out}`);
  return { path: out, built: true };
}

function parseArgs(argv) {
  const opts = { force: false, out: undefined };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--force') opts.force = true;
    else if (argv[i] === '--out' && i + 1 < argv.length) opts.out = argv[++i];
    else throw new Error(`usage: build-agent.mjs [--out PATH] [--force] (unexpected ${JSON.stringify(argv[i])})`);
  }
  return opts;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    buildAgent(parseArgs(process.argv.slice(2)));
  } catch (e) {
    process.stderr.write(`build-agent: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  }
}
