/**
 * A desktop on the QEMU backend (issue 11), one session under real QEMU (TCG here): the `computer` tool's
 * screenshot is a PNG of the screen, a one-field Tk application gets text typed into it through the tool,
 * and after hibernate and a wake the application still holds that text (Return makes it save the field).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SCREEN, pngInfo } from '../../src/core/index.js';
import { Berth, type Session } from '../../src/sdk/index.js';
import { hasCommand, skipReason } from '../helpers/env.js';
import { useTestServer } from '../helpers/server.js';

const skip = skipReason('QEMU desktop e2e', hasCommand('qemu-system-x86_64') ? undefined : 'qemu-system-x86_64 is not installed');

/** Saves the field on Return; writes the field's centre (root coordinates) once the window is on the screen. */
const APP = [
  'import tkinter as t',
  'r = t.Tk(); r.geometry("300x60+40+40"); e = t.Entry(r); e.pack(fill="x")',
  'e.bind("<Return>", lambda _: open("/tmp/typed", "w").write(e.get()))',
  'e.wait_visibility(); r.update()',
  'open("/tmp/at.w", "w").write("%d %d" % (e.winfo_rootx() + e.winfo_width() // 2, e.winfo_rooty() + e.winfo_height() // 2))',
  'import os; os.rename("/tmp/at.w", "/tmp/at")',
  'r.mainloop()',
].join('\n');

describe.skipIf(skip)('a desktop on the qemu backend', () => {
  const srv = useTestServer();

  it('screenshots, types into a Tk app through the computer tool, and keeps the app across hibernate and wake', async () => {
    const t0 = Date.now();
    const s: Session = await srv.t.client.sessions.create({ backend: 'qemu', desktop: true });
    const agent = new Berth({ url: srv.t.url, token: s.agentToken as string });
    const act = async (args: Record<string, unknown>) => {
      const r = await agent.tools.call(s.id, 'computer', args);
      if (r.decision !== 'allow') throw new Error(`computer ${JSON.stringify(args)}: ${JSON.stringify(r)}`);
      return r.result as { screenshot?: { data: string; width: number; height: number } };
    };

    const shot = (await act({ action: 'screenshot' })).screenshot;
    const tShot = Date.now();
    expect(pngInfo(Buffer.from(shot?.data ?? '', 'base64'))).toMatchObject({ width: DEFAULT_SCREEN.width, height: DEFAULT_SCREEN.height });
    await act({ action: 'screenshot' });
    console.log(`qemu desktop: create → first screenshot ${tShot - t0} ms, screenshot round trip ${Date.now() - tShot} ms`);

    await s.exec(['python3', '-c', APP], { background: true });
    let at = '';
    for (let i = 0; i < 300 && !at; i++) {
      at = (await s.run(['sh', '-c', 'cat /tmp/at 2>/dev/null || true'])).stdout.toString();
      if (!at) await sleep(100);
    }
    const point = at.split(' ').map(Number);
    expect(point).toHaveLength(2);
    await act({ action: 'left_click', coordinate: point, screenshot: false });
    await act({ action: 'type', text: 'typed before hibernate', screenshot: false });

    await s.hibernate();
    expect((await s.refresh()).state).toBe('hibernated');
    // The tool call wakes the machine; the application, with its field as typed, is still there.
    await act({ action: 'key', text: 'Return', screenshot: false });
    expect((await s.run(['cat', '/tmp/typed'])).stdout.toString()).toBe('typed before hibernate');
  }, 600_000);
});
