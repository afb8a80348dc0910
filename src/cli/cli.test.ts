/**
 * The CLI as users run it: `node dist/src/cli/main.js …` (compiled with tsconfig.build.json) against a
 * server started in this process over the real engine and the in-memory driver. Children are spawned asynchronously
 * so the in-process server keeps answering.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../server/app.js';
import { startServer, type RunningServer } from '../server/serve.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';
import { responseChecker } from '../../test/helpers/openapi.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const MAIN = [join(REPO, 'dist', 'src', 'cli', 'main.js'), join(REPO, 'dist', 'cli', 'main.js')];
let main = '';
let server: RunningServer;
let t: TestEngine;
/** Sees every chunk the driver's writeFile receives (set by a test). */
let onChunk: ((c: Uint8Array) => void) | null = null;

beforeAll(async () => {
  // dist/ is compiled once, by test/global-setup.ts, before any test file runs.
  main = MAIN.find((p) => existsSync(p)) ?? '';
  expect(main, 'tsc did not emit the CLI').not.toBe('');
  t = await createTestEngine({ driver: { onWriteChunk: (_id, _path, c) => onChunk?.(c) } });
  server = await startServer({ app: checker.wrap(createApp({ engine: t.engine })), host: '127.0.0.1', port: 0, graceMs: 200 });
}, 400_000);
afterAll(async () => {
  await server?.close();
  await t?.close();
});

// Every response the CLI gets in this suite must match the OpenAPI document (GET /openapi.json).
const checker = responseChecker();
afterAll(async () => {
  await checker.settle();
  expect(checker.violations).toEqual([]);
  expect(checker.seen.size).toBeGreaterThan(15);
});

