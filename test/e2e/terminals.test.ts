/**
 * Terminals end to end (issue 9 §2) on real runsc with a real `berth serve` process: raw WebSocket clients
 * (one types, one watches and is refused, a late joiner gets the screen), agent tokens refused, the
 * terminal surviving hibernate → wake and a SIGKILL of the server, the asciicast recording, and the real
 * CLI (`berth shell`) in a real terminal (tmux) running a pager, a file typed through the tty, a Python REPL
 * and a resize, and vi.
 */
import { spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { Berth, type Session } from '../../src/sdk/index.js';
import { REPO, gvisorMissing, hasCommand, skipReason } from '../helpers/env.js';
import { freePort, runscIds, serveProcess } from '../helpers/serve-process.js';

const skip = skipReason('terminals e2e', gvisorMissing() ?? (hasCommand('tmux', ['-V']) ? undefined : 'tmux is not installed'));
const BIN = join(REPO, 'bin', 'berth');

/** A raw WebSocket client that keeps what it saw. */
class Client {
  text = '';
  controls: Array<Record<string, unknown>> = [];
  closed: { code: number; reason: string } | null = null;
  readonly ws: WebSocket;
  constructor(url: string, headers: Record<string, string>) {
    this.ws = new WebSocket(url, { headers });
    this.ws.on('message', (d: Buffer, binary: boolean) => {
      if (binary) this.text += d.toString('utf8');
      else this.controls.push(JSON.parse(d.toString('utf8')) as Record<string, unknown>);
    });
    this.ws.on('close', (code, reason) => (this.closed = { code, reason: reason.toString() }));
  }
  async hello(): Promise<Record<string, unknown>> {
    await this.until(() => this.controls.some((c) => c.type === 'hello') || this.closed !== null, 'hello');
    const h = this.controls.find((c) => c.type === 'hello');
    if (!h) throw new Error(`no hello: ${JSON.stringify({ controls: this.controls, closed: this.closed })}`);
    return h;
  }
  async until(ok: () => boolean, what: string, ms = 30_000): Promise<void> {
    for (const end = Date.now() + ms; !ok(); await sleep(20)) if (Date.now() > end) throw new Error(`timed out waiting for ${what}; saw ${JSON.stringify(this.text.slice(-500))}`);
  }
  async see(re: RegExp): Promise<void> {
    await this.until(() => re.test(this.text), String(re));
  }
  type(s: string): void {
    this.ws.send(Buffer.from(s), { binary: true });
  }
}

/** What an upgrade answered when it was refused: status and the JSON error. */
function refused(url: string, headers: Record<string, string>): Promise<{ status: number; body: { error: { code: string } } }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.on('unexpected-response', (_req, res) => {
      let b = '';
      res.on('data', (c: Buffer) => (b += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(b) as { error: { code: string } } }));
    });
    ws.on('open', () => reject(new Error('upgrade was accepted')));
    ws.on('error', () => undefined);
  });
}

