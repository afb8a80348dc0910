/**
 * The agent as a process: connecting through noise, timeouts, its death and a new host; its lifetime under
 * signals; device mode (as under QEMU); identity. Built from source and run on the host, like channel.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { AgentChannel } from './channel.js';
import { agentBin, agents, codeOf, readAll, run, spawnAgent, startAgent, stop, strayPids, useAgentHarness, work } from '../../../test/helpers/agent-harness.js';
import { skipReason } from '../../../test/helpers/env.js';

useAgentHarness();

describe('connection', () => {
  it('connects through garbage, an over-long line and a partial line in both directions', async () => {
    const proc = spawnAgent();
    // Host to agent: leftovers of an earlier host, ending in half a line.
    proc.stdin.write('garbage\nX 1 not a command\n');
    proc.stdin.write(`${'Z'.repeat(1_200_000)}\n`);
    proc.stdin.write('R 5 L3Rt');
    // Agent to host: what an earlier host left unread, ending in half a line.
    const input = new PassThrough();
    input.write('o 1 aGVsbG8=\nh stale 1 1 1\nr 7 0 -\nx 1 0 0');
    proc.stdout.pipe(input);
    const ch = await AgentChannel.connect({ input, output: proc.stdin, helloIntervalMs: 30, timeoutMs: 5000 });
    agents.push({ proc, ch, stderr: () => '' });
    expect(ch.info.pid).toBe(proc.pid);
    expect((await run(ch, { argv: ['echo', 'ok'] })).stdout).toBe('ok\n');
  });

  it('times out when nobody answers, and honours its signal', async () => {
    const silent = new PassThrough();
    const sink = new PassThrough();
    sink.resume();
    expect(await codeOf(AgentChannel.connect({ input: silent, output: sink, timeoutMs: 150, helloIntervalMs: 20 }))).toBe('timeout');
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    expect(await codeOf(AgentChannel.connect({ input: silent, output: sink, signal: ac.signal }))).toBe('cancelled');
  });

  it('fails pending requests with a retryable sandbox error when the agent dies', async () => {
    const b = await startAgent();
    const closed = new Promise<string>((r) => b.ch.onClose((info) => r(info.reason)));
    const h = await b.ch.exec({ argv: ['sleep', '10'] });
    strayPids.push((h as unknown as { pid: number }).pid); // a SIGKILLed agent cannot take it along
    const pending = b.ch.stat('/');
    b.proc.kill('SIGKILL');
    const err = await h.wait().catch((e: unknown) => e as { code: string; retryable: boolean });
    expect(err).toMatchObject({ code: 'sandbox_failed', retryable: true });
    expect(await closed).toBe('eof');
    expect(await codeOf(pending)).toMatch(/resolved|sandbox_failed/);
    expect(await codeOf(b.ch.stat('/'))).toBe('sandbox_failed');
  });

  it('a new host abandons what the old one left in flight', async () => {
    const proc = spawnAgent();
    const first = await AgentChannel.connect({ input: proc.stdout, output: proc.stdin, helloIntervalMs: 50 });
    const dir = join(work, 'handover');
    mkdirSync(dir);
    async function* never(): AsyncGenerator<Uint8Array> {
      yield Buffer.from('partial');
      await new Promise(() => undefined);
    }
    void first.writeFile(join(dir, 'f'), never()).catch(() => undefined);
    await first.ping();
    expect(readdirSync(dir)).toHaveLength(1); // the temporary file
    first.close();
    const second = await AgentChannel.connect({ input: proc.stdout, output: proc.stdin, helloIntervalMs: 50 });
    agents.push({ proc, ch: second, stderr: () => '' });
    expect(readdirSync(dir)).toEqual([]);
    expect((await run(second, { argv: ['echo', 'second'] })).stdout).toBe('second\n');
  });
});

describe('lifetime', () => {
  it('as a plain process, SIGTERM ends the agent and its commands', async () => {
    const b = await startAgent();
    const h = await b.ch.exec({ argv: ['sleep', '30'] });
    const exited = new Promise<number | null>((r) => b.proc.once('exit', (code) => r(code)));
    b.proc.kill('SIGTERM');
    expect(await exited).toBe(143);
    expect(await codeOf(h.wait())).toBe('sandbox_failed');
  });

  const canPidNs = process.getuid?.() === 0 && spawnSync('unshare', ['--pid', '--fork', '--kill-child', '--mount-proc', 'true']).status === 0;
  it.skipIf(skipReason('agent as PID 1', canPidNs ? undefined : 'needs root and `unshare --pid`'))('as PID 1, reaps orphans, shrugs off SIGTERM and survives host EOF', async () => {
    const b = await startAgent({ argv: ['unshare', '--pid', '--fork', '--kill-child', '--mount-proc', agentBin] });
    try {
      expect(b.ch.info.pid).toBe(1);
      // Orphans (here a background sleep whose parent exits) are reparented to PID 1 and must be reaped.
      await run(b.ch, { argv: ['sh', '-c', 'sleep 0.05 & sleep 0.05 & exit 0'] });
      await new Promise((r) => setTimeout(r, 300));
      const zombies = await run(b.ch, { argv: ['sh', '-c', 'cat /proc/[0-9]*/stat 2>/dev/null | awk \'$3 == "Z"\' | wc -l'] });
      expect(zombies.stdout.trim()).toBe('0');
      expect((await run(b.ch, { argv: ['sh', '-c', 'kill -TERM 1; kill -INT 1; echo sent'] })).stdout).toBe('sent\n');
      await new Promise((r) => setTimeout(r, 100));
      expect(await b.ch.ping()).toBeGreaterThan(0);
      // Host EOF: PID 1 must not exit (that would take the whole sandbox down).
      const children = readFileSync(`/proc/${b.proc.pid}/task/${b.proc.pid}/children`, 'utf8').trim();
      b.ch.close();
      b.proc.stdin.end();
      await new Promise((r) => setTimeout(r, 300));
      expect(existsSync(`/proc/${children}`)).toBe(true);
    } finally {
      stop(b);
    }
  });
});