interface Result {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

function berth(args: string[], opts: { input?: Buffer | string; env?: Record<string, string | undefined>; bin?: string } = {}): Promise<Result> {
  const env: Record<string, string | undefined> = { ...process.env, BERTH_URL: server.url, BERTH_TOKEN: t.rootKey, BERTH_DEBUG: undefined, ...opts.env };
  for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
  const child = spawn(process.execPath, [opts.bin ?? main, ...args], { env: env as NodeJS.ProcessEnv, stdio: ['pipe', 'pipe', 'pipe'] });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on('data', (d: Buffer) => out.push(d));
  child.stderr.on('data', (d: Buffer) => err.push(d));
  child.stdin.end(opts.input ?? '');
  return new Promise((done, fail) => {
    child.on('error', fail);
    child.on('close', (code) => done({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() }));
  });
}

const json = (r: Result) => JSON.parse(r.stdout.toString());
const NO_STACK = /\n\s+at .+:\d+:\d+/;

async function newSession(...extra: string[]): Promise<string> {
  const r = await berth(['session', 'create', '--json', ...extra]);
  expect(r.code, r.stderr).toBe(0);
  return json(r).id;
}

describe('berth session', () => {
  it('create --json → the created view', async () => {
    const r = await berth(['session', 'create', '--objective', 'demo', '--memory', '256', '--disk', '64', '--cpus', '0.5', '--idle-timeout', '60', '--env', 'A=1', '--env', 'B=x=y', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const v = json(r);
    expect(v).toMatchObject({ id: expect.stringMatching(/^ses_/), state: 'running', backend: 'gvisor', objective: 'demo' });
    expect(v.settings).toEqual({ memoryMb: 256, diskMb: 64, cpus: 0.5, idleTimeoutS: 60, env: ['A', 'B'], desktop: null });
    expect(v.agentToken).toMatch(/^bta_/);
    // A room past the memory it lives in: refused, naming the flag's field and the limit.
    const over = await berth(['session', 'create', '--memory', '256', '--disk', '300']);
    expect(over.code).not.toBe(0);
    expect(over.stderr).toMatch(/invalid_argument: diskMb: at most memoryMb \(256 MiB\)/);
  });
  it('list and show --json', async () => {
    const id = await newSession('--backend', 'gvisor');
    const list = json(await berth(['session', 'list', '--json']));
    expect(list.sessions.map((s: any) => s.id)).toContain(id);
    const show = await berth(['session', 'show', id, '--json']);
    expect(show.code).toBe(0);
    const v = json(show);
    expect(v).toMatchObject({ id, state: 'running', backend: 'gvisor', createdAt: expect.any(String), stateSince: expect.any(String) });
    expect(v.metering).toMatchObject({ execCount: 0, stateSeconds: { running: expect.any(Number) } });
    expect(v.agentToken).toBeUndefined();
  });
  it('rm terminates', async () => {
    const id = await newSession();
    const r = await berth(['session', 'rm', id]);
    expect(r.code).toBe(0);
    expect(json(await berth(['session', 'show', id, '--json'])).state).toBe('terminated');
  });
  it('an unknown id exits 1 with the code, no stack', async () => {
    const r = await berth(['session', 'show', 'ses_00000000000000000000', '--json']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^berth: not_found: /);
    expect(r.stderr).not.toMatch(NO_STACK);
    expect(r.stdout.length).toBe(0);
  });
  it('bad values exit 2 naming the flag, with the server’s limits, before anything is sent', async () => {
    const before = json(await berth(['session', 'list', '--json'])).sessions.length;
    for (const args of [['--memory', 'abc'], ['--memory', '10'], ['--memory', '99999'], ['--idle-timeout', '-5'], ['--idle-timeout=-5'], ['--cpus', '0'], ['--cpus', 'x']]) {
      const r = await berth(['session', 'create', ...args, '--json']);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`^berth: invalid_argument: ${args[0]!.split('=')[0]}: must be `));
      expect(r.stderr).not.toMatch(NO_STACK);
    }
    expect((await berth(['session', 'create', '--memory', '10'])).stderr).toContain('--memory: must be an integer 64..16384 MiB, got "10"');
    expect((await berth(['session', 'create', '--memory'])).stderr).toContain('--memory: needs a value');
    expect((await berth(['session', 'create', '--backend', 'docker'])).code).toBe(2);
    expect((await berth(['fork', 'snp_00000000000000000000', '--count', '65'])).code).toBe(2);
    expect((await berth(['exec', 'ses_00000000000000000000', '--timeout=-1', '--', 'ls'])).code).toBe(2);
    expect(json(await berth(['session', 'list', '--json'])).sessions.length).toBe(before);
  });
  it('show prints metadata; list filters by metadata and pages with a cursor', async () => {
    const tag = `t${Date.now()}`;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await newSession('--meta', `run=${tag}`, '--meta', `arm=${i % 2 ? 'b' : 'a'}`));
    const shown = await berth(['session', 'show', ids[0]!]);
    expect(shown.stdout.toString()).toMatch(new RegExp(`metadata:\\s+run=${tag} arm=a`));
    expect(json(await berth(['session', 'show', ids[0]!, '--json'])).metadata).toEqual({ run: tag, arm: 'a' });
    const all = json(await berth(['session', 'list', '--metadata', `run=${tag}`, '--json']));
    expect(all.sessions.map((s: any) => s.id)).toEqual(ids);
    expect(all.nextCursor).toBeNull();
    const arms = json(await berth(['session', 'list', '--metadata', `run=${tag}`, '--metadata', 'arm=b', '--json']));
    expect(arms.sessions.map((s: any) => s.id)).toEqual([ids[1], ids[3]]);
    const seen: string[] = [];
    let after: string | null = null;
    for (let pages = 0; pages < 10; pages++) {
      const r = await berth(['session', 'list', '--metadata', `run=${tag}`, '--limit', '2', ...(after ? ['--after', after] : []), '--json']);
      expect(r.code, r.stderr).toBe(0);
      const p = json(r);
      expect(p.sessions.length).toBeLessThanOrEqual(2);
      seen.push(...p.sessions.map((s: any) => s.id));
      after = p.nextCursor;
      if (!after) break;
    }
    expect(seen).toEqual(ids);
    const text = await berth(['session', 'list', '--metadata', `run=${tag}`, '--limit', '2']);
    expect(text.stdout.toString()).toMatch(/more: berth session list --after \S+ --limit 2/);
    const bad = await berth(['session', 'list', '--after', 'bogus']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^berth: invalid_argument: after: /);
    expect((await berth(['session', 'list', '--limit', '0'])).code).toBe(2);
    expect((await berth(['session', 'list', '--metadata', 'novalue'])).code).toBe(2);
  });
  it('--backend qemu reaches the server', async () => {
    const r = await berth(['session', 'create', '--backend', 'qemu', '--json']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^berth: unavailable: /);
  });
});

