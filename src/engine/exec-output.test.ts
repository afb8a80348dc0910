import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { SHELL_EXEC } from '../policy/builtin-tools.js';
import { validateResult } from '../policy/index.js';
import { HeadTail, streamFields } from './exec-output.js';

/** Feeds `data` in chunks of random sizes (1..max bytes), as an exec stream arrives. */
function feed(s: HeadTail, data: Buffer, max = 5000): HeadTail {
  for (let i = 0; i < data.length; ) {
    const n = 1 + Math.floor(Math.random() * max);
    s.push(new Uint8Array(data.subarray(i, i + n)));
    i += n;
  }
  return s;
}

const result = (out: HeadTail, err: HeadTail) => ({
  exitCode: 0,
  timedOut: false,
  truncated: out.omitted > 0 || err.omitted > 0,
  ...streamFields('stdout', out),
  ...streamFields('stderr', err),
});

describe('shell.exec output: head and tail within the cap', () => {
  it('keeps exactly the first and last bytes of a stream whatever the chunking', () => {
    for (let round = 0; round < 50; round++) {
      const data = randomBytes(Math.floor(Math.random() * 40_000));
      const head = Math.floor(Math.random() * 9000);
      const tail = Math.floor(Math.random() * 9000);
      const s = feed(new HeadTail(head, tail), data, 1 + Math.floor(Math.random() * 6000));
      const p = s.parts();
      expect(s.total).toBe(data.length);
      const keptHead = Math.min(head, data.length);
      expect(p.head.equals(data.subarray(0, keptHead))).toBe(true);
      const keptTail = Math.min(tail, data.length - keptHead);
      expect(p.tail.equals(data.subarray(data.length - keptTail))).toBe(true);
      expect(s.omitted).toBe(data.length - keptHead - keptTail);
    }
  });

  it('returns output within the cap whole, as text when it is UTF-8 (a byte-order mark kept) and as base64 when not', () => {
    const text = feed(new HeadTail(10, 10), Buffer.from('\ufeffhé\n'));
    expect(streamFields('stdout', text)).toEqual({ stdout: '\ufeffhé\n', stdoutBytes: 7 });
    const bin = Buffer.from([0x61, 0xff, 0xfe, 0x00, 0x80]);
    expect(streamFields('stderr', feed(new HeadTail(10, 10), bin))).toEqual({ stderrBase64: bin.toString('base64'), stderrBytes: 5 });
    expect(validateResult(SHELL_EXEC, result(text, feed(new HeadTail(10, 10), bin))).ok).toBe(true);
  });

  it('moves a cut that falls inside a character to its edge, so long text stays text and nothing is replaced', () => {
    // 'é' is two bytes and '€' three: caps of odd sizes cut inside them.
    const data = Buffer.from('é€'.repeat(5000));
    for (const [h, t] of [[1001, 1001], [1000, 999], [1002, 1003]] as const) {
      const s = feed(new HeadTail(h, t), data);
      const f = streamFields('stdout', s) as { stdout: string; stdoutTail: string; stdoutBytes: number; stdoutOmittedBytes: number };
      expect(f.stdout).not.toContain('\ufffd');
      expect(f.stdoutTail).not.toContain('\ufffd');
      expect(data.subarray(0, Buffer.byteLength(f.stdout)).toString()).toBe(f.stdout);
      expect(data.subarray(data.length - Buffer.byteLength(f.stdoutTail)).toString()).toBe(f.stdoutTail);
      expect(Buffer.byteLength(f.stdout) + Buffer.byteLength(f.stdoutTail) + f.stdoutOmittedBytes).toBe(data.length);
      expect(Buffer.byteLength(f.stdout)).toBeGreaterThan(h - 3);
      expect(f.stdoutBytes).toBe(data.length);
    }
  });

  it('returns a long binary stream as base64 head and tail, byte for byte, and the schema accepts exactly these shapes', () => {
    const data = randomBytes(50_000);
    const s = feed(new HeadTail(1000, 1000), data);
    const f = streamFields('stdout', s) as Record<string, string | number>;
    expect(Buffer.from(f.stdoutBase64 as string, 'base64').equals(data.subarray(0, 1000))).toBe(true);
    expect(Buffer.from(f.stdoutTailBase64 as string, 'base64').equals(data.subarray(49_000))).toBe(true);
    expect(f).toMatchObject({ stdoutBytes: 50_000, stdoutOmittedBytes: 48_000 });
    const empty = new HeadTail(1000, 1000);
    const ok = result(s, empty);
    expect(validateResult(SHELL_EXEC, ok).ok).toBe(true);
    // Text and base64 together, a tail without the omitted count, a count without a tail: refused.
    expect(validateResult(SHELL_EXEC, { ...ok, stdout: 'x' }).ok).toBe(false);
    expect(validateResult(SHELL_EXEC, { ...ok, stdoutOmittedBytes: undefined }).ok).toBe(false);
    const { stdoutTailBase64: _t, ...noTail } = ok as Record<string, unknown>;
    expect(validateResult(SHELL_EXEC, noTail).ok).toBe(false);
    const { stderr: _e, ...noStderr } = ok as Record<string, unknown>;
    expect(validateResult(SHELL_EXEC, noStderr).ok).toBe(false);
  });
});
