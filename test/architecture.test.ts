/**
 * The layering rules of HOUSE-STYLE.md, checked by reading every import line under src/. A lint rule can
 * be switched off quietly; this test cannot.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from './helpers/env.js';

const SRC = join(REPO, 'src');

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) return files(p);
    return p.endsWith('.ts') && !p.endsWith('.test.ts') ? [p] : [];
  });
}

/** Layer of a file: its first folder under src/. */
const layer = (file: string) => relative(SRC, file).split('/')[0] as string;

/** Which layers each layer may import (its own is always allowed). */
const ALLOWED: Record<string, string[]> = {
  core: [],
  drivers: ['core'],
  store: ['core'],
  policy: ['core'],
  engine: ['core', 'policy'],
  protocol: ['core'],
  sdk: ['core', 'protocol'],
  cli: ['core', 'protocol', 'sdk', 'server'],
  console: ['core', 'protocol', 'sdk'],
  server: ['core', 'protocol', 'engine', 'policy'],
};
/** The composition root may wire everything together. */
const COMPOSITION_ROOTS = new Set(['server/compose.ts', 'server/main.ts']);

function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+['"]([^'"]+)['"]/g)) out.push(m[1] as string);
  for (const m of text.matchAll(/import\(\s*['"]([^'"]+)['"]\s*\)/g)) out.push(m[1] as string);
  return out.filter((s) => s.startsWith('.'));
}

describe('architecture', () => {
  const all = files(SRC);

  it('finds the sources', () => {
    expect(all.length).toBeGreaterThan(20);
  });

  it('keeps dependencies one-way between layers', () => {
    const bad: string[] = [];
    for (const f of all) {
      const from = layer(f);
      const rel = relative(SRC, f);
      for (const spec of imports(f)) {
        const target = resolve(dirname(f), spec);
        if (!target.startsWith(SRC)) continue;
        const to = layer(target);
        if (to === from || COMPOSITION_ROOTS.has(rel)) continue;
        if (!(ALLOWED[from] ?? []).includes(to)) bad.push(`${rel} imports ${relative(SRC, target)} (${from} → ${to})`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('keeps the only reader of process.env in the composition root and the CLI entry', () => {
    const readers = all
      .filter((f) => /process\.env\b/.test(readFileSync(f, 'utf8')))
      .map((f) => relative(SRC, f))
      .filter((r) => !['server/main.ts', 'cli/main.ts', 'cli/env.ts', 'sdk/env.ts'].includes(r));
    expect(readers).toEqual([]);
  });

  it('keeps files readable (under ~700 lines)', () => {
    const long = all.filter((f) => readFileSync(f, 'utf8').split('\n').length > 700).map((f) => relative(SRC, f));
    expect(long).toEqual([]);
  });
});
