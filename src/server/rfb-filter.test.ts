import { describe, expect, it } from 'vitest';
import { ConfigError } from '../core/index.js';
import { RFB_MAX_CUT_TEXT, RfbClientFilter, RfbProtocolError } from './rfb-filter.js';

const u8 = (...a: number[]) => Buffer.from(a);
const be16 = (n: number) => [(n >> 8) & 0xff, n & 0xff];
const be32 = (n: number) => [...Buffer.from(Int32Array.of(n).buffer).reverse()];

const VERSION = Buffer.from('RFB 003.008\n', 'latin1');
const SECURITY_NONE = u8(1);

/** One of each client message noVNC sends, as [bytes, is input]. */
const MESSAGES: Array<[string, Buffer, boolean]> = [
  ['SetPixelFormat', u8(0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0), false],
  ['SetEncodings', u8(2, 0, ...be16(3), ...be32(7), ...be32(1), ...be32(0)), false],
  ['FramebufferUpdateRequest', u8(3, 0, ...be16(0), ...be16(0), ...be16(1280), ...be16(800)), false],
  ['KeyEvent', u8(4, 1, 0, 0, ...be32(0x61)), true],
  ['PointerEvent', u8(5, 1, ...be16(100), ...be16(200)), true],
  ['ClientCutText', Buffer.concat([u8(6, 0, 0, 0, ...be32(5)), Buffer.from('hello')]), true],
  ['ClientCutText (extended)', Buffer.concat([u8(6, 0, 0, 0, ...be32(-6)), u8(0x10, 0, 0, 1, 0xaa, 0xbb)]), true],
  ['EnableContinuousUpdates', u8(150, 1, ...be16(0), ...be16(0), ...be16(1280), ...be16(800)), false],
  ['ClientFence', u8(248, 0, 0, 0, ...be32(0x80000003), 3, 9, 8, 7), false],
  ['ClientFence (empty)', u8(248, 0, 0, 0, ...be32(0), 0), false],
  ['SetDesktopSize', u8(251, 0, ...be16(1024), ...be16(768), 1, 0, ...be32(0), ...be16(0), ...be16(0), ...be16(1024), ...be16(768), ...be32(0)), true],
  ['QEMU extended key', u8(255, 0, ...be16(1), ...be32(0x61), ...be32(30)), true],
  ['SetEncodings (empty)', u8(2, 0, 0, 0), false],
];

const STREAM = Buffer.concat([VERSION, SECURITY_NONE, u8(0), ...MESSAGES.map((m) => m[1])]);
/** What the server should get: ClientInit forced shared (1), input kept or dropped. */
const expected = (input: boolean) => Buffer.concat([VERSION, SECURITY_NONE, u8(1), ...MESSAGES.filter((m) => input || !m[2]).map((m) => m[1])]);

function feed(f: RfbClientFilter, chunks: Buffer[]): Buffer {
  return Buffer.concat(chunks.map((c) => f.push(c)));
}

function splitAt(b: Buffer, cuts: number[]): Buffer[] {
  const out: Buffer[] = [];
  let from = 0;
  for (const c of [...cuts, b.length]) {
    out.push(b.subarray(from, c));
    from = c;
  }
  return out;
}

