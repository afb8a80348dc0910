/**
 * Conformance cases for terminals (issue 9 §2), run against every driver like process-suite.ts. What is
 * typed uses only what the memory driver's terminal understands (its shell's echo, `stty size`, `exit N`,
 * and `cat` on the line discipline), so every case runs on every driver; `liveMemory` decides whether a
 * checkpoint must carry a running terminal.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ExecExit, SandboxDriver } from '../../src/core/index.js';
import { specFor, useConformanceTarget, type ConformanceTarget } from './driver-suite.js';

const enc = new TextEncoder();

/**
 * Follows a terminal's output from `offset` until `pattern` matches what came since (or it ends); resolves
 * with that text, the next offset and the exit when it ended.
 */
export async function until(d: SandboxDriver, sid: string, tid: string, pattern: RegExp | null, offset = 0, timeoutMs = 30_000) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  let text = '';
  let next = offset;
  let exit: ExecExit | null = null;
  try {
    for await (const ev of await d.processOutput(sid, tid, { follow: true, stdoutOffset: offset, signal: ctl.signal })) {
      if (ev.type === 'exit') {
        exit = ev.exit;
        break;
      }
      if (ev.type !== 'stdout') continue;
      text += Buffer.from(ev.data).toString('latin1');
      next = ev.offset + ev.data.byteLength;
      if (pattern?.test(text)) break;
    }
  } catch (e) {
    if (!ctl.signal.aborted) throw e;
  } finally {
    clearTimeout(timer);
  }
  if (pattern && !pattern.test(text) && !exit) throw new Error(`terminal output never matched ${pattern}: ${JSON.stringify(text.slice(-400))}`);
  return { text, next, exit };
}

export function terminalConformance(name: string, make: () => Promise<ConformanceTarget>, opts: { timeoutMs?: number } = {}): void {
  const T = opts.timeoutMs ?? 90_000;
  describe(`driver conformance (terminals): ${name}`, () => {
    const fx = useConformanceTarget(name, 'term', make);
    let d: SandboxDriver;
    let images: string;
    beforeAll(() => {
      d = fx.driver;
      images = fx.images;
    });
    const start = async (tag: string) => (await fx.start(tag)).sandboxId;

    it('opens the login shell on a PTY: env and size passed, resize seen by stty, exit code kept, listed apart from processes', async () => {
      const id = await start('term');
      const { pid } = await d.openTerminal(id, 'trm_one', { cols: 91, rows: 27, env: { TERM: 'xterm-256color', MARK: 'mark-7e1' } });
      expect(pid).toBeGreaterThan(0);
      await expect(d.openTerminal(id, 'trm_one', { cols: 80, rows: 24 })).rejects.toMatchObject({ code: 'conflict' });
      await expect(d.openTerminal(id, 'trm_bad', { cols: 0, rows: 24 })).rejects.toMatchObject({ code: 'invalid_argument' });
      const [info] = await d.listTerminals(id);
      expect(info).toMatchObject({ execId: 'trm_one', pid, state: 'running', cols: 91, rows: 27 });
      expect((await d.listProcesses(id)).map((p) => p.execId)).not.toContain('trm_one');

      await d.writeTerminal(id, 'trm_one', enc.encode('echo $MARK\r'));
      let r = await until(d, id, 'trm_one', /[\r\n]mark-7e1\r\n/);
      await d.writeTerminal(id, 'trm_one', enc.encode('stty size\r'));
      r = await until(d, id, 'trm_one', /[\r\n]27 91\r\n/, r.next);
      await d.resizeTerminal(id, 'trm_one', { cols: 120, rows: 40 });
      expect((await d.listTerminals(id))[0]).toMatchObject({ cols: 120, rows: 40 });
      await d.writeTerminal(id, 'trm_one', enc.encode('stty size\r'));
      r = await until(d, id, 'trm_one', /[\r\n]40 120\r\n/, r.next);
      await expect(d.resizeTerminal(id, 'trm_one', { cols: 5000, rows: 40 })).rejects.toMatchObject({ code: 'invalid_argument' });

      await d.writeTerminal(id, 'trm_one', enc.encode('exit 3\r'));
      r = await until(d, id, 'trm_one', null, r.next);
      expect(r.exit).toEqual({ code: 3, signal: null, timedOut: false });
      expect((await d.listTerminals(id))[0]).toMatchObject({ state: 'exited', exit: { code: 3 } });
      // The whole screen history is still there to replay from offset 0.
      expect((await until(d, id, 'trm_one', null)).text).toContain('mark-7e1');
      await expect(d.writeTerminal(id, 'trm_one', enc.encode('x'))).rejects.toMatchObject({ code: 'invalid_state' });
      await expect(d.writeTerminal(id, 'trm_nope', enc.encode('x'))).rejects.toMatchObject({ code: 'not_found' });
      await expect(d.resizeTerminal(id, 'trm_nope', { cols: 80, rows: 24 })).rejects.toMatchObject({ code: 'not_found' });
    }, T);

    it('runs a given command on the terminal (cat: lines echoed, ^D ends it); killProcess reaches a terminal', async () => {
      const id = await start('term-cmd');
      await d.openTerminal(id, 'trm_cat', { argv: ['cat'], cols: 80, rows: 24 });
      await d.writeTerminal(id, 'trm_cat', enc.encode('hello pty\r'));
      const r = await until(d, id, 'trm_cat', /hello pty\r\n(?:.|\r|\n)*hello pty\r\n/);
      await d.writeTerminal(id, 'trm_cat', enc.encode('\x04'));
      expect((await until(d, id, 'trm_cat', null, r.next)).exit).toMatchObject({ code: 0 });

      await d.openTerminal(id, 'trm_kill', { argv: ['cat'], cols: 80, rows: 24 });
      expect(await d.killProcess(id, 'trm_kill', { signalNumber: 9 })).toBe(true);
      expect((await until(d, id, 'trm_kill', null)).exit).toMatchObject({ code: 137, signal: 9 });
    }, T);

    it('a terminal is machine state: a checkpoint carries it (running with live memory, its output either way)', async () => {
      const id = await start('term-ckpt');
      await d.openTerminal(id, 'trm_ck', { cols: 80, rows: 24, env: { MARK: 'before-ckpt' } });
      await d.writeTerminal(id, 'trm_ck', enc.encode('echo $MARK\r'));
      await until(d, id, 'trm_ck', /[\r\n]before-ckpt\r\n/);
      const img = join(images, `term-${Date.now()}`);
      await mkdir(img);
      await d.checkpoint(id, img);
      const b = specFor('term-back', { identity: { hostname: 'back', machineId: 'b'.repeat(32), generation: 2, reason: 'wake' } });
      await d.restore(b, img);
      fx.own(b.sandboxId);
      const back = await until(d, b.sandboxId, 'trm_ck', /before-ckpt\r\n/);
      expect(back.text).toContain('before-ckpt');
      if (!d.capabilities.liveMemory) {
        expect((await d.listTerminals(b.sandboxId))[0]).toMatchObject({ execId: 'trm_ck', state: 'exited' });
        return;
      }
      expect((await d.listTerminals(b.sandboxId))[0]).toMatchObject({ execId: 'trm_ck', state: 'running', cols: 80, rows: 24 });
      await d.writeTerminal(b.sandboxId, 'trm_ck', enc.encode('echo after-$MARK\r'));
      await until(d, b.sandboxId, 'trm_ck', /[\r\n]after-before-ckpt\r\n/, back.next);
    }, T * 2);
  });
}
