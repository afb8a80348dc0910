/**
 * Templates end to end (issue 8 §4): a real server, real SQLite, real gVisor. A recipe with a file, an
 * installed script and background processes becomes a template; sessions from it have the files and the
 * running processes, each with its own identity. A failing step, a name in use, an unknown recipe field and
 * another tenant's template are refused, and a failed build leaves nothing behind.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pidsMatching } from '../../bench/memory.js';
import { isAppError, type AppError } from '../../src/core/errors.js';
import { Berth, type Session, type TemplateBuildLine } from '../../src/sdk/index.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('templates e2e', gvisorMissing());

const TICKER = "setsid sh -c 'while :; do date +%s%N > /tmp/tick.w; mv /tmp/tick.w /tmp/tick; sleep 0.1; done' >/dev/null 2>&1 &";
const SERVER = 'cd /srv && setsid python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 &';

async function failure(p: Promise<unknown>): Promise<AppError> {
  try {
    await p;
  } catch (e) {
    if (isAppError(e)) return e;
    throw e;
  }
  throw new Error('expected a failure');
}

async function until<T>(what: string, f: () => Promise<T | undefined>, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

describe.skipIf(skip)('templates with real gVisor sandboxes', () => {
  let t: TestServer;
  const snapshotDirs = () => readdirSync(join(t.dataDir, 'snapshots')).sort();
  const sh = async (s: Session, cmd: string) => {
    const r = await s.run(['sh', '-c', cmd]);
    return { code: r.code, out: r.stdout.toString(), err: r.stderr.toString() };
  };

  beforeAll(async () => {
    t = await startTestServer();
  });
  afterAll(async () => {
    for (const tpl of await t?.client.templates.list().catch(() => []) ?? []) await t.client.templates.delete(tpl.name).catch(() => undefined);
    await t?.destroy();
  });

  it('builds a template whose sessions have its files and running processes, each with a fresh identity', async () => {
    const lines: TemplateBuildLine[] = [];
    const tpl = await t.client.templates.build('web', {
      files: { '/srv/hello.txt': 'hello from the template\n', '/usr/local/bin/greet': '#!/bin/sh\necho "greetings, $1"\n' },
      env: { GREETING_STYLE: 'warm' },
      run: ['chmod 755 /usr/local/bin/greet', 'echo "style=$GREETING_STYLE"; greet builder', TICKER, SERVER, 'for i in $(seq 50); do [ -s /tmp/tick ] && exit 0; sleep 0.1; done; exit 1'],
    }, { onEvent: (l) => lines.push(l) });
    expect(tpl).toMatchObject({ name: 'web', backend: 'gvisor', from: null, recipe: { files: ['/srv/hello.txt', '/usr/local/bin/greet'], env: ['GREETING_STYLE'] } });
    expect(tpl.sizeBytes).toBeGreaterThan(0);
    // The progress, in order: each step's start, its output, its exit.
    const types = lines.filter((l) => l.type !== 'ping').map((l) => l.type);
    expect(types.slice(0, 2)).toEqual(['started', 'session']);
    expect(types.at(-2)).toBe('capturing');
    expect(types.at(-1)).toBe('done');
    const step3 = lines.filter((l) => 'step' in l && l.step === 3);
    expect(step3[0]?.type).toBe('step');
    expect(step3.at(-1)?.type).toBe('exit');
    const out = step3.filter((l) => l.type === 'stdout').map((l) => Buffer.from((l as { data: string }).data, 'base64').toString()).join('');
    expect(out).toBe('style=warm\ngreetings, builder\n');
    // The build session is gone.
    const buildId = (lines[1] as { sessionId: string }).sessionId;
    expect((await t.client.sessions.get(buildId)).info.state).toBe('terminated');
    expect(await t.client.templates.get('web')).toEqual(tpl);
    expect((await t.client.templates.list()).map((x) => x.name)).toEqual(['web']);

    const [a, b] = [await t.client.sessions.create({ template: 'web' }), await t.client.sessions.create({ template: 'web', objective: 'second' })];
    try {
      expect(a.info.parentSnapshotId).toBe(tpl.snapshotId);
      for (const s of [a, b]) {
        expect((await sh(s, 'cat /srv/hello.txt')).out).toBe('hello from the template\n');
        expect((await sh(s, 'greet you')).out).toBe('greetings, you\n');
        // The recipe's env is the machine's: a new command sees it.
        expect((await sh(s, 'echo $GREETING_STYLE')).out).toBe('warm\n');
        // The ticker keeps writing after the restore: its stamp moves.
        const t1 = (await sh(s, 'cat /tmp/tick')).out;
        await until('the ticker to move', async () => ((await sh(s, 'cat /tmp/tick')).out !== t1 ? true : undefined));
        // The recipe's web server answers.
        const got = await sh(s, "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8123/hello.txt').read().decode(), end='')\"");
        expect(got.out).toBe('hello from the template\n');
      }
      // Each its own identity.
      expect(a.info.hostname).not.toBe(b.info.hostname);
      expect((await sh(a, 'hostname')).out.trim()).toBe(a.info.hostname);
      expect((await sh(b, 'hostname')).out.trim()).toBe(b.info.hostname);
      expect((await sh(a, 'cat /etc/machine-id')).out).not.toBe((await sh(b, 'cat /etc/machine-id')).out);
      // Independent copies: a change in one is not in the other.
      await sh(a, 'echo mine > /srv/only-a');
      expect((await sh(b, 'test -e /srv/only-a; echo $?')).out).toBe('1\n');

      // A template built from this one has both recipes' work.
      const child = await t.client.templates.build('web-plus', { from: 'web', run: ['echo more > /srv/more.txt'] });
      expect(child.from).toBe('web');
      const c = await t.client.sessions.create({ template: 'web-plus' });
      expect((await sh(c, 'cat /srv/hello.txt /srv/more.txt')).out).toBe('hello from the template\nmore\n');
      await c.terminate();

      // Removing the template does not touch sessions made from it, and its image goes.
      await t.client.templates.delete('web');
      expect(snapshotDirs()).not.toContain(tpl.snapshotId);
      expect((await sh(a, 'cat /srv/hello.txt')).out).toBe('hello from the template\n');
      const gone = await failure(t.client.sessions.create({ template: 'web' }));
      expect(gone.code).toBe('invalid_argument');
      expect(gone.details?.field).toBe('template');
      expect((await failure(t.client.templates.get('web'))).code).toBe('not_found');
    } finally {
      await a.terminate();
      await b.terminate();
    }
  }, 300_000);

  it('a failing step stops the build with its exit code and output, and leaves nothing behind', async () => {
    const dirs = snapshotDirs();
    const lines: TemplateBuildLine[] = [];
    const e = await failure(t.client.templates.build('broken', { files: { '/tmp/x': 'x' }, run: ['echo before', 'echo boom >&2; exit 7', 'echo never'] }, { onEvent: (l) => lines.push(l) }));
    expect(e.code).toBe('invalid_argument');
    expect(e.details).toMatchObject({ field: 'recipe.run.1', exitCode: 7, stderr: 'boom\n', step: 2 });
    expect(lines.some((l) => l.type === 'step' && l.kind === 'run' && l.command === 'echo never')).toBe(false);
    expect(lines.find((l) => l.type === 'exit' && l.step === 2)).toMatchObject({ code: 7 });
    const buildId = (lines.find((l) => l.type === 'session') as { sessionId: string }).sessionId;
    // No template, no image, no session, no sandbox.
    expect((await t.client.templates.list()).map((x) => x.name)).not.toContain('broken');
    expect(snapshotDirs()).toEqual(dirs);
    expect((await t.client.sessions.get(buildId)).info.state).toBe('terminated');
    expect((await t.client.sessions.list()).map((s) => s.id)).not.toContain(buildId);
    expect(await until('the build sandbox to go', async () => ((await pidsMatching(buildId)).length === 0 ? true : undefined))).toBe(true);
    // The name is free again.
    const ok = await t.client.templates.build('broken', { run: ['true'] });
    expect(ok.name).toBe('broken');
    await t.client.templates.delete('broken');
  }, 180_000);

  it('refuses a command the policy forbids, as a failed step', async () => {
    const e = await failure(t.client.templates.build('nuke', { run: ['rm -rf /'] }));
    expect(e.code).toBe('invalid_argument');
    expect(e.details).toMatchObject({ field: 'recipe.run.0', stage: 'policy' });
    expect((await t.client.templates.list()).map((x) => x.name)).not.toContain('nuke');
  }, 120_000);

  it('bad input is a 400 (409 for a name in use) naming the field, before anything starts', async () => {
    const before = snapshotDirs();
    const sessions = (await t.client.sessions.list()).length;
    const unknown = await failure(t.client.templates.build('x', { run: [], colour: 'blue' } as never));
    expect(unknown).toMatchObject({ code: 'invalid_argument', details: { field: 'recipe.colour', httpStatus: 400 } });
    const top = await failure(t.client.templates.build('x', { run: [] }, { dockerfile: 'FROM x' } as never));
    expect(top.details?.field).toBe('dockerfile');
    const egress = await failure(t.client.templates.build('x', { run: [], egressAllow: ['pypi.org', 'not a host!'] }));
    expect(egress.details?.field).toBe('recipe.egressAllow.1');
    const from = await failure(t.client.templates.build('x', { from: 'nope', run: [] }));
    expect(from.details?.field).toBe('recipe.from');
    const name = await failure(t.client.templates.build('bad name', { run: [] }));
    expect(name.details?.field).toBe('name');
    await t.client.templates.build('taken', { run: ['true'] });
    const taken = await failure(t.client.templates.build('taken', { run: ['true'] }));
    expect(taken).toMatchObject({ code: 'conflict', details: { field: 'name', httpStatus: 409 } });
    const mixed = await failure(t.client.sessions.create({ template: 'taken', memoryMb: 1024 }));
    expect(mixed.details?.field).toBe('memoryMb');
    await t.client.templates.delete('taken');
    expect(snapshotDirs()).toEqual(before);
    expect((await t.client.sessions.list()).length).toBe(sessions);
  }, 180_000);

  it("another tenant's template is not found", async () => {
    await t.client.templates.build('mine', { run: ['true'] });
    const { apiKey } = await t.client.tenants.create('other-tpl');
    const other = new Berth({ url: t.url, token: apiKey });
    expect(await other.templates.list()).toEqual([]);
    expect((await failure(other.templates.get('mine'))).code).toBe('not_found');
    expect((await failure(other.templates.delete('mine'))).code).toBe('not_found');
    expect((await failure(other.sessions.create({ template: 'mine' }))).details?.field).toBe('template');
    // The same name is free in the other tenant.
    const theirs = await other.templates.build('mine', { run: ['echo theirs > /tmp/who'] });
    expect(theirs.tenantId).not.toBe((await t.client.templates.get('mine')).tenantId);
    await other.templates.delete('mine');
    await t.client.templates.delete('mine');
  }, 180_000);
});