describe.skipIf(skip)('terminals: WebSocket clients, hibernate/wake, server SIGKILL, CLI in tmux (real runsc, real server)', () => {
  let dataDir = '';
  let child: ChildProcess | undefined;
  let url = '';
  let ws = '';
  let token = '';
  let berth: Berth;
  let s: Session;
  const tmux = `berth-term-${process.pid}`;
  const auth = () => ({ authorization: `Bearer ${token}` });

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'berth-term-'));
    const port = await freePort();
    child = await serveProcess(dataDir, port);
    url = `http://127.0.0.1:${port}`;
    ws = `ws://127.0.0.1:${port}`;
    token = (await readFile(join(dataDir, 'root.key'), 'utf8')).trim();
    berth = new Berth({ url, token });
    s = await berth.sessions.create();
  }, 600_000);

  afterAll(async () => {
    spawnSync('tmux', ['kill-session', '-t', tmux]);
    child?.kill('SIGKILL');
    if (dataDir) {
      for (const id of runscIds(dataDir)) {
        spawnSync('sh', ['-c', `echo THAWED > /sys/fs/cgroup/freezer/berth/${id}/freezer.state`]);
        spawnSync('runsc', [`--root=${join(dataDir, 'gvisor', 'runsc')}`, 'delete', '--force', id], { timeout: 30_000 });
      }
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('two clients: one types, the watcher is refused (named), a late joiner gets the screen; agent tokens and unknown terminals refused; recorded', async () => {
    const a = new Client(`${ws}/v1/sessions/${s.id}/terminals?cols=100&rows=30&env=GREETING=hello-ws`, auth());
    const ha = await a.hello();
    expect(ha).toMatchObject({ type: 'hello', role: 'controller', cols: 100, rows: 30 });
    const tid = ha.termId as string;
    expect(tid).toMatch(/^trm_/);
    a.type('echo "$GREETING from $TERM"; stty size\r');
    await a.see(/hello-ws from xterm-256color\r\n30 100\r\n/);

    // A late joiner (watch mode) first gets the screen as it is, then live output.
    const b = new Client(`${ws}/v1/sessions/${s.id}/terminals/${tid}?mode=watch`, auth());
    expect(await b.hello()).toMatchObject({ role: 'watcher', termId: tid });
    await b.see(/hello-ws from xterm-256color/);
    // The watcher's input is refused server-side, with a named error; nothing reaches the shell.
    b.type('echo WATCHER-WAS-HERE\r');
    await b.until(() => b.controls.some((c) => c.type === 'error'), 'an error frame');
    expect(b.controls.find((c) => c.type === 'error')).toMatchObject({ error: { code: 'forbidden', details: { reason: 'not_controller' } } });
    b.ws.send(JSON.stringify({ type: 'resize', cols: 40, rows: 10 }));
    await b.until(() => b.controls.filter((c) => c.type === 'error').length === 2, 'a second error frame');
    // A third client asking for control while it is held becomes a watcher too.
    const c3 = new Client(`${ws}/v1/sessions/${s.id}/terminals/${tid}`, auth());
    expect(await c3.hello()).toMatchObject({ role: 'watcher' });
    a.type('echo live-$((6*7))\r');
    await b.see(/live-42/);
    await c3.see(/live-42/);
    expect(a.text + b.text).not.toContain('\nWATCHER-WAS-HERE');
    // The controller leaves: the watcher may take input.
    a.ws.close();
    await a.until(() => a.closed !== null, 'a closed');
    await sleep(200);
    c3.ws.send(JSON.stringify({ type: 'control' }));
    await c3.until(() => c3.controls.some((c) => c.type === 'role' && c.role === 'controller'), 'control granted');
    c3.type('echo from-c3\r');
    await b.see(/[\r\n]from-c3\r\n/);
    b.ws.close();
    c3.ws.close();

    // Agents reach a machine only through gated tools: their token opens no terminal, anywhere.
    const agentToken = s.agentToken!;
    expect(await refused(`${ws}/v1/sessions/${s.id}/terminals`, { authorization: `Bearer ${agentToken}` })).toMatchObject({ status: 403, body: { error: { code: 'forbidden' } } });
    expect(await refused(`${ws}/v1/sessions/${s.id}/terminals/${tid}`, { authorization: `Bearer ${agentToken}` })).toMatchObject({ status: 403 });
    const asAgent = await fetch(`${url}/v1/sessions/${s.id}/terminals`, { headers: { authorization: `Bearer ${agentToken}` } });
    expect(asAgent.status).toBe(403);
    await expect(new Berth({ url, token: agentToken }).sessions.get(s.id).then((x) => x.terminals.attach(tid))).rejects.toMatchObject({ code: 'forbidden' });
    // Unknown terminal: 404 on every route; no credential: 401; a ticket is single-use.
    expect(await refused(`${ws}/v1/sessions/${s.id}/terminals/trm_00000000000000000000`, auth())).toMatchObject({ status: 404, body: { error: { code: 'not_found' } } });
    expect((await fetch(`${url}/v1/sessions/${s.id}/terminals/trm_00000000000000000000`, { headers: auth() })).status).toBe(404);
    expect((await fetch(`${url}/v1/sessions/${s.id}/terminals/nope/recording`, { headers: auth() })).status).toBe(404);
    expect(await refused(`${ws}/v1/sessions/${s.id}/terminals/${tid}`, {})).toMatchObject({ status: 401 });
    const { ticket } = (await (await fetch(`${url}/v1/sessions/${s.id}/terminals/${tid}/tickets`, { method: 'POST', headers: auth() })).json()) as { ticket: string };
    const viaTicket = new Client(`${ws}/v1/sessions/${s.id}/terminals/${tid}?ticket=${ticket}&mode=watch`, {});
    await viaTicket.hello();
    viaTicket.ws.close();
    expect(await refused(`${ws}/v1/sessions/${s.id}/terminals/${tid}?ticket=${ticket}`, {})).toMatchObject({ status: 401 });

    // The recording: asciicast v2, what was shown and typed.
    const cast = await s.terminals.recording(tid);
    const [header, ...events] = cast.trim().split('\n').map((l) => JSON.parse(l) as unknown);
    expect(header).toMatchObject({ version: 2, width: 100, height: 30 });
    expect(events.some((e) => Array.isArray(e) && e[1] === 'o' && String(e[2]).includes('live-42'))).toBe(true);
    expect(events.some((e) => Array.isArray(e) && e[1] === 'i' && String(e[2]).includes('from-c3'))).toBe(true);
    expect(cast).not.toContain('WATCHER-WAS-HERE');
  }, 300_000);

  it('the SDK: create, write, read, resize, wait for the exit code; kill', async () => {
    const t = await s.terminals.create({ cols: 90, rows: 20, command: ['sh', '-c', 'read line; stty size; echo "got $line"; exit 7'] });
    expect(t.role).toBe('controller');
    t.resize(91, 21);
    await sleep(300);
    t.write('abc\r');
    let out = '';
    for await (const c of t) out += Buffer.from(c).toString();
    expect(out).toMatch(/21 91\r\ngot abc/);
    expect(await t.wait()).toEqual({ code: 7, signal: null });
    const k = await s.terminals.create({ command: ['sleep', '600'] });
    expect(await k.kill(9)).toMatchObject({ signalled: true, signal: 9 });
    expect((await k.wait()).code).toBe(137);
    expect((await s.terminals.list()).find((x) => x.termId === k.termId)).toMatchObject({ state: 'exited', exitCode: 137 });
  }, 120_000);

  it('a terminal survives hibernate → wake and a SIGKILL of the server: reattach, the screen is still there, the same shell goes on', async () => {
    const t = await s.terminals.create({ cols: 80, rows: 24 });
    const tid = t.termId;
    t.write('export MARK=kept-$$; echo "mark is $MARK"\r');
    let seen = '';
    for await (const c of t) if ((seen += Buffer.from(c).toString()).match(/mark is kept-\d+\r\n/)) break;
    const pid = /mark is kept-(\d+)/.exec(seen)![1];
    t.close();

    await s.hibernate();
    expect((await s.refresh()).state).toBe('hibernated');
    const back = new Client(`${ws}/v1/sessions/${s.id}/terminals/${tid}`, auth()); // attaching wakes it
    expect(await back.hello()).toMatchObject({ role: 'controller' });
    await back.see(new RegExp(`mark is kept-${pid}`)); // the screen, rebuilt from the sandbox's ring
    back.type('echo "again $MARK"\r');
    await back.see(new RegExp(`again kept-${pid}`));
    back.ws.close();

    child!.kill('SIGKILL');
    await new Promise((r) => child!.once('exit', r));
    child = await serveProcess(dataDir, Number(new URL(url).port));
    const after = new Client(`${ws}/v1/sessions/${s.id}/terminals/${tid}`, auth());
    await after.hello();
    await after.see(new RegExp(`again kept-${pid}`));
    after.type('echo "still $MARK"\r');
    await after.see(new RegExp(`still kept-${pid}`));
    after.ws.close();
  }, 300_000);

  it('berth shell in a real terminal (tmux): vi, a pager, a file typed through the tty, a Python REPL, a resize seen by stty, the remote exit status', async () => {
    const env = `BERTH_URL=${url} BERTH_TOKEN=${token} TERM=xterm-256color`;
    const pane = () => spawnSync('tmux', ['capture-pane', '-p', '-t', tmux], { encoding: 'utf8' }).stdout;
    const keys = (...k: string[]) => spawnSync('tmux', ['send-keys', '-t', tmux, ...k]);
    const waitPane = async (re: RegExp, ms = 60_000) => {
      for (const end = Date.now() + ms; !re.test(pane()); await sleep(100)) if (Date.now() > end) throw new Error(`pane never showed ${re}:\n${pane()}`);
    };
    const readText = async (path: string) => {
      const parts: Uint8Array[] = [];
      for await (const c of await s.files.read(path)) parts.push(c);
      return Buffer.concat(parts).toString();
    };
    const status = join(dataDir, 'shell-status');
    spawnSync('tmux', ['new-session', '-d', '-s', tmux, '-x', '120', '-y', '35', `env ${env} ${process.execPath} ${BIN} shell ${s.id}; echo "exited:$?" > ${status}; sleep 600`]);
    await waitPane(/root@[^\n]*#/);
    keys('stty size', 'Enter');
    await waitPane(/^35 120$/m);
    // A resize of the local terminal reaches the remote one (SIGWINCH → resize → stty).
    spawnSync('tmux', ['resize-window', '-t', tmux, '-x', '100', '-y', '30']);
    await sleep(500);
    keys('clear; stty size', 'Enter');
    await waitPane(/^30 100$/m);

    // vi: a full-screen editor in raw mode (insert, Escape, an ex command), its file read back through the API.
    keys('clear; vi /tmp/vi.txt', 'Enter');
    await waitPane(/^~/m);
    keys('i');
    keys('-l', 'written in vi');
    keys('Escape');
    keys(':wq', 'Enter');
    await waitPane(/root@[^\n]*# ?$/m);
    expect(await readText('/tmp/vi.txt')).toBe('written in vi\n');

    // A pager (keys in raw mode) and a file typed through the tty (^D).
    keys('clear; less /etc/os-release', 'Enter');
    await waitPane(/Debian/);
    keys('q');
    await waitPane(/root@[^\n]*# ?$/m);
    keys('clear; cat > /tmp/typed.txt', 'Enter');
    await sleep(300);
    keys('typed in a tty', 'Enter');
    await waitPane(/^typed in a tty$/m);
    keys('C-d');
    await waitPane(/root@[^\n]*# ?$/m);
    expect(await readText('/tmp/typed.txt')).toBe('typed in a tty\n');

    keys('clear; python3', 'Enter');
    await waitPane(/^>>> ?$/m);
    keys('print(6 * 7)', 'Enter');
    await waitPane(/^42$/m);
    keys('exit()', 'Enter');
    await waitPane(/root@[^\n]*# ?$/m);
    keys('exit 5', 'Enter');
    for (let i = 0; !existsSync(status); i++) {
      expect(i).toBeLessThan(300);
      await sleep(100);
    }
    expect((await readFile(status, 'utf8')).trim()).toBe('exited:5');
  }, 300_000);
});
