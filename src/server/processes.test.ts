/**
 * The background-process routes over the real engine and the in-memory driver: statuses, the NDJSON
 * output with offsets and cursors, resuming from a cursor, bad input, and agent tokens refused. Every
 * response (JSON, and each NDJSON line) is validated against the OpenAPI document as it passes.
 */
import { describe, expect, it } from 'vitest';
import { base64ToBytes, type ProcessOutputLine } from '../protocol/index.js';
import { useCheckedApp } from '../../test/helpers/checked-app.js';

const h = useCheckedApp();

async function call(method: string, path: string, body?: unknown, headers = h.auth) {
  const res = await h.app.fetch(new Request(`http://127.0.0.1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) }));
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, headers: res.headers };
}
const lines = (text: string) => text.trim().split('\n').map((l) => JSON.parse(l) as ProcessOutputLine);
const decode = (ls: ProcessOutputLine[], type: 'stdout' | 'stderr') =>
  ls.map((l) => (l.type === type ? Buffer.from(base64ToBytes(l.data)).toString() : '')).join('');

describe('background processes over HTTP', () => {
  it('starts at once, lists, replays with offsets and cursors, resumes from a cursor, kills', async () => {
    const s = (await call('POST', '/v1/sessions', {})).json as { id: string; agentToken: string };
    const started = await call('POST', `/v1/sessions/${s.id}/exec`, { argv: ['sh', '-c', 'echo one; echo two >&2; sleep 0.2; echo three; exit 5'], background: true });
    expect(started.status).toBe(200);
    expect(started.json).toEqual({ execId: expect.stringMatching(/^exe_/), pid: expect.any(Number) });
    const { execId } = started.json as { execId: string };

    const list = await call('GET', `/v1/sessions/${s.id}/processes`);
    expect(list.json.processes).toEqual([expect.objectContaining({ execId, state: 'running', exitCode: null, argv: ['sh', '-c', expect.any(String)] })]);

    const followed = await call('GET', `/v1/sessions/${s.id}/processes/${execId}/output?follow=true`);
    expect(followed.headers.get('content-type')).toContain('ndjson');
    const ls = lines(followed.text);
    expect(decode(ls, 'stdout')).toBe('one\nthree\n');
    expect(decode(ls, 'stderr')).toBe('two\n');
    expect(ls.at(-1)).toEqual({ type: 'exit', code: 5, signal: null, timedOut: false });
    const firstOut = ls.find((l) => l.type === 'stdout') as Extract<ProcessOutputLine, { offset: number }>;
    expect(firstOut).toMatchObject({ offset: 0 });

    // Resume from the cursor after the first stdout line: exactly the rest, nothing repeated.
    const rest = lines((await call('GET', `/v1/sessions/${s.id}/processes/${execId}/output?offset=${firstOut.cursor}`)).text);
    expect(decode(rest, 'stdout')).toBe('three\n');
    expect((await call('GET', `/v1/sessions/${s.id}/processes/${execId}`)).json).toMatchObject({ state: 'exited', exitCode: 5, stdoutBytes: 10, stderrBytes: 4 });

    const sleeper = (await call('POST', `/v1/sessions/${s.id}/exec`, { argv: ['sleep', '30'], background: true })).json as { execId: string };
    const now = lines((await call('GET', `/v1/sessions/${s.id}/processes/${sleeper.execId}/output`)).text);
    expect(now).toEqual([{ type: 'end', cursor: '0,0' }]); // no follow, still running: what is there, then end
    const k = await call('POST', `/v1/sessions/${s.id}/processes/${sleeper.execId}/kill`, { signal: 'TERM' });
    expect(k.json).toEqual({ execId: sleeper.execId, signal: 15, signalled: true });
    const ended = lines((await call('GET', `/v1/sessions/${s.id}/processes/${sleeper.execId}/output?follow=1`)).text);
    expect(ended.at(-1)).toMatchObject({ type: 'exit', code: 143, signal: 15 });
    expect((await call('POST', `/v1/sessions/${s.id}/processes/${sleeper.execId}/kill`, {})).json.signalled).toBe(false);

    const audit = (await h.t.engine.auditQuery(h.t.root, { sessionId: s.id })).map((e) => e.action);
    expect(audit.filter((a) => a === 'session.exec')).toHaveLength(2);
    expect(audit).toContain('session.exec.kill');
    await h.checker.settle();
    expect([...h.checker.seen.keys()]).toEqual(
      expect.arrayContaining([
        'POST /v1/sessions/{id}/exec',
        'GET /v1/sessions/{id}/processes',
        'GET /v1/sessions/{id}/processes/{execId}',
        'GET /v1/sessions/{id}/processes/{execId}/output',
        'POST /v1/sessions/{id}/processes/{execId}/kill',
      ]),
    );
  });

  it('answers 404 for an unknown execId, 400 for bad input, and refuses agent tokens', async () => {
    const s = (await call('POST', '/v1/sessions', {})).json as { id: string; agentToken: string };
    const unknown = 'exe_00000000000000000000';
    for (const [m, p] of [['GET', `processes/${unknown}`], ['GET', `processes/${unknown}/output`], ['POST', `processes/${unknown}/kill`], ['GET', 'processes/nonsense/output']] as const) {
      const r = await call(m, `/v1/sessions/${s.id}/${p}`, m === 'POST' ? {} : undefined);
      expect(r.status).toBe(404);
      expect(r.json.error.code).toBe('not_found');
    }
    const both = await call('POST', `/v1/sessions/${s.id}/exec`, { argv: ['cat'], background: true, stdin: true });
    expect(both.status).toBe(400);
    expect(both.json.error.details).toMatchObject({ field: 'stdin' });
    const { execId } = (await call('POST', `/v1/sessions/${s.id}/exec`, { argv: ['true'], background: true })).json as { execId: string };
    const badOffset = await call('GET', `/v1/sessions/${s.id}/processes/${execId}/output?offset=-1`);
    expect(badOffset.status).toBe(400);
    expect(JSON.stringify(badOffset.json.error.details)).toContain('offset');
    const badSignal = await call('POST', `/v1/sessions/${s.id}/processes/${execId}/kill`, { signal: 'NOPE' });
    expect(badSignal.status).toBe(400);

    const agent = { authorization: `Bearer ${s.agentToken}`, 'content-type': 'application/json' };
    expect((await call('GET', `/v1/sessions/${s.id}/processes`, undefined, agent)).status).toBe(403);
    expect((await call('POST', `/v1/sessions/${s.id}/exec`, { argv: ['true'], background: true }, agent)).status).toBe(403);
    expect((await call('GET', `/v1/sessions/${s.id}/processes/${execId}/output`, undefined, agent)).status).toBe(403);
    expect((await call('POST', `/v1/sessions/${s.id}/processes/${execId}/kill`, {}, agent)).status).toBe(403);
  });
});
