/**
 * The WebSocket side of terminals (issue 9 §2): `GET /v1/sessions/:id/terminals` with Upgrade creates a
 * terminal and attaches; `…/terminals/:termId` attaches. Binary frames are bytes (typed up, shown down);
 * text frames are JSON control (protocol/terminals.ts). @hono/node-server leaves upgrades to the HTTP
 * server's `upgrade` event, which serve.ts hands here; everything else (auth, who may type) is the engine's.
 *
 * Errors before the upgrade are ordinary HTTP error responses ({error:{code,message}}: 401, 404, 400…);
 * errors after it are `error` text frames (a watcher's input: code forbidden, reason not_controller, or
 * control_lease_held while someone else holds the session's control lease).
 */
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { AppError, InvalidArgumentError, NotFoundError, isAppError, isId, type Principal } from '../core/index.js';
import type { Engine, TerminalClient } from '../engine/api.js';
import {
  TERMINAL_CLOSE,
  TerminalAttachQuerySchema,
  TerminalClientMessageSchema,
  TerminalCreateQuerySchema,
  parseInput,
  type TerminalServerMessage,
} from '../protocol/index.js';
import type { Logger } from './log.js';
import { refuseUpgrade, type UpgradeHandler } from './serve.js';
import { upgradeCaller } from './ws-auth.js';

const PATH_RE = /^\/v1\/sessions\/([^/]+)\/terminals(?:\/([^/]+))?\/?$/;

/** Bytes one binary frame may carry up (a paste); larger frames close the socket (1009). */
const MAX_FRAME = 1 << 20;

export function terminalUpgrade(o: { engine: Engine; log: Logger }): UpgradeHandler {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME });
  return (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const m = PATH_RE.exec(url.pathname);
    if (!m) return false;
    void (async () => {
      const sessionId = decodeURIComponent(m[1]!);
      const termId = m[2] === undefined ? null : decodeURIComponent(m[2]);
      if (!isId('session', sessionId)) throw new NotFoundError('session', sessionId);
      if (termId !== null && !isId('terminal', termId)) throw new NotFoundError('terminal', termId);
      const query = queryObject(url);
      // Tickets are for attaching to an existing terminal (creating one needs the bearer token).
      const { principal: p, via } = await upgradeCaller(o.engine, req, {
        ticket: typeof query.ticket === 'string' ? query.ticket : undefined,
        ...(termId ? { redeem: (t: string) => o.engine.terminals.redeem(t, sessionId, termId) } : {}),
        ticketRoute: 'POST …/terminals/:termId/tickets',
      });
      let tid: string;
      let mode: 'control' | 'watch' | undefined;
      if (termId === null) {
        const q = parseInput(TerminalCreateQuerySchema, query, 'query');
        const env: Record<string, string> = {};
        for (const kv of q.env ?? []) env[kv.slice(0, kv.indexOf('='))] = kv.slice(kv.indexOf('=') + 1);
        const t = await o.engine.terminals.open(p, sessionId, { cols: q.cols ?? 80, rows: q.rows ?? 24, ...(q.cwd ? { cwd: q.cwd } : {}), env, ...(q.command ? { argv: q.command } : {}) });
        tid = t.execId;
        mode = q.mode;
      } else {
        const q = parseInput(TerminalAttachQuerySchema, query, 'query');
        await o.engine.terminals.get(p, sessionId, termId);
        tid = termId;
        mode = q.mode;
      }
      wss.handleUpgrade(req, socket, head, (ws) => void serve(o, ws, p, via, sessionId, tid, mode));
    })().catch((e: unknown) => refuse(socket, e, o.log));
    return true;
  };
}

/** Array-valued for repeated keys (env), else the string. */
function queryObject(url: URL): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const k of new Set(url.searchParams.keys())) {
    const all = url.searchParams.getAll(k);
    out[k] = k === 'env' ? all : all[all.length - 1]!;
  }
  return out;
}

function refuse(socket: Duplex, e: unknown, log: Logger): void {
  const err = isAppError(e) ? e : new AppError('internal', 'terminal upgrade failed');
  if (!isAppError(e)) log.error('terminal upgrade failed', { message: (e as Error).message });
  refuseUpgrade(socket, err);
}

async function serve(o: { engine: Engine; log: Logger }, ws: WebSocket, p: Principal, via: string | null, sessionId: string, termId: string, mode?: 'control' | 'watch'): Promise<void> {
  const send = (msg: TerminalServerMessage) => ws.readyState === ws.OPEN && ws.send(JSON.stringify(msg));
  const sendError = (e: unknown) => {
    const err = isAppError(e) ? e : new AppError('internal', (e as Error).message);
    send({ type: 'error', error: { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) } });
  };
  let client: TerminalClient | null = null;
  // Frames that arrive before the attach resolves are handled in order once it has.
  const early: Array<[RawData, boolean]> = [];
  const onMessage = (data: RawData, binary: boolean): void => {
    if (!client) return void early.push([data, binary]);
    const c = client;
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    if (binary) {
      c.write(bytes).catch(sendError);
      return;
    }
    let msg;
    try {
      msg = parseInput(TerminalClientMessageSchema, JSON.parse(bytes.toString('utf8')), 'body');
    } catch (e) {
      return sendError(isAppError(e) ? e : new InvalidArgumentError('message: malformed JSON'));
    }
    if (msg.type === 'resize') c.resize(msg.cols, msg.rows).catch(sendError);
    else {
      c.takeControl().then(
        (ok) => ok || sendError(new AppError('conflict', 'another client holds input', { details: { reason: 'controller_present' } })),
        sendError, // control_lease_held: the engine's refusal, passed on
      );
    }
  };
  ws.on('message', onMessage);
  ws.on('close', () => client?.detach());
  ws.on('error', () => client?.detach());
  try {
    client = await o.engine.terminals.attach(p, sessionId, termId, {
      data: (b) => ws.readyState === ws.OPEN && ws.send(b, { binary: true }),
      control: (msg) => send(msg),
      closed: ({ reason }) => {
        const code = reason === 'exit' ? TERMINAL_CLOSE.exit : reason === 'detached' ? TERMINAL_CLOSE.detached : TERMINAL_CLOSE.closed;
        ws.close(code, reason);
      },
    }, { want: mode ?? 'control', via });
  } catch (e) {
    sendError(e);
    ws.close(1011, 'attach failed');
    return;
  }
  if (ws.readyState !== ws.OPEN) client.detach();
  for (const [d, b] of early.splice(0)) onMessage(d, b);
}
