/**
 * Help, usage and shell completion, as users meet them: the compiled CLI run as a child, and the completion
 * scripts loaded into real interactive bash, zsh and fish inside tmux, completing against a real server
 * (real engine, in-memory driver).
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../server/app.js';
import { startServer, type RunningServer } from '../server/serve.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';
import { hasCommand, skipReason } from '../../test/helpers/env.js';
import { SPEC, VERB_NAMES, type VerbSpec } from './commands.js';
import { SHELLS } from './completion.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const MAIN = join(REPO, 'dist', 'src', 'cli', 'main.js');
let server: RunningServer;
let t: TestEngine;
let dir = '';
let sessionId = '';

beforeAll(async () => {
  // dist/ is compiled once, by test/global-setup.ts, before any test file runs.
  expect(existsSync(MAIN), 'tsc did not emit the CLI').toBe(true);
  t = await createTestEngine();
  server = await startServer({ app: createApp({ engine: t.engine }), host: '127.0.0.1', port: 0, graceMs: 200 });
  dir = mkdtempSync(join(tmpdir(), 'berth-help-'));
  // `berth` on PATH, as an installed CLI is: the completion scripts call it to list ids.
  writeFileSync(join(dir, 'berth'), `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(MAIN)} "$@"\n`);
  chmodSync(join(dir, 'berth'), 0o755);
  const r = await berth(['session', 'create', '--json']);
  sessionId = JSON.parse(r.stdout).id;
}, 400_000);
afterAll(async () => {
  await server?.close();
  await t?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function berth(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [MAIN, ...args], { env: { ...process.env, BERTH_URL: server.url, BERTH_TOKEN: t.rootKey }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d));
  child.stderr.on('data', (d: Buffer) => (stderr += d));
  return new Promise((done) => child.on('close', (code) => done({ code, stdout, stderr })));
}

describe('help', () => {
  it('every verb: `berth VERB --help`, `-h` and `berth help VERB` print its usage and every flag, exit 0', async () => {
    for (const verb of VERB_NAMES) {
      const spec: VerbSpec = SPEC[verb];
      for (const args of [[verb, '--help'], ['help', verb], [verb, '-h']]) {
        const r = await berth(args);
        expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
        expect(r.stdout).toContain(`usage: berth ${verb}`);
        expect(r.stdout).toContain(spec.summary);
        for (const c of Object.values(spec.commands)) for (const f of Object.keys(c.flags)) expect(r.stdout, `${verb} --${f}`).toContain(`--${f}`);
        expect(r.stderr).toBe('');
      }
    }
  }, 120_000);
  it('a subcommand’s --help wins over its missing arguments; after `--` it is the command’s', async () => {
    expect((await berth(['session', 'create', '--help'])).code).toBe(0);
    expect((await berth(['files', 'write', '--help'])).code).toBe(0);
    const r = await berth(['exec', sessionId, '--', 'echo', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('--help\n');
  });
  it('`berth help` and `berth --help` list every verb and the exit codes; an unknown verb to help exits 2', async () => {
    for (const args of [['help'], ['--help'], ['-h']]) {
      const r = await berth(args);
      expect(r.code).toBe(0);
      for (const v of VERB_NAMES) expect(r.stdout).toMatch(new RegExp(`^  ${v} `, 'm'));
      expect(r.stdout).toMatch(/^  124 /m);
    }
    const bad = await berth(['help', 'sesion']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('did you mean session?');
  });
});

describe('completion scripts', () => {
  it('name every verb, subcommand and flag of the table (they are generated from it), and parse', async () => {
    for (const shell of SHELLS) {
      const r = await berth(['completion', shell]);
      expect(r.code).toBe(0);
      for (const v of VERB_NAMES) {
        expect(r.stdout, `${shell}: ${v}`).toContain(v);
        for (const [sub, c] of Object.entries((SPEC[v] as VerbSpec).commands)) {
          if (sub) expect(r.stdout, `${shell}: ${v} ${sub}`).toContain(sub);
          for (const f of Object.keys(c.flags)) expect(r.stdout, `${shell}: ${v} --${f}`).toMatch(shell === 'fish' ? new RegExp(`-l ${f}\\b`) : new RegExp(`--${f}\\b`));
        }
      }
      const bin = shell === 'zsh' ? 'zsh' : shell;
      if (hasCommand(bin, shell === 'fish' ? ['--version'] : ['-c', 'true'])) {
        const file = join(dir, `completion.${shell}`);
        writeFileSync(file, r.stdout);
        const check = spawnSync(bin, [shell === 'fish' ? '--no-execute' : '-n', file], { encoding: 'utf8' });
        expect(check.status, `${shell}: ${check.stderr}`).toBe(0);
      }
    }
    const bad = await berth(['completion', 'tcsh']);
    expect(bad.code).toBe(2);
  });

  const tmuxMissing = hasCommand('tmux', ['-V']) ? undefined : 'tmux is not installed';
  for (const shell of SHELLS) {
    const missing = tmuxMissing ?? (hasCommand(shell, ['-c', 'true']) ? undefined : `${shell} is not installed (apt-get install ${shell})`);
    it.skipIf(skipReason(`completion in interactive ${shell}`, missing))(`completes verbs, subcommands, flags, choices and session ids in interactive ${shell} (tmux)`, async () => {
      const socket = `berth-help-${process.pid}-${shell}`;
      const tmux = (...a: string[]) => spawnSync('tmux', ['-L', socket, ...a], { encoding: 'utf8' });
      const env = [`HOME=${dir}`, `PATH=${dir}:/usr/bin:/bin`, `BERTH_URL=${server.url}`, `BERTH_TOKEN=${t.rootKey}`, 'TERM=xterm', 'PS1=$ '];
      const cmd = { bash: 'bash --norc --noprofile -i', zsh: 'zsh -f -i', fish: 'fish --no-config -i' }[shell];
      const load = {
        bash: 'source <(berth completion bash)',
        zsh: "PROMPT='$ '; autoload -U compinit && compinit -u && source <(berth completion zsh)",
        fish: "function fish_prompt; echo '$ '; end; berth completion fish | source",
      }[shell];
      expect(tmux('new-session', '-d', '-s', 't', '-x', '200', '-y', '50', `env -i ${env.map((e) => `'${e}'`).join(' ')} ${cmd}`).status).toBe(0);
      try {
        const screen = () => tmux('capture-pane', '-p', '-t', 't').stdout;
        const lastLine = () => screen().trimEnd().split('\n').at(-1) ?? '';
        const until = async (pred: (s: string) => boolean, what: string) => {
          const end = Date.now() + 15_000;
          while (Date.now() < end) {
            if (pred(lastLine())) return;
            await new Promise((r) => setTimeout(r, 100));
          }
          throw new Error(`${shell}: waited for ${what}; screen:\n${screen()}`);
        };
        tmux('send-keys', '-t', 't', '-l', load);
        tmux('send-keys', '-t', 't', 'Enter');
        // The marker is computed, so its echo (the typed line) does not count as the answer.
        tmux('send-keys', '-t', 't', '-l', shell === 'fish' ? 'echo loaded-(math 6 \\* 7)' : 'echo loaded-$((6*7))');
        tmux('send-keys', '-t', 't', 'Enter');
        await until(() => screen().includes('loaded-42'), 'the script to load');
        const complete = async (typed: string, expected: string) => {
          tmux('send-keys', '-t', 't', 'C-u');
          tmux('send-keys', '-t', 't', '-l', typed);
          await until((l) => l.endsWith(typed), `"${typed}" echoed`);
          tmux('send-keys', '-t', 't', 'Tab');
          await until((l) => l.trimEnd().endsWith(expected), `"${typed}" + Tab → "${expected}"`);
        };
        await complete('berth sess', 'berth session');
        await complete('berth session cr', 'berth session create');
        await complete('berth session create --memo', 'berth session create --memory');
        await complete('berth session create --backend qe', 'berth session create --backend qemu');
        await complete('berth exec se', `berth exec ${sessionId}`);
        await complete('berth completion fi', 'berth completion fish');
        tmux('send-keys', '-t', 't', 'C-u');
      } finally {
        tmux('kill-server');
      }
    }, 90_000);
  }
});
