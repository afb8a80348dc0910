/**
 * The berth-agent harness shared by the agent's tests: the agent built from source (src/drivers/agent/c/)
 * and run as a plain child process on the host, connected to an AgentChannel by pipes.
 */
import { execFileSync, spawn, type ChildProcessByStdio } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import type { ExecExit, ExecHandle, ExecRequest } from '../../src/core/sandbox.js';
import { AgentChannel } from '../../src/drivers/agent/channel.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');

export let work: string;
export let agentBin: string;
/** Every agent started, stopped after the file. */
export const agents: Agent[] = [];
/** Pids a test left behind on purpose; killed after the file. */
export const strayPids: number[] = [];

export interface Agent {
  proc: ChildProcessByStdio<Writable, Readable, Readable>;
  ch: AgentChannel;
  stderr: () => string;
}

export function spawnAgent(argv: string[] = []): Agent['proc'] {
  const [cmd, ...args] = argv.length ? argv : [agentBin];
  return spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe'] });
}

export async function startAgent(opts: { argv?: string[]; input?: (p: Agent['proc']) => Readable; helloIntervalMs?: number } = {}): Promise<Agent> {
  const proc = spawnAgent(opts.argv);
  let err = '';
  proc.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const ch = await AgentChannel.connect({
    input: opts.input ? opts.input(proc) : proc.stdout,
    output: proc.stdin,
    helloIntervalMs: opts.helloIntervalMs ?? 50,
    timeoutMs: 5000,
  });
  const a = { proc, ch, stderr: () => err };
  agents.push(a);
  return a;
}

export function stop(a: Agent): void {
  a.ch.close();
  a.proc.stdin.end();
  a.proc.kill('SIGKILL');
}

export interface RunResult extends ExecExit {
  stdout: string;
  stderr: string;
}

export async function collect(h: ExecHandle): Promise<RunResult> {
  let stdout = '';
  let stderr = '';
  for await (const ev of h) {
    if (ev.type === 'stdout') stdout += Buffer.from(ev.data).toString();
    else if (ev.type === 'stderr') stderr += Buffer.from(ev.data).toString();
  }
  return { ...(await h.wait()), stdout, stderr };
}

export async function run(ch: AgentChannel, req: ExecRequest): Promise<RunResult> {
  return collect(await ch.exec(req));
}

export async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'resolved';
  } catch (e) {
    return (e as { code?: string }).code ?? 'no code';
  }
}

export async function* chunksOf(data: Buffer, size: number): AsyncGenerator<Uint8Array> {
  for (let off = 0; off < data.length; off += size) yield data.subarray(off, off + size);
}

export async function readAll(ch: AgentChannel, path: string): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of await ch.readFile(path)) parts.push(Buffer.from(c));
  return Buffer.concat(parts);
}

export const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** Builds the agent from source into a fresh directory before the file's tests and stops every agent after. */
export function useAgentHarness(): void {
  beforeAll(() => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'berth-agent-test-')));
    agentBin = join(work, 'bin', 'berth-agent');
    execFileSync(process.execPath, [join(ROOT, 'scripts/build-agent.mjs'), '--out', agentBin, '--force'], { stdio: 'pipe' });
  }, 60_000);

  afterAll(() => {
    for (const a of agents) stop(a);
    for (const pid of strayPids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(work, { recursive: true, force: true });
  });
}
