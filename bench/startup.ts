/**
 * Server start (issue 7's restart target counts it): `berth serve` from spawn to "ready" on an empty data
 * directory, the bundle bin/berth runs (dist/bundle/berth.js, scripts/bundle.mjs) against the compiled sources
 * it is made from (dist/src/cli/main.js), interleaved, both with Node's compile cache as bin/berth enables it.
 * The crash loop (`npm run crashloop`) measures the whole restart with 30 sessions to re-adopt.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../src/server/compose.js';
import { startServerProcess, stopServerProcess } from './server-process.js';
import { row, type Row } from './stats.js';

export async function benchStartup(o: { quick: boolean; log: (s: string) => void }): Promise<Row[]> {
  const root = packageRoot();
  const bundle = join(root, 'dist', 'bundle', 'berth.js');
  const sources = join(root, 'dist', 'src', 'cli', 'main.js');
  if (!existsSync(bundle)) throw new Error(`${bundle} is missing: npm run build`);
  // What bin/berth's enableCompileCache() uses, so neither side compiles from scratch after the first start.
  const env = { ...process.env, NODE_COMPILE_CACHE: join(tmpdir(), 'node-compile-cache') };
  const once = async (entry: string): Promise<number> => {
    const dataDir = await mkdtemp(join(tmpdir(), 'berth-bench-start-'));
    try {
      const s = await startServerProcess({ dataDir, entry, env });
      await stopServerProcess(s);
      return s.startMs;
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  };
  o.log('startup: berth serve, spawn to ready, bundle vs compiled sources');
  await once(bundle);
  await once(sources); // warm both compile caches
  const bundled: number[] = [];
  const unbundled: number[] = [];
  for (let i = 0; i < (o.quick ? 3 : 7); i++) {
    bundled.push(await once(bundle));
    unbundled.push(await once(sources));
  }
  return [{ ...row('berth serve, spawn to ready (empty data directory)', 'server', bundled, unbundled, '< raw'), note: 'berth column: dist/bundle (what bin/berth runs); raw column: dist/src unbundled' }];
}