describe('berth exec', () => {
  it('passes stdout through as bytes and exits with the command’s code', async () => {
    const id = await newSession();
    const r = await berth(['exec', id, '--', 'echo', 'hello', '-n']);
    expect(r.code).toBe(0);
    expect(r.stdout.toString()).toBe('hello -n\n');
    const e = await berth(['exec', id, '--', 'sh', '-c', 'echo bye >&2; exit 42']);
    expect(e.code).toBe(42);
    expect(e.stderr).toBe('bye\n');
  });
  it('passes stdin through when it is not a terminal', async () => {
    const id = await newSession();
    const input = Buffer.from([0, 1, 2, 200, 255, 10]);
    const r = await berth(['exec', id, '--', 'cat'], { input });
    expect(r.code).toBe(0);
    expect(Buffer.compare(r.stdout, input)).toBe(0);
  });
  it('--cwd and --env reach the command', async () => {
    const id = await newSession();
    expect((await berth(['exec', id, '--cwd', '/tmp', '--', 'pwd'])).stdout.toString()).toBe('/tmp\n');
    expect((await berth(['exec', id, '--env', 'X=42', '--', 'sh', '-c', 'echo $X'])).stdout.toString()).toBe('42\n');
  });
  it('a timeout kills the command, says so and exits 124', async () => {
    const id = await newSession();
    const r = await berth(['exec', id, '--timeout', '50', '--', 'sleep', '10']);
    expect(r.code).toBe(124);
    expect(r.stderr).toContain('berth: command timed out after 50 ms');
  });
  it('usage errors exit 2', async () => {
    expect((await berth(['exec'])).code).toBe(2);
    expect((await berth(['exec', 'ses_00000000000000000000'])).code).toBe(2);
    expect((await berth(['exec', 'ses_00000000000000000000', '--timeout', 'x', '--', 'ls'])).code).toBe(2);
  });
  it('a bad argv from the server side is exit 1', async () => {
    const id = await newSession();
    const r = await berth(['exec', id, '--cwd', 'relative', '--', 'ls']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^berth: invalid_argument: cwd/);
  });
  it('--json prints the events as JSON lines and keeps the command’s exit status', async () => {
    const id = await newSession();
    const r = await berth(['exec', id, '--json', '--', 'sh', '-c', 'echo out; echo err >&2; exit 3'], { input: '' });
    expect(r.code).toBe(3);
    const lines = r.stdout.toString().trimEnd().split('\n').map((l) => JSON.parse(l));
    expect(lines[0]).toEqual({ type: 'started', execId: expect.stringMatching(/^exe_/), sessionId: id });
    expect(lines.at(-1)).toEqual({ type: 'exit', code: 3, signal: null, timedOut: false });
    const text = (t: string) => lines.filter((l) => l.type === t).map((l) => Buffer.from(l.data, 'base64').toString()).join('');
    expect(text('stdout')).toBe('out\n');
    expect(text('stderr')).toBe('err\n');
    expect(r.stderr).toBe('');
  });
});

