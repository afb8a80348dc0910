/**
 * Every ```sh and ```ts snippet of README.md runs as written, against a real server (`berth serve`, real
 * gVisor sandboxes), from a directory laid out as a checkout (bin/, .berth/root.key, and `berth` resolvable
 * as a package). A snippet is left out only with `<!-- readme-test: skip REASON -->` on the line above it;
 * the reason is printed. sh snippets run under `bash -e -o pipefail`, ts snippets as Node (type stripping).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMAGE_CACHE, REPO, gvisorMissing, skipReason } from './helpers/env.js';

export interface Snippet {
  lang: 'sh' | 'ts';
  code: string;
  /** 1-based line of the opening fence. */
  line: number;
  skip: string | null;
}

/** The README's sh and ts blocks, with the skip marker (and its reason) of each. */
export function snippets(markdown: string): Snippet[] {
  const lines = markdown.split('\n');
  const out: Snippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = /^```(sh|ts)\s*$/.exec(lines[i]!);
    if (!m) continue;
    const start = i;
    const body: string[] = [];
    while (++i < lines.length && lines[i] !== '```') body.push(lines[i]!);
    const marker = /^<!-- readme-test: skip (.+?) -->$/.exec(lines[start - 1] ?? '');
    out.push({ lang: m[1] as 'sh' | 'ts', code: body.join('\n') + '\n', line: start + 1, skip: marker ? marker[1]! : null });
  }
  return out;
}

const ALL = snippets(readFileSync(join(REPO, 'README.md'), 'utf8'));

describe('README snippets are extracted', () => {
  it('finds the sh and ts blocks; few are skipped, each with its reason', () => {
    expect(ALL.filter((s) => s.lang === 'sh' && !s.skip).length).toBeGreaterThanOrEqual(1);
    expect(ALL.filter((s) => s.lang === 'ts' && !s.skip).length).toBeGreaterThanOrEqual(1);
    const skipped = ALL.filter((s) => s.skip);
    expect(skipped.length).toBeLessThanOrEqual(3);
    for (const s of skipped) {
      expect(s.skip!.length).toBeGreaterThan(10);
      console.warn(`README snippet at line ${s.line} not run: ${s.skip}`);
    }
  });
});

let serverProc: ChildProcess | undefined;
let url = '';
let dir = '';
let checkout = '';

describe.skipIf(skipReason('README snippets against a real server', gvisorMissing()))('README snippets run as written', () => {
  beforeAll(async () => {
    // dist/ (what bin/berth runs) is compiled once, by test/global-setup.ts.
    dir = mkdtempSync(join(tmpdir(), 'berth-readme-'));
    const data = join(dir, 'data');
    serverProc = spawn(process.execPath, [join(REPO, 'bin', 'berth'), 'serve', '--port', '0', '--data', data, '--image-cache', IMAGE_CACHE], {
      env: { ...process.env, BERTH_LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    url = await new Promise<string>((resolve, reject) => {
      let buf = '';
      serverProc!.once('exit', (code) => reject(new Error(`berth serve exited with ${code}: ${buf}`)));
      serverProc!.stdout!.on('data', (d: Buffer) => {
        buf += d;
        const m = /"msg":"ready","url":"([^"]+)"/.exec(buf);
        if (m) resolve(m[1]!);
      });
    });
    // A directory laid out as the checkout the README speaks of.
    checkout = join(dir, 'checkout');
    mkdirSync(join(checkout, '.berth'), { recursive: true });
    mkdirSync(join(checkout, 'node_modules'));
    symlinkSync(join(REPO, 'bin'), join(checkout, 'bin'));
    symlinkSync(REPO, join(checkout, 'node_modules', 'berth'));
    copyFileSync(join(data, 'root.key'), join(checkout, '.berth', 'root.key'));
    writeFileSync(join(checkout, 'package.json'), JSON.stringify({ name: 'readme', private: true, type: 'module' }));
  }, 400_000);
  afterAll(async () => {
    if (serverProc && serverProc.exitCode === null) {
      const exited = new Promise((r) => serverProc!.once('exit', r));
      serverProc.kill('SIGTERM');
      await exited;
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  for (const s of ALL.filter((x) => !x.skip)) {
    it(`the ${s.lang} snippet at README.md:${s.line}`, async () => {
      const env: NodeJS.ProcessEnv = { PATH: `${join(REPO, 'node_modules', 'node', 'bin')}:${process.env.PATH}`, HOME: dir, BERTH_URL: url };
      let r: { code: number | null; out: string };
      if (s.lang === 'sh') r = await run('bash', ['-e', '-o', 'pipefail', '-c', s.code], checkout, env);
      else {
        const file = join(checkout, `snippet-${s.line}.mts`);
        writeFileSync(file, s.code);
        r = await run(process.execPath, [file], checkout, { ...env, BERTH_DATA: join(checkout, '.berth') });
      }
      expect(r.code, r.out).toBe(0);
    }, 300_000);
  }
});

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; out: string }> {
  const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  child.stderr!.on('data', (d: Buffer) => (out += d));
  return new Promise((done) => child.on('close', (code) => done({ code, out })));
}
