/**
 * bin/berth's choice between the bundle (dist/bundle/berth.js, scripts/bundle.mjs) and the compiled sources
 * (dist/src/cli/main.js): the bundle only when it was made after the sources, so a `tsc` alone never leaves
 * an older bundle running. Checked on a copy of the launcher over two stand-in entry points, so the repo's
 * own dist/ (which other tests run) is never touched.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO } from './helpers/env.js';

describe('bin/berth', () => {
  const root = mkdtempSync(join(tmpdir(), 'berth-launcher-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'bin'));
  mkdirSync(join(root, 'dist', 'src', 'cli'), { recursive: true });
  copyFileSync(join(REPO, 'bin', 'berth'), join(root, 'bin', 'berth'));
  writeFileSync(join(root, 'package.json'), JSON.stringify({ type: 'module' }));
  const entry = (file: string, name: string) => writeFileSync(file, `export async function run(argv) { process.stdout.write('${name} ' + argv.join(' ')); }\n`);
  entry(join(root, 'dist', 'src', 'cli', 'main.js'), 'sources');
  const run = () => spawnSync(process.execPath, [join(root, 'bin', 'berth'), 'a', 'b'], { encoding: 'utf8' });
  const at = (file: string, s: number) => utimesSync(file, s, s);

  it('runs the compiled sources when there is no bundle', () => {
    const r = run();
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('sources a b');
  });

  it('runs the bundle when it is as new as the sources or newer, and the sources when the bundle is older', () => {
    mkdirSync(join(root, 'dist', 'bundle'));
    const bundle = join(root, 'dist', 'bundle', 'berth.js');
    const main = join(root, 'dist', 'src', 'cli', 'main.js');
    entry(bundle, 'bundle');
    at(main, 1_000_000);
    at(bundle, 1_000_100);
    expect(run().stdout).toBe('bundle a b');
    at(bundle, 1_000_000); // npm pack gives every file the same time
    expect(run().stdout).toBe('bundle a b');
    at(main, 1_000_200); // tsc ran after the bundle was made
    expect(run().stdout).toBe('sources a b');
  });

  it('says how to build when nothing is built', () => {
    rmSync(join(root, 'dist'), { recursive: true, force: true });
    const r = run();
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^berth: not built; run `npm run setup`/);
  });
});
