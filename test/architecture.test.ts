/**
 * The layering rules of HOUSE-STYLE.md, checked by reading every source: every import of src/, test/,
 * bench/, scripts/ and bin/berth, and the #include graph of the C agent. A lint rule can be switched off
 * quietly; this test cannot, and it guards its blind spots: it fails when it reads no imports, or meets an
 * import form or a file it cannot read.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, extname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from './helpers/env.js';
import { readImports, readIncludes, type ImportSite } from './helpers/source-reader.js';

const SRC = join(REPO, 'src');
const TREES = ['src', 'test', 'bench', 'scripts', 'bin'];
/** Sources whose imports are read. */
const CODE = new Set(['.ts', '.mjs', '.js']);
/** C sources, whose #include lines are read. */
const C = new Set(['.c', '.h']);
/**
 * Files with nothing to read in them but their length: data, and programs the tests ship into sandboxes
 * (test/fixtures/desktop/form.py), which import nothing of ours.
 */
const DATA = new Set(['.md', '.cedar', '.cedarschema', '.json', '.html', '.css', '.py']);
/** Extension-less executables, read as JavaScript. */
const SCRIPTS = new Set(['bin/berth']);

/** Lines a file may have (HOUSE-STYLE: split near 600). */
const MAX_LINES = 600;

function walk(dir: string): string[] {
  if (!existsSync(dir)) return [];
  if (!statSync(dir).isDirectory()) return [dir];
  return readdirSync(dir).flatMap((n) => walk(join(dir, n)));
}

const repoRel = (f: string) => relative(REPO, f);
const ALL = TREES.flatMap((t) => walk(join(REPO, t))).sort();
const codeFiles = ALL.filter((f) => CODE.has(extname(f)) || SCRIPTS.has(repoRel(f)));
const cFiles = ALL.filter((f) => C.has(extname(f)));

/** Every import of every code file, read once. */
const READ = new Map(codeFiles.map((f) => [f, readImports(f, readFileSync(f, 'utf8'))] as const));

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

/** The file a relative specifier names (`./x.js` is `./x.ts` before compilation), or undefined. */
function resolveSpec(from: string, spec: string): string | undefined {
  const base = resolve(dirname(from), spec);
  const candidates = [base, base.replace(/\.js$/, '.ts'), base.replace(/\.mjs$/, '.mts'), `${base}.ts`, join(base, 'index.ts')];
  return candidates.find((c) => existsSync(c) && statSync(c).isFile());
}

const relativeImports = (f: string): ImportSite[] => (READ.get(f)?.imports ?? []).filter((i) => i.spec.startsWith('.'));
const isSrcModule = (f: string) => f.startsWith(`${SRC}/`) && f.endsWith('.ts') && !f.endsWith('.test.ts');

