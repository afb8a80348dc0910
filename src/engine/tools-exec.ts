/**
 * The executors behind the tools: what runs once the gate allowed a call. They reach the sandbox only through
 * SandboxAccess (implemented by SessionManager; never a driver directly) and run exactly the arguments the
 * gate checked. Each returns the raw output for the result stage to validate, or `outputError` when there is
 * no usable output (truncated, not JSON, a command tool that failed); checkResult() turns that into a refusal.
 */
import type { ExecHandle, ExecRequest } from '../core/index.js';
import { parseCommandOutput, type ToolDefinition } from '../policy/index.js';
import { HeadTail, streamFields } from './exec-output.js';
import type { ExecContext, ExecOutcome } from './executor.js';
import { HOME } from './gate-state.js';
import { runComputer } from './tools-computer.js';
import { decodeUtf8, httpRequest } from './tools-http.js';

const enc = new TextEncoder();

async function* once(data: Uint8Array): AsyncIterable<Uint8Array> {
  yield data;
}

interface Captured {
  stdout: Uint8Array;
  stderr: Uint8Array;
  truncated: boolean;
}

/** Drains a command's output, keeping up to `cap` bytes of each stream; past that the command is killed. */
async function capture(handle: ExecHandle, cap: number): Promise<Captured> {
  const out: Uint8Array[] = [];
  const err: Uint8Array[] = [];
  let nOut = 0;
  let nErr = 0;
  let truncated = false;
  for await (const ev of handle) {
    if (ev.type === 'exit') break;
    const isOut = ev.type === 'stdout';
    const n = (isOut ? nOut : nErr) + ev.data.byteLength;
    if (n > cap) {
      if (!truncated) {
        truncated = true;
        await handle.kill().catch(() => undefined);
      }
      continue;
    }
    (isOut ? out : err).push(ev.data);
    if (isOut) nOut = n;
    else nErr = n;
  }
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), truncated };
}

const text = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8');

function tail(s: string, n = 500): string {
  const t = s.trim();
  return t.length > n ? `…${t.slice(-n)}` : t;
}