describe('RfbClientFilter', () => {
  it('passes every message whole, split at every byte offset, and forces the shared flag', () => {
    for (const input of [true, false]) {
      const want = expected(input);
      for (let k = 0; k <= STREAM.length; k++) {
        const f = new RfbClientFilter({ mayInput: () => input });
        expect(feed(f, splitAt(STREAM, [k])), `split at ${k}, input ${input}`).toEqual(want);
        expect(f.dropped).toBe(input ? 0 : MESSAGES.filter((m) => m[2]).length);
      }
    }
  });

  it('one byte at a time, and at every pair of offsets, gives the same bytes', () => {
    const want = expected(false);
    const f = new RfbClientFilter({ mayInput: () => false });
    expect(feed(f, [...STREAM].map((b) => u8(b)))).toEqual(want);
    for (let i = 0; i <= STREAM.length; i += 3) {
      for (let j = i; j <= STREAM.length; j += 5) {
        expect(feed(new RfbClientFilter({ mayInput: () => false }), splitAt(STREAM, [i, j])), `cuts ${i},${j}`).toEqual(want);
      }
    }
  });

  it('asks mayInput when each input message is complete: a change applies from the next message', () => {
    let allowed = false;
    const f = new RfbClientFilter({ mayInput: () => allowed });
    f.push(Buffer.concat([VERSION, SECURITY_NONE, u8(0)]));
    const click = u8(5, 1, ...be16(10), ...be16(20));
    expect(f.push(click.subarray(0, 3))).toHaveLength(0);
    allowed = true; // the lease arrives while the message is half-way: it counts, since it completes now
    expect(f.push(click.subarray(3))).toEqual(click);
    allowed = false;
    expect(f.push(click)).toHaveLength(0);
    expect(f.push(u8(3, 1, 0, 0, 0, 0, 0, 10, 0, 10))).toHaveLength(10); // update requests always pass
    expect([f.forwarded, f.dropped]).toEqual([2, 1]);
  });

  it('takes ExtendedMouseButtons and XVP out of SetEncodings, keeping the rest in order', () => {
    const f = new RfbClientFilter({ mayInput: () => true });
    f.push(Buffer.concat([VERSION, SECURITY_NONE, u8(1)]));
    const encs = [7, -316, 1, -309, -258, 0xc0a1e5ce | 0];
    const out = f.push(u8(2, 0, ...be16(encs.length), ...encs.flatMap(be32)));
    const kept = [7, 1, -258, 0xc0a1e5ce | 0];
    expect(out).toEqual(u8(2, 0, ...be16(kept.length), ...kept.flatMap(be32)));
  });

  const fails = (chunks: Buffer[], reason: RegExp, o: { maxCutText?: number } = {}) => {
    const f = new RfbClientFilter({ mayInput: () => true, ...o });
    let err: unknown;
    try {
      feed(f, chunks);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RfbProtocolError);
    expect((err as RfbProtocolError).code).toBe('invalid_argument');
    expect((err as RfbProtocolError).details?.reason).toBe('rfb_protocol');
    expect((err as Error).message).toMatch(reason);
    // Once failed, it stays failed: nothing more is forwarded.
    expect(() => f.push(u8(3))).toThrow(RfbProtocolError);
  };
  const ready = Buffer.concat([VERSION, SECURITY_NONE, u8(1)]);

  it('ends the connection on what it cannot read', () => {
    fails([Buffer.from('RFB 003.003\n')], /protocol version/);
    fails([Buffer.from('GET / HTTP/1.1\r\n')], /protocol version/);
    fails([VERSION, u8(2)], /security type 2/); // VNC authentication: Berth authenticates the socket, not the server
    fails([ready, u8(7, 0, 0)], /unknown client message type 7/);
    fails([ready, u8(250, 0, 1, 2)], /unknown client message type 250/); // XVP: never enabled
    fails([ready, u8(255, 1, 0, 0)], /QEMU client message subtype 1/);
    fails([ready, u8(248, 0, 0, 0, 0, 0, 0, 0, 65)], /ClientFence payload of 65/);
    fails([ready, u8(6, 0, 0, 0, ...be32(RFB_MAX_CUT_TEXT + 1))], /over the limit/);
    fails([ready, u8(6, 0, 0, 0, ...be32(-(RFB_MAX_CUT_TEXT + 1)))], /over the limit/);
    fails([ready, u8(6, 0, 0, 0, ...be32(-0x80000000))], /over the limit/);
    fails([ready, u8(6, 0, 0, 0, ...be32(11))], /over the limit/, { maxCutText: 10 });
  });

  it('a cut text at the limit passes, in pieces', () => {
    const f = new RfbClientFilter({ mayInput: () => true, maxCutText: 1000 });
    f.push(ready);
    const msg = Buffer.concat([u8(6, 0, 0, 0, ...be32(1000)), Buffer.alloc(1000, 0x41)]);
    expect(feed(f, splitAt(msg, [3, 500, 999]))).toEqual(msg);
  });

  it('refuses bad options', () => {
    expect(() => new RfbClientFilter({ mayInput: undefined as never })).toThrow(ConfigError);
    expect(() => new RfbClientFilter({ mayInput: () => true, maxCutText: -1 })).toThrow(ConfigError);
  });
});
