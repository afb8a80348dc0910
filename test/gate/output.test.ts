/**
 * shell.exec output an agent can use (issue 8 §5), through the HTTP API with an agent token on a real server
 * and real gVisor sandboxes: output past the cap no longer stops the command, the result keeps its first and
 * last parts with exact byte counts, and bytes that are not UTF-8 come back as base64, unchanged. Operator
 * tools' output past the cap is still refused. The cap is the server's default, 1 MiB per stream.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CallResultView } from '../../src/sdk/index.js';
import { DEFAULT_EXEC_LIMITS } from '../../src/engine/gate.js';
import { gvisorMissing, skipReason } from '../helpers/env.js';
import { TEST_POLICY, destroyGateServer, newSession, newTenant, startGateServer, type GateServer, type SessionHandle, type TenantHandle } from './harness.js';

const skip = skipReason('shell.exec output', gvisorMissing());
const CAP = DEFAULT_EXEC_LIMITS.outputCapBytes;

interface ExecResult {
  exitCode: number;
  timedOut: boolean;
  truncated: boolean;
  stdout?: string;
  stdoutTail?: string;
  stdoutBase64?: string;
  stdoutTailBase64?: string;
  stdoutBytes: number;
  stdoutOmittedBytes?: number;
  stderr?: string;
  stderrTail?: string;
  stderrBase64?: string;
  stderrBytes: number;
  stderrOmittedBytes?: number;
}
function allowed(r: CallResultView): ExecResult {
  expect(r.decision).toBe('allow');
  return (r as { result: ExecResult }).result;
}

describe.skipIf(skip)('shell.exec output past the cap and not UTF-8, on gVisor', () => {
  let s: GateServer;
  let t: TenantHandle;
  let a: SessionHandle;
  const exec = async (command: string) => allowed(await a.agent.tools.call(a.id, 'shell.exec', { command }));

  beforeAll(async () => {
    s = await startGateServer();
    t = await newTenant(s, 'output');
    await t.op.policy.set(TEST_POLICY);
    a = await newSession(s, t.op);
  }, 120_000);
  afterAll(async () => {
    await destroyGateServer(s);
  }, 120_000);

  it('runs a command whose output passes the cap to completion and keeps its first and last parts', async () => {
    // 3 MB of numbered lines on stdout, 2 MB on stderr, then a file written only after all of it: the
    // command was not stopped at the cap.
    const r = await exec(
      'printf BEGIN; seq 1 400000; printf END; ' +
        '(printf ERR-BEGIN; head -c 2000000 /dev/zero | tr "\\0" e; printf ERR-END) >&2; ' +
        'echo finished > /tmp/finished; exit 3',
    );
    const seqBytes = Array.from({ length: 400_000 }, (_, i) => `${i + 1}\n`).join('').length;
    expect(r).toMatchObject({ exitCode: 3, timedOut: false, truncated: true, stdoutBytes: 5 + seqBytes + 3, stderrBytes: 9 + 2_000_000 + 7 });
    expect(r.stdout?.startsWith('BEGIN1\n2\n3\n')).toBe(true);
    expect(r.stdoutTail?.endsWith('399999\n400000\nEND')).toBe(true);
    expect(r.stderr?.startsWith('ERR-BEGINeee')).toBe(true);
    expect(r.stderrTail?.endsWith('eeeERR-END')).toBe(true);
    // Within the cap, and nothing is counted twice or lost: head + tail + omitted = every byte written.
    for (const [head, tail, total, omitted] of [
      [r.stdout, r.stdoutTail, r.stdoutBytes, r.stdoutOmittedBytes],
      [r.stderr, r.stderrTail, r.stderrBytes, r.stderrOmittedBytes],
    ] as const) {
      const kept = Buffer.byteLength(head ?? '') + Buffer.byteLength(tail ?? '');
      expect(kept).toBeLessThanOrEqual(CAP);
      expect(kept).toBeGreaterThan(CAP - 8);
      expect(kept + (omitted ?? 0)).toBe(total);
    }
    expect(allowed(await a.agent.tools.call(a.id, 'shell.exec', { command: 'cat /tmp/finished' })).stdout).toBe('finished\n');
  }, 120_000);

  it('returns output that is not valid UTF-8 as base64, byte for byte, and keeps a byte-order mark', async () => {
    const r = await exec("printf 'ok\\377\\376\\000\\200end'; printf '\\357\\273\\277bom' >&2");
    expect(r.stdout).toBeUndefined();
    expect(Buffer.from(r.stdoutBase64 as string, 'base64')).toEqual(Buffer.from([0x6f, 0x6b, 0xff, 0xfe, 0x00, 0x80, 0x65, 0x6e, 0x64]));
    expect(r).toMatchObject({ truncated: false, stdoutBytes: 9, stderr: '\ufeffbom', stderrBytes: 6 });
  }, 60_000);

  it('returns a long binary stream as base64 head and tail, exactly the bytes the command wrote', async () => {
    // A deterministic 3 MB byte stream (not UTF-8), hashed inside the sandbox to compare the kept parts.
    const gen = "python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 12288)'";
    const r = await exec(gen);
    const all = Buffer.alloc(256 * 12288);
    for (let i = 0; i < all.length; i++) all[i] = i % 256;
    const head = Buffer.from(r.stdoutBase64 as string, 'base64');
    const tail = Buffer.from(r.stdoutTailBase64 as string, 'base64');
    expect(r).toMatchObject({ truncated: true, stdoutBytes: all.length, stdoutOmittedBytes: all.length - head.length - tail.length });
    expect(head.equals(all.subarray(0, head.length))).toBe(true);
    expect(tail.equals(all.subarray(all.length - tail.length))).toBe(true);
    expect(head.length + tail.length).toBe(CAP);
  }, 60_000);

  it("still refuses an operator tool's output past the cap, even when it is valid JSON", async () => {
    await t.op.tools.define({
      name: 'test.big',
      description: 'prints 3 MB of valid JSON',
      risk: 'read',
      inputSchema: { type: 'object' },
      outputSchema: { type: 'object', required: ['s'], properties: { s: { type: 'string' } } },
      executor: { kind: 'command', argv: ['/bin/sh', '-c', 'cat >/dev/null; printf \'{"s":"\'; head -c 3000000 /dev/zero | tr "\\0" a; printf \'"}\''] },
    });
    await t.op.tools.install(a.id, ['shell.exec', 'test.big']);
    const r = await a.agent.tools.call(a.id, 'test.big', {});
    expect(r.decision === 'deny' ? { stage: r.stage, code: r.code } : r.decision).toEqual({ stage: 'result', code: 'result_invalid' });
  }, 60_000);
});