/** Runs an allowed call. Throws only for failures of the machinery (the caller records them as failed calls). */
export async function runTool(tool: ToolDefinition, args: Record<string, unknown>, ctx: ExecContext): Promise<ExecOutcome> {
  const ex = tool.executor;
  if (ex.kind === 'command') return runCommandTool(tool, ex.argv, ex.timeoutMs, args, ctx);
  const { sandboxes: sb, sessionId: id, limits, signal } = ctx;
  const opts = signal ? { signal } : {};
  // The first sandbox operation carries the guard: the paths it checks are those the call was decided on.
  const first = ctx.guard ? { ...opts, guard: ctx.guard } : opts;
  switch (ex.name) {
    case 'shell.exec': {
      const req: ExecRequest = {
        argv: ['/bin/sh', '-c', args.command as string],
        cwd: (args.cwd as string | undefined) ?? HOME,
        timeoutMs: (args.timeoutMs as number | undefined) ?? limits.defaultTimeoutMs,
        stdin: false,
      };
      if (args.env) req.env = args.env as Record<string, string>;
      const handle = await sb.exec(id, req, first);
      // Past the cap the command runs on: its first and last parts are kept, the middle only counted.
      const head = Math.floor(limits.outputCapBytes / 2);
      const streams = { stdout: new HeadTail(head, limits.outputCapBytes - head), stderr: new HeadTail(head, limits.outputCapBytes - head) };
      for await (const ev of handle) {
        if (ev.type === 'exit') break;
        streams[ev.type].push(ev.data);
      }
      const exit = await handle.wait();
      const truncated = streams.stdout.omitted > 0 || streams.stderr.omitted > 0;
      return {
        output: { exitCode: exit.code, timedOut: exit.timedOut, truncated, ...streamFields('stdout', streams.stdout), ...streamFields('stderr', streams.stderr) },
      };
    }
    case 'fs.read': {
      const path = args.path as string;
      const st = await sb.stat(id, path, first);
      if (st.type === 'dir') return { outputError: `${path} is a directory; use fs.list` };
      if (st.size > limits.outputCapBytes) {
        return { outputError: `output was truncated: ${path} is ${st.size} bytes, more than the ${limits.outputCapBytes}-byte read limit; read it in parts with shell.exec` };
      }
      const chunks: Uint8Array[] = [];
      let n = 0;
      for await (const chunk of await sb.readFile(id, path, opts)) {
        n += chunk.byteLength;
        if (n > limits.outputCapBytes) return { outputError: `output was truncated: ${path} grew past the ${limits.outputCapBytes}-byte read limit while it was read` };
        chunks.push(chunk);
      }
      const bytes = Buffer.concat(chunks);
      const s = decodeUtf8(bytes);
      return { output: { path, size: bytes.byteLength, truncated: false, ...(s === null ? { contentBase64: bytes.toString('base64') } : { content: s }) } };
    }
    case 'fs.write': {
      const path = args.path as string;
      const data = typeof args.content === 'string' ? enc.encode(args.content) : new Uint8Array(Buffer.from(args.contentBase64 as string, 'base64'));
      const n = await sb.writeFile(id, path, once(data), first);
      return { output: { path, bytesWritten: n } };
    }
    case 'fs.list': {
      const path = args.path as string;
      const entries = await sb.listFiles(id, path, first);
      if (entries.length > limits.listCap) return { outputError: `output was truncated: ${path} has more than ${limits.listCap} entries; list it with shell.exec` };
      return {
        output: { path, truncated: false, entries: entries.map((e) => ({ name: e.name, type: e.type, size: e.size, mode: e.mode, mtimeMs: e.mtimeMs })) },
      };
    }
    case 'computer':
      if (!ctx.screen) return { outputError: 'this session has no desktop' };
      return runComputer(args, ctx, { screen: ctx.screen, ...(ctx.keepScreenshot ? { keep: ctx.keepScreenshot } : {}) });
    case 'http.request':
      return httpRequest(args, {
        allow: ctx.httpAllow,
        cidrs: ctx.egressAllowCidr ?? [],
        sessionId: ctx.sessionId,
        timeoutMs: limits.httpTimeoutMs,
        maxBytes: limits.httpMaxBytes,
        ...(ctx.resolve ? { resolve: ctx.resolve } : {}),
        ...opts,
      });
  }
}

/** An operator tool: argv inside the sandbox, the arguments as JSON on stdin, the result as JSON on stdout. */
async function runCommandTool(
  tool: ToolDefinition,
  argv: readonly string[],
  timeoutMs: number | undefined,
  args: Record<string, unknown>,
  ctx: ExecContext,
): Promise<ExecOutcome> {
  const limit = timeoutMs ?? ctx.limits.defaultTimeoutMs;
  const handle = await ctx.sandboxes.exec(ctx.sessionId, { argv: [...argv], cwd: HOME, timeoutMs: limit, stdin: true }, { ...(ctx.signal ? { signal: ctx.signal } : {}), ...(ctx.guard ? { guard: ctx.guard } : {}) });
  const captured = capture(handle, ctx.limits.outputCapBytes);
  try {
    await handle.writeStdin(enc.encode(JSON.stringify(args)));
    await handle.closeStdin();
  } catch {
    // The command may exit without reading its stdin; its exit and output decide.
  }
  const c = await captured;
  const exit = await handle.wait();
  if (exit.timedOut) return { outputError: `${tool.name} did not finish within ${limit} ms and was stopped` };
  if (exit.code !== 0) {
    const why = tail(text(c.stderr));
    return { outputError: `${tool.name} exited with code ${exit.code}${why ? `: ${why}` : ''}` };
  }
  const parsed = parseCommandOutput(text(c.stdout), { truncated: c.truncated });
  return parsed.ok ? { output: parsed.value } : { outputError: parsed.error };
}