describe('device mode (--device, as under QEMU)', () => {
  // A stand-in for a virtio-serial port: a pty whose path (a symlink) appears late and is swapped for a
  // new pty on SIGUSR1, relayed to our stdio. The agent must find it, and find it again after the loss.
  const BRIDGE = `
import os, pty, select, signal, sys, time
link, agent = sys.argv[1], sys.argv[2]
state = {'m': None}
def fresh():
    if state['m'] is not None:
        os.close(state['m'])
    m, s = pty.openpty()
    name = os.ttyname(s)
    os.close(s)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(name, link)
    state['m'] = m
swap = {'due': False}
signal.signal(signal.SIGUSR1, lambda *_: swap.update(due=True))
# In device mode the agent never exits by itself: make it die with this bridge (PR_SET_PDEATHSIG).
import ctypes, subprocess
libc = ctypes.CDLL(None)
proc = subprocess.Popen([agent, '--device', link], preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))
time.sleep(0.3)
fresh()
while proc.poll() is None:
    if swap['due']:
        swap['due'] = False
        fresh()
    try:
        r, _, _ = select.select([0, state['m']], [], [], 0.05)
    except InterruptedError:
        continue
    if 0 in r:
        d = os.read(0, 65536)
        if not d:
            break
        os.write(state['m'], d)
    if state['m'] in r:
        try:
            os.write(1, os.read(state['m'], 65536))
        except OSError:
            pass
proc.kill()
`;
  const hasPython = spawnSync('python3', ['-c', 'import pty']).status === 0;

  it.skipIf(skipReason('agent device mode', hasPython ? undefined : 'needs python3 (pty)'))('waits for the device to appear and reopens it after a loss', async () => {
    const link = join(work, 'vport');
    const b = await startAgent({ argv: ['python3', '-c', BRIDGE, link, agentBin], helloIntervalMs: 50 });
    try {
      expect((await run(b.ch, { argv: ['echo', 'over the port'] })).stdout).toBe('over the port\n');
      b.ch.close();
      b.proc.kill('SIGUSR1'); // the host side goes away and comes back as a new port
      const again = await AgentChannel.connect({ input: b.proc.stdout, output: b.proc.stdin, helloIntervalMs: 50, timeoutMs: 5000 });
      agents.push({ ...b, ch: again });
      expect((await run(again, { argv: ['echo', 'after reconnect'] })).stdout).toBe('after reconnect\n');
    } finally {
      stop(b);
    }
  });
});

describe('identity', () => {
  const canIsolate = process.getuid?.() === 0 && spawnSync('unshare', ['--mount', '--uts', 'true']).status === 0;

  it.skipIf(skipReason('agent identity', canIsolate ? undefined : 'needs root and `unshare --mount --uts`'))('sets hostname, machine-id and the resume signal', async () => {
    // Private UTS and mount namespaces with /etc overlaid and /run on tmpfs, so the host is untouched.
    const ov = join(work, 'overlay');
    mkdirSync(join(ov, 'upper'), { recursive: true });
    mkdirSync(join(ov, 'work'), { recursive: true });
    const setup = [
      `mount -t overlay overlay -o lowerdir=/etc,upperdir=${ov}/upper,workdir=${ov}/work /etc`,
      'mount -t tmpfs tmpfs /run',
      `exec ${agentBin}`,
    ].join(' && ');
    const b = await startAgent({ argv: ['unshare', '--mount', '--uts', '--propagation', 'private', 'sh', '-c', setup] });
    try {
      const listener = await b.ch.exec({ argv: ['sh', '-c', 'mkdir -p /run/berth; trap "echo got-usr2; exit 0" USR2; echo $$ > /run/berth/resume.pids; echo ready; while :; do sleep 0.05; done'] });
      const events = listener[Symbol.asyncIterator]();
      expect((await events.next()).value).toMatchObject({ type: 'stdout' });
      const machineId = 'a'.repeat(32);
      await b.ch.identity({ hostname: 'berth-test-host', machineId, generation: 7, reason: 'fork' }, randomBytes(32));
      expect((await run(b.ch, { argv: ['hostname'] })).stdout).toBe('berth-test-host\n');
      expect((await readAll(b.ch, '/etc/machine-id')).toString()).toBe(`${machineId}\n`);
      const resume = JSON.parse((await readAll(b.ch, '/run/berth/resume')).toString()) as unknown;
      expect(resume).toEqual({ generation: 7, reason: 'fork', hostname: 'berth-test-host', machineId });
      const rest: string[] = [];
      for (let ev = await events.next(); !ev.done; ev = await events.next()) {
        if (ev.value.type === 'stdout') rest.push(Buffer.from(ev.value.data).toString());
      }
      expect(rest.join('')).toContain('got-usr2');
      expect(await codeOf(b.ch.identity({ hostname: 'bad host', machineId, generation: 1, reason: 'wake' }, Buffer.alloc(0)))).toBe('invalid_argument');
    } finally {
      stop(b);
    }
    expect(hostname()).not.toBe('berth-test-host');
  });
});