describe('architecture', () => {
  it('reads every file of the source trees, and finds the sources', () => {
    const unread = ALL.filter((f) => !CODE.has(extname(f)) && !C.has(extname(f)) && !DATA.has(extname(f)) && !SCRIPTS.has(repoRel(f)));
    expect(unread.map(repoRel)).toEqual([]);
    expect(ALL.filter(isSrcModule).length).toBeGreaterThan(20);
    expect(cFiles.filter((f) => f.endsWith('.c')).length).toBeGreaterThan(1);
  });

  it('reads every import form it meets, and sees imports', () => {
    const problems = [...READ].flatMap(([f, r]) => r.problems.map((p) => `${repoRel(f)} ${p}`));
    expect(problems).toEqual([]);
    // A reader that silently stopped matching would see nothing and pass everything below.
    const srcModules = ALL.filter(isSrcModule);
    const withImports = srcModules.filter((f) => relativeImports(f).length > 0);
    expect(withImports.length).toBeGreaterThan(srcModules.length / 2);
    const forms = new Set([...READ.values()].flatMap((r) => r.imports.map((i) => i.form)));
    for (const f of ['static', 'type', 're-export', 'dynamic'] as const) expect(forms).toContain(f);
  });

  it('every relative import names a file that exists', () => {
    const missing = codeFiles.flatMap((f) => relativeImports(f).filter((i) => !resolveSpec(f, i.spec)).map((i) => `${repoRel(f)}:${i.line} ${i.spec}`));
    expect(missing).toEqual([]);
  });

  it('keeps dependencies one-way between layers, and test and bench code out of src', () => {
    const bad: string[] = [];
    for (const f of ALL.filter(isSrcModule)) {
      const from = layer(f);
      const rel = relative(SRC, f);
      for (const i of relativeImports(f)) {
        const target = resolveSpec(f, i.spec) ?? resolve(dirname(f), i.spec);
        if (!target.startsWith(`${SRC}/`)) {
          bad.push(`${rel} imports ${repoRel(target)} (outside src: it would not ship, or would ship test code)`);
          continue;
        }
        const to = layer(target);
        if (to === from || COMPOSITION_ROOTS.has(rel)) continue;
        if (!(ALLOWED[from] ?? []).includes(to)) bad.push(`${rel} imports ${relative(SRC, target)} (${from} → ${to})`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('keeps the only reader of process.env in the composition root and the CLI entry', () => {
    const readers = ALL.filter(isSrcModule)
      .filter((f) => /process\.env\b/.test(readFileSync(f, 'utf8')))
      .map((f) => relative(SRC, f))
      .filter((r) => !['server/main.ts', 'cli/main.ts', 'cli/env.ts', 'sdk/env.ts'].includes(r));
    expect(readers).toEqual([]);
  });

  it('the C agent: every #include is read, local ones resolve beside the file, are headers, and form no cycle', () => {
    const bad: string[] = [];
    const graph = new Map<string, string[]>();
    let local = 0;
    for (const f of cFiles) {
      const { includes, problems } = readIncludes(readFileSync(f, 'utf8'));
      bad.push(...problems.map((p) => `${repoRel(f)} ${p}`));
      const edges: string[] = [];
      for (const i of includes.filter((x) => x.local)) {
        local++;
        const target = resolve(dirname(f), i.name);
        if (dirname(target) !== dirname(f)) bad.push(`${repoRel(f)}:${i.line} includes ${i.name} from outside its folder`);
        else if (!target.endsWith('.h')) bad.push(`${repoRel(f)}:${i.line} includes ${i.name}, which is not a header`);
        else if (!existsSync(target)) bad.push(`${repoRel(f)}:${i.line} includes ${i.name}, which does not exist`);
        else edges.push(target);
      }
      graph.set(f, edges);
    }
    const cycle = (f: string, path: string[]): string[] | undefined => {
      if (path.includes(f)) return [...path, f];
      for (const g of graph.get(f) ?? []) {
        const c = cycle(g, [...path, f]);
        if (c) return c;
      }
      return undefined;
    };
    for (const f of cFiles) {
      const c = cycle(f, []);
      if (c) bad.push(`include cycle: ${c.map(repoRel).join(' → ')}`);
    }
    // Every .c is compiled on its own, so each must include the header that declares what it shares.
    const headers = cFiles.filter((f) => f.endsWith('.h'));
    for (const f of cFiles.filter((x) => x.endsWith('.c'))) {
      if (!(graph.get(f) ?? []).some((g) => headers.includes(g))) bad.push(`${repoRel(f)} includes no local header`);
    }
    expect(bad).toEqual([]);
    expect(local).toBeGreaterThan(0);
  });

  it('keeps the engine one-way: the kernel sees no room, no room sees SessionManager, no module imports in a circle', () => {
    const engine = (name: string) => join(SRC, 'engine', name);
    const KERNEL = ['kernel.ts', 'visibility.ts'].map(engine);
    const ROOMS = ['machines.ts', 'hibernation.ts', 'snapshots.ts', 'tenancy.ts'].map(engine);
    const MANAGER = engine('manager.ts');
    for (const f of [...KERNEL, ...ROOMS, MANAGER]) expect(existsSync(f), repoRel(f)).toBe(true);
    const targets = (f: string, values: boolean) =>
      relativeImports(f).filter((i) => !values || (i.form !== 'type' && i.form !== 'import-type')).map((i) => resolveSpec(f, i.spec)).filter((t): t is string => t !== undefined);
    const bad: string[] = [];
    for (const f of KERNEL) for (const t of targets(f, false)) if (ROOMS.includes(t) || t === MANAGER) bad.push(`${repoRel(f)} imports ${repoRel(t)}`);
    for (const f of ROOMS) for (const t of targets(f, false)) if (t === MANAGER) bad.push(`${repoRel(f)} imports ${repoRel(t)}`);
    // Circles through value imports (a type import is erased and orders nothing at load time).
    const modules = ALL.filter(isSrcModule).filter((f) => f.startsWith(`${SRC}/engine/`));
    const edges = new Map(modules.map((f) => [f, targets(f, true).filter((t) => modules.includes(t))] as const));
    expect([...edges.values()].flat().length).toBeGreaterThan(modules.length / 2);
    const done = new Set<string>();
    const visit = (f: string, path: string[]): void => {
      if (path.includes(f)) {
        bad.push(`import circle: ${[...path.slice(path.indexOf(f)), f].map(repoRel).join(' → ')}`);
        return;
      }
      if (done.has(f)) return;
      for (const t of edges.get(f) ?? []) visit(t, [...path, f]);
      done.add(f);
    };
    for (const f of modules) visit(f, []);
    expect(bad).toEqual([]);
  });

  it('lets only the global setup compile dist/ (a test that rebuilt it raced the tests spawning bin/berth)', () => {
    const builders = codeFiles.filter((f) => f.startsWith(join(REPO, 'test')) && /'-p',\s*'tsconfig\.build\.json'/.test(readFileSync(f, 'utf8')));
    expect(builders.map(repoRel)).toEqual(['test/global-setup.ts']);
  });

  it(`keeps files readable (at most ${MAX_LINES} lines)`, () => {
    const lines = new Map(ALL.map((f) => [repoRel(f), readFileSync(f, 'utf8').split('\n').length - 1] as const));
    const long = [...lines].filter(([, n]) => n > MAX_LINES).map(([f, n]) => `${f} (${n} lines)`);
    expect(long).toEqual([]);
  });
});

describe('the web console (src/console)', () => {
  const CONSOLE = join(SRC, 'console');
  const files = ALL.filter((f) => f.startsWith(`${CONSOLE}/`) && CODE.has(extname(f)) && !f.endsWith('.test.ts'));
  /** Browser packages the console may use; anything else (node:*, an engine module) cannot run in a page. */
  const PACKAGES = /^(preact|preact\/hooks|htm\/preact|@xterm\/xterm|@xterm\/addon-fit|@xterm\/xterm\/css\/xterm\.css|@novnc\/novnc)$/;

  it('talks to the server only through the SDK: value imports of the SDK entry and zod-free protocol names only, fetch only in api.ts', () => {
    expect(files.length).toBeGreaterThan(3);
    const bad: string[] = [];
    for (const f of files) {
      const rel = relative(SRC, f);
      if (rel === 'console/vite.config.mjs') continue;
      for (const i of READ.get(f)?.imports ?? []) {
        if (!i.spec.startsWith('.')) {
          if (!PACKAGES.test(i.spec)) bad.push(`${rel}:${i.line} imports package ${i.spec}`);
          continue;
        }
        const target = resolveSpec(f, i.spec);
        const to = target ? relative(SRC, target) : i.spec;
        if (i.form === 'type' || to.startsWith('console/') || i.spec.endsWith('.css')) continue;
        if (to !== 'sdk/index.ts' && to !== 'protocol/console-names.ts') bad.push(`${rel}:${i.line} imports ${to} (only sdk/index.ts and protocol/console-names.ts as values)`);
      }
      if (rel !== 'console/api.ts' && /\bfetch\s*\(|XMLHttpRequest|EventSource|WebSocket\s*\(/.test(readFileSync(f, 'utf8'))) bad.push(`${rel} reaches the network itself (only api.ts, through the SDK)`);
    }
    expect(bad).toEqual([]);
  });
});

describe('the import reader (the guard itself)', () => {
  const read = (text: string, file = 'x.ts') => readImports(file, text);

  it('classifies every import form', () => {
    const r = read(`
import a from './a.js';
import { b } from './b.js';
import type { C } from './c.js';
import './d.js';
export { e } from './e.js';
export * from './f.js';
export type { G } from './g.js';
import h = require('./h.js');
type I = import('./i.js').I;
const j = await import('./j.js');
const k = require('./k.js');
const here = import.meta.url;
// import x from './comment.js'; require('./comment.js')
const s = "import y from './string.js'";
const re = /import\\(['"]z['"]\\)/;
`);
    expect(r.problems).toEqual([]);
    expect(r.imports.map((i) => `${i.form} ${i.spec}`)).toEqual([
      'static ./a.js',
      'static ./b.js',
      'type ./c.js',
      'side-effect ./d.js',
      're-export ./e.js',
      're-export ./f.js',
      're-export ./g.js',
      'import-equals ./h.js',
      'import-type ./i.js',
      'dynamic ./j.js',
      'require ./k.js',
    ]);
  });

  it('reports computed specifiers, require used as a value, and files that do not parse', () => {
    expect(read("const m = await import('./' + name);").problems).toHaveLength(1);
    expect(read('const m = require(name);').problems).toHaveLength(1);
    expect(read('const r = require; r("./x.js");').problems).toHaveLength(1);
    expect(read("import { from './x.js';").problems.length).toBeGreaterThan(0);
  });

  it('reads #include lines and reports the ones it cannot', () => {
    const r = readIncludes('#include <stdio.h>\n#include "agent.h" /* shared */\n  #  include "x.h"\n#include MACRO_HEADER\n');
    expect(r.includes.map((i) => `${i.local ? 'local' : 'system'} ${i.name}`)).toEqual(['system stdio.h', 'local agent.h', 'local x.h']);
    expect(r.problems).toHaveLength(1);
  });
});
