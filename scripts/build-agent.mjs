#!/usr/bin/env node
// Builds the in-sandbox agent: a static binary, so it runs in any root filesystem (no libc needed there).
//
//   node scripts/build-agent.mjs [--out PATH] [--force]
//
//   --out PATH  where to write the binary. Default: dist/agent/berth-agent (relative to the repo root).
//   --force     rebuild even when the binary is newer than the source.
//
// Skips the build when the binary is newer than src/drivers/agent/berth-agent.c. The binary is written to
// a temporary name and renamed, so a running sandbox or test never sees a half-written file.
import { spawnSync } from 'node:child_process';
import { mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCE = join(ROOT, 'src/drivers/agent/berth-agent.c');
const DEFAULT_OUT = join(ROOT, 'dist/agent/berth-agent');
const CFLAGS = ['-O2', '-static', '-Wall', '-Wextra', '-Werror'];
const INSTALL_HINT = 'install a C toolchain with static glibc: apt-get install gcc libc6-dev';

/** mtime in ms, or -1 when the file is missing. */
function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return -1;
  }
}

/**
 * Compiles the agent to `out` unless it is already newer than the source.
 * @param {{ out?: string, force?: boolean, log?: (line: string) => void }} [opts]
 * @returns {{ path: string, built: boolean }}
 */
export function buildAgent(opts = {}) {
  const out = resolve(opts.out ?? DEFAULT_OUT);
  const log = opts.log ?? ((line) => process.stderr.write(`${line}\n`));
  const src = mtime(SOURCE);
  if (src < 0) throw new Error(`agent source missing: ${SOURCE}`);
  if (!opts.force && mtime(out) > src) return { path: out, built: false };

  const probe = spawnSync('gcc', ['--version'], { encoding: 'utf8' });
  if (probe.error) throw new Error(`gcc not found (${probe.error.code ?? probe.error.message}): ${INSTALL_HINT}`);

  mkdirSync(dirname(out), { recursive: true });
  const tmp = `${out}.tmp-${process.pid}`;
  const cc = spawnSync('gcc', [...CFLAGS, '-o', tmp, SOURCE], { encoding: 'utf8' });
  if (cc.status !== 0) {
    rmSync(tmp, { force: true });
    const text = `${cc.stderr ?? ''}${cc.stdout ?? ''}`.trim();
    const hint = /cannot find -lc|crt1\.o|stdio\.h/.test(text) ? `\n(${INSTALL_HINT})` : '';
    throw new Error(`gcc failed to build the agent:\n${text}${hint}`);
  }
  renameSync(tmp, out);
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