describe('berth files', () => {
  it('write < data and read > data are binary-safe', async () => {
    const id = await newSession();
    const data = Buffer.alloc(500_000);
    for (let i = 0; i < data.length; i++) data[i] = (i * 131) & 255;
    const w = await berth(['files', 'write', id, '/data.bin', '--json'], { input: data });
    expect(w.code, w.stderr).toBe(0);
    expect(json(w)).toEqual({ path: '/data.bin', bytes: data.length });
    const r = await berth(['files', 'read', id, '/data.bin']);
    expect(r.code).toBe(0);
    expect(Buffer.compare(r.stdout, data)).toBe(0);
  });
  it('a 200 MB upload to /dev/null streams: neither side holds it whole', async () => {
    const id = await newSession();
    const dir = mkdtempSync(join(tmpdir(), 'berth-cli-'));
    const file = join(dir, 'big');
    const fd = openSync(file, 'w');
    const mb = Buffer.alloc(1 << 20, 7);
    for (let i = 0; i < 200; i++) writeSync(fd, mb);
    closeSync(fd);
    let chunks = 0;
    // /dev/null discards in the sandbox: what the server keeps is then only what the HTTP layer and engine keep.
    onChunk = () => void chunks++;
    const before = process.memoryUsage().arrayBuffers;
    let serverPeak = 0;
    const sample = setInterval(() => (serverPeak = Math.max(serverPeak, process.memoryUsage().arrayBuffers - before)), 5);
    const input = openSync(file, 'r');
    try {
      const child = spawn(process.execPath, [main, 'files', 'write', id, '/dev/null', '--json'], {
        env: { ...process.env, BERTH_URL: server.url, BERTH_TOKEN: t.rootKey },
        stdio: [input, 'pipe', 'pipe'],
      });
      let peakKb = 0;
      const poll = setInterval(() => {
        try {
          const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
          if (m) peakKb = Math.max(peakKb, Number(m[1]));
        } catch {
          // exited
        }
      }, 10);
      const out: Buffer[] = [];
      child.stdout!.on('data', (d: Buffer) => out.push(d));
      const code = await new Promise<number | null>((r) => child.on('close', r));
      clearInterval(poll);
      expect(code).toBe(0);
      expect(JSON.parse(Buffer.concat(out).toString())).toEqual({ path: '/dev/null', bytes: 200 * (1 << 20) });
      expect(chunks).toBeGreaterThan(100);
      if (peakKb > 0) expect(peakKb / 1024).toBeLessThan(160); // the CLI's resident peak, MiB
      expect(serverPeak / (1 << 20)).toBeLessThan(100);
    } finally {
      clearInterval(sample);
      closeSync(input);
      onChunk = null;
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('mkdir, list, stat, rm', async () => {
    const id = await newSession();
    expect((await berth(['files', 'mkdir', id, '/a/b', '-p'])).code).toBe(0);
    expect((await berth(['files', 'write', id, '/a/f', '--mode', '600'], { input: 'x' })).code).toBe(0);
    const list = json(await berth(['files', 'list', id, '/a', '--json']));
    expect(list.entries.map((e: any) => e.name).sort()).toEqual(['b', 'f']);
    expect(json(await berth(['files', 'stat', id, '/a/f', '--json']))).toMatchObject({ size: 1, mode: 0o600 });
    expect((await berth(['files', 'rm', id, '/a'])).code).toBe(1);
    expect((await berth(['files', 'rm', id, '/a', '-r'])).code).toBe(0);
    const gone = await berth(['files', 'read', id, '/a/f']);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/^berth: not_found: /);
  });
  it('a relative path is the server’s 400', async () => {
    const id = await newSession();
    const r = await berth(['files', 'read', id, 'rel']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^berth: invalid_argument: path: /);
  });
});

describe('lifecycle, snapshot, fork', () => {
  it('pause/resume/hibernate/wake', async () => {
    const id = await newSession();
    expect(json(await berth(['pause', id, '--json'])).state).toBe('paused');
    expect(json(await berth(['resume', id, '--json'])).state).toBe('running');
    expect(json(await berth(['hibernate', id, '--json'])).state).toBe('hibernated');
    const bad = await berth(['pause', id]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^berth: invalid_state: /);
    const w = await berth(['wake', id]);
    expect(w.stdout.toString()).toBe(`${id} running\n`);
  });
  it('snapshot --json → {snapshotId}; fork --count N --json → {sessions:[{id}…]}', async () => {
    const id = await newSession();
    const snap = await berth(['snapshot', id, '--name', 'base', '--json']);
    expect(snap.code, snap.stderr).toBe(0);
    const { snapshotId } = json(snap);
    expect(snapshotId).toMatch(/^snp_/);
    const fork = await berth(['fork', snapshotId, '--count', '3', '--json']);
    expect(fork.code, fork.stderr).toBe(0);
    const f = json(fork);
    expect(f.sessions).toHaveLength(3);
    for (const s of f.sessions) expect(s.id).toMatch(/^ses_/);
    expect((await berth(['fork', snapshotId, '--count', '0'])).code).toBe(2);
    expect((await berth(['fork', 'snp_00000000000000000000', '--json'])).code).toBe(1);
    expect(json(await berth(['snapshot', 'list', '--session', id, '--json'])).snapshots).toHaveLength(1);
  });
});

describe('tenant and audit', () => {
  it('tenant create/list, audit query/verify', async () => {
    const t = json(await berth(['tenant', 'create', 'acme', '--json']));
    expect(t).toMatchObject({ id: expect.stringMatching(/^ten_/), name: 'acme', apiKey: expect.any(String) });
    expect(json(await berth(['tenant', 'list', '--json'])).tenants.map((x: any) => x.id)).toContain(t.id);
    const a = json(await berth(['audit', '--limit', '5', '--json']));
    expect(a.entries.length).toBeGreaterThan(0);
    expect(json(await berth(['audit', 'verify', '--json']))).toMatchObject({ ok: true });
  });
});

describe('environment and errors', () => {
  it('watch-link create --ttl --label --json, list, revoke; a bad --ttl is a usage error', async () => {
    const id = await newSession();
    const c = await berth(['watch-link', 'create', id, '--ttl', '30m', '--label', 'reviewer', '--json']);
    expect(c.code, c.stderr).toBe(0);
    const link = json(c);
    expect(link).toMatchObject({ linkId: expect.stringMatching(/^wlk_/), url: expect.stringMatching(/\/#watch=bwl_[A-Za-z0-9_-]{43}$/) });
    expect(Date.parse(link.expiresAt) - Date.now()).toBeGreaterThan(29 * 60_000);
    const list = await berth(['watch-link', 'list', id]);
    expect(list.code, list.stderr).toBe(0); // once seen to print nothing on a loaded CI host: say why if again
    expect(list.stdout.toString()).toMatch(new RegExp(`${link.linkId}\\s+active .*reviewer`));
    const revoked = await berth(['watch-link', 'revoke', id, link.linkId]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout.toString()).toContain(`revoked ${link.linkId}`);
    expect(json(await berth(['watch-link', 'list', id, '--json'])).links[0].state).toBe('revoked');
    const bad = await berth(['watch-link', 'create', id, '--ttl', 'soon']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/--ttl/);
  });
  it('falls back to $BERTH_DATA/root.key', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-cli-'));
    writeFileSync(join(dir, 'root.key'), `${t.rootKey}\n`, { mode: 0o600 });
    const r = await berth(['session', 'list', '--json'], { env: { BERTH_TOKEN: undefined, BERTH_DATA: dir } });
    expect(r.code, r.stderr).toBe(0);
  });
  it('no token → unauthenticated, exit 1', async () => {
    const r = await berth(['session', 'list'], { env: { BERTH_TOKEN: undefined, BERTH_DATA: '/nonexistent' } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^berth: unauthenticated: /);
  });
  it('a wrong token → the server’s 401, exit 1', async () => {
    const r = await berth(['session', 'list'], { env: { BERTH_TOKEN: 'btr_wrong' } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^berth: unauthenticated: /);
  });
  it('no server → unavailable, exit 1, no stack', async () => {
    const r = await berth(['session', 'list'], { env: { BERTH_URL: 'http://127.0.0.1:9' } });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^berth: unavailable: /);
    expect(r.stderr).not.toMatch(NO_STACK);
  });
  it('unknown verbs and bare `berth` exit 2; help exits 0', async () => {
    expect((await berth(['frobnicate'])).code).toBe(2);
    expect((await berth([])).code).toBe(2);
    const h = await berth(['help']);
    expect(h.code).toBe(0);
    expect(h.stdout.toString()).toContain('exec');
  });
  it('unknown verbs, subcommands and flags say so with a suggestion and exit 2', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['sesion', 'list'], /"sesion" is not a berth command; did you mean session\?/],
      [['session', 'lst'], /berth session: unknown subcommand "lst"; did you mean list\?/],
      [['session', 'create', '--memroy', '512'], /berth session create: unknown flag --memroy; did you mean --memory\?/],
      [['files', 'mkdir', 'ses_00000000000000000000', '/a', '-x'], /unknown flag -x; did you mean -p\?/],
      [['--verison'], /unknown flag --verison; did you mean --version\?/],
      [['session'], /berth session: missing subcommand \(create, list, show, rm\)/],
    ];
    for (const [args, re] of cases) {
      const r = await berth(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(re);
      expect(r.stderr).toMatch(/^berth: invalid_argument: /);
      expect(r.stderr).toMatch(/\nusage: berth /);
      expect(r.stderr).not.toMatch(NO_STACK);
    }
  });
  it('--version prints package.json’s version', async () => {
    const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'));
    for (const flag of ['--version', '-V']) {
      const r = await berth([flag]);
      expect(r.code).toBe(0);
      expect(r.stdout.toString()).toBe(`berth ${pkg.version}\n`);
    }
  });
  it('serve rejects bad flags as a usage error', async () => {
    const r = await berth(['serve', '--port', 'abc']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^berth: invalid_argument: --port/);
  });
  it('bin/berth runs the same CLI', async () => {
    const id = await newSession();
    const r = await berth(['exec', id, '--', 'echo', 'via-bin'], { bin: join(REPO, 'bin', 'berth') });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.toString()).toBe('via-bin\n');
  });
});

describe('berth port-link', () => {
  it('prints a URL a browser opens with no token; list shows it; revoke ends it; bad input exits 2', async () => {
    const id = await newSession();
    const made = await berth(['port-link', id, '8000', '--ttl', '30m', '--label', 'docs']);
    expect(made.code, made.stderr).toBe(0);
    const url = made.stdout.toString().trim();
    expect(url).toMatch(new RegExp(`^${server.url}/p/[A-Za-z0-9_-]{43}/$`));
    const listed = await berth(['port-link', 'list', id, '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const [link] = json(listed).links;
    expect(link).toMatchObject({ port: 8000, label: 'docs', state: 'active' });
    expect(Date.parse(link.expiresAt) - Date.parse(link.createdAt)).toBe(30 * 60_000);
    const revoked = await berth(['port-link', 'revoke', id, link.linkId]);
    expect([revoked.code, revoked.stdout.toString().trim()]).toEqual([0, `${link.linkId} revoked`]);
    expect((await fetch(url)).status).toBe(404);
    expect((await berth(['port-link', 'ls', id])).stdout.toString()).toContain('revoked');

    for (const bad of [['--ttl', '8d'], ['--ttl', '0s'], ['--ttl', 'soon']]) {
      const r = await berth(['port-link', id, '8000', ...bad]);
      expect([r.code, r.stderr]).toEqual([2, expect.stringContaining('--ttl')]);
    }
    for (const port of ['0', '65536', 'http']) {
      const r = await berth(['port-link', id, port]);
      expect([r.code, r.stderr]).toEqual([2, expect.stringContaining('PORT')]);
    }
    const gone = await berth(['port-link', 'ses_00000000000000000000', '8000']);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toContain('not_found');
  }, 60_000);
});

describe('berth desktop', () => {
  it('a session without a desktop is the server’s invalid_state; bad flags exit 2; state, stop and the video (the in-memory driver has no ffmpeg: real recordings are test/e2e/desktop-recording.test.ts)', async () => {
    const plain = await newSession();
    const refused = await berth(['desktop', plain]);
    expect([refused.code, refused.stderr]).toEqual([1, expect.stringMatching(/^berth: invalid_state: no_desktop/)]);
    const both = await berth(['desktop', 'record', plain, '--stop', '--max-bytes', '2000000']);
    expect([both.code, both.stderr]).toEqual([2, expect.stringContaining('--max-bytes')]);
    expect((await berth(['desktop', 'record', plain, '--max-bytes', '10'])).code).toBe(2);

    // A record given a desktop (as test/openapi.test.ts does): the engine reads only the record for that.
    const id = await newSession();
    const r = (await t.store.sessions.get(id))!;
    await t.store.sessions.put({ ...r, settings: { ...r.settings, desktop: { width: 800, height: 600 } } });
    const shown = await berth(['desktop', id]);
    expect([shown.code, shown.stdout.toString()]).toEqual([0, expect.stringMatching(/^screen\s+800x600\nrecording\s+none\n$/)]);
    expect(json(await berth(['desktop', id, '--json']))).toMatchObject({ sessionId: id, screen: { width: 800, height: 600 }, recording: { recording: false, execId: null } });
    const stop = await berth(['desktop', 'record', id, '--stop']);
    expect([stop.code, stop.stdout.toString()]).toEqual([0, 'nothing was recording\n']);
    const none = await berth(['desktop', 'recording', id]);
    expect([none.code, none.stderr]).toEqual([1, expect.stringMatching(/^berth: not_found: /)]);
  }, 60_000);
});
