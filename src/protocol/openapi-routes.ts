/**
 * Every HTTP route, described once with the zod schemas that validate its input and its answer. The
 * OpenAPI document (openapi.ts) is generated from this table; test/openapi.test.ts fails when the server's
 * routing table and this one disagree, and validates real responses against the document.
 *
 * To add a route: one entry here, with `query` / `body` the very schemas the route parses with, and the
 * view schema (view-schemas.ts) of each success status. Errors are documented for every route at once.
 */
import * as z from 'zod';
import * as C from './console.js';
import * as G from './gate.js';
import * as P from './processes.js';
import * as Q from './quotas.js';
import * as S from './schemas.js';
import * as T from './templates.js';
import * as V from './view-schemas.js';
import * as TM from './terminals.js';
import * as PL from './port-links.js';
import * as VNC from './vnc.js';
import * as DSK from './desktop.js';

export type Method = 'get' | 'post' | 'put' | 'delete';

/** A request or response body: JSON with a schema, raw bytes, an NDJSON stream of lines, or Cedar text. */
export type Body =
  | { kind: 'json'; schema: z.ZodType; description?: string }
  /** Raw bytes; mediaType defaults to application/octet-stream. */
  | { kind: 'bytes'; description: string; mediaType?: string }
  | { kind: 'ndjson'; line: z.ZodType; description: string }
  | { kind: 'cedar'; schema: z.ZodType; description: string }
  /** One status, several media types (the request chooses: exec streams NDJSON, or answers JSON with background). */
  | { kind: 'either'; bodies: Exclude<Body, { kind: 'either' }>[]; description: string };

export interface RouteDoc {
  method: Method;
  /** Hono's form: /v1/sessions/:id. */
  path: string;
  summary: string;
  description?: string;
  tag: string;
  /** Who may call: everything under /v1 needs a bearer token; `agent` routes accept a session's agent token. */
  auth: 'none' | 'operator' | 'agent';
  query?: z.ZodObject;
  body?: Body;
  /** Takes an `Idempotency-Key` header (issue 7 §11; documented in openapi.ts). */
  idempotent?: true;
  /** Success statuses → body. Error statuses are added for every route (ErrorBody). */
  responses: Record<number, Body | { kind: 'none'; description: string }>;
}

/**
 * Bodies the gate checks by hand (src/policy: tools.ts, plan.ts; the MCP SDK for JSON-RPC), not through
 * a zod schema: documented as JSON objects in prose rather than by a second copy of those rules.
 */
const ToolDefinitionBody = z.record(z.string(), z.unknown()).describe('{name, description, inputSchema, outputSchema, risk: read|write|irreversible, executor: {kind: "command", argv}, pathArgs?, opaqueArgs?}');
const PlanBody = z.record(z.string(), z.unknown()).describe('{objective, steps: [{id, tool, arguments (a JSON Schema the call\'s arguments must match), repeatable?}]}');
const McpMessage = z.record(z.string(), z.unknown()).describe('a JSON-RPC 2.0 message of the MCP protocol');

const RECOVERED = 'recovered: the first request with this Idempotency-Key was cut off by a server restart; this is what it created, as it is now (Idempotency-Recovered: true)';
/** A fork recovered after a restart: its sessions without agent tokens (they are not kept). */
const RecoveredForkSchema = z.strictObject({ sessions: z.array(V.SessionViewSchema) });
const json = (schema: z.ZodType, description?: string): Extract<Body, { kind: 'json' }> => ({ kind: 'json', schema, ...(description ? { description } : {}) });
const lifecycle = (verb: string, summary: string): RouteDoc => ({
  method: 'post',
  path: `/v1/sessions/:id/${verb}`,
  summary,
  tag: 'sessions',
  auth: 'operator',
  body: json(S.EmptyBodySchema, 'no body, or {}'),
  responses: { 200: json(V.SessionViewSchema) },
});

export const ROUTES: RouteDoc[] = [
  {
    method: 'get',
    path: '/healthz',
    summary: 'Health and startup progress',
    description: 'No token needed. 503 with `ok: false` when no backend is available, and with `starting` while the server is starting (every /v1 route then answers 503 `unavailable` carrying the same progress in `details.starting`).',
    tag: 'server',
    auth: 'none',
    responses: { 200: json(V.HealthViewSchema), 503: json(V.HealthViewSchema, 'not ready: starting, or no backend available') },
  },
  {
    method: 'get',
    path: '/openapi.json',
    summary: 'This document',
    tag: 'server',
    auth: 'none',
    responses: { 200: { kind: 'none', description: 'the OpenAPI 3.1 document' } },
  },
  // ---- sessions ----
  {
    method: 'post',
    path: '/v1/sessions',
    summary: 'Create a session (resolves once its machine runs)',
    tag: 'sessions',
    auth: 'operator',
    body: json(S.CreateSessionBodySchema),
    idempotent: true,
    responses: { 201: json(V.CreatedSessionViewSchema, 'the session, with its agent token (shown once)'), 200: json(V.SessionViewSchema, RECOVERED) },
  },
  {
    method: 'get',
    path: '/v1/sessions',
    summary: 'List sessions, oldest first; filter by state and metadata, page with limit and after',
    tag: 'sessions',
    auth: 'operator',
    query: S.ListSessionsQuerySchema,
    responses: { 200: json(V.SessionListViewSchema) },
  },
  { method: 'get', path: '/v1/sessions/:id', summary: 'Show a session', tag: 'sessions', auth: 'operator', responses: { 200: json(V.SessionViewSchema) } },
  { method: 'delete', path: '/v1/sessions/:id', summary: 'Terminate a session (its machine is wiped)', tag: 'sessions', auth: 'operator', responses: { 200: json(V.TerminatedViewSchema) } },
  lifecycle('pause', 'Freeze every process (memory kept)'),
  lifecycle('resume', 'Unfreeze a paused session'),
  lifecycle('hibernate', 'Checkpoint to the snapshot store and release RAM and CPU'),
  lifecycle('wake', 'Restore a hibernated session'),
  // ---- exec ----
  {
    method: 'post',
    path: '/v1/sessions/:id/exec',
    summary: 'Run a command; the answer streams its events (or, with background, is its execId at once)',
    description: 'The response is NDJSON (one JSON object per line): `started`, then `stdout`/`stderr` chunks (base64) as they happen, `ping` after 15 s without output, and finally `exit` or `error`. Closing the connection before `exit` kills the command. Errors found before the command starts are ordinary error responses. With `background: true` the answer is JSON `{execId, pid}` at once and the command runs on by itself; its output is kept in the sandbox (GET …/processes/:execId/output).',
    tag: 'exec',
    auth: 'operator',
    body: json(S.ExecBodySchema),
    responses: {
      200: {
        kind: 'either',
        description: 'the exec event stream (each line is one ExecStreamLine), or with background the started process',
        bodies: [
          { kind: 'ndjson', line: V.ExecStreamLineSchema, description: 'the exec event stream' },
          json(V.BackgroundExecViewSchema, 'background: the process, started'),
        ],
      },
    },
  },
  {
    method: 'post',
    path: '/v1/sessions/:id/execs/:execId/stdin',
    summary: "Append the raw body to a command's stdin (close=true closes it after)",
    tag: 'exec',
    auth: 'operator',
    query: S.StdinQuerySchema,
    body: { kind: 'bytes', description: 'bytes for stdin, streamed' },
    responses: { 200: json(V.StdinViewSchema) },
  },
  {
    method: 'post',
    path: '/v1/sessions/:id/execs/:execId/kill',
    summary: "Signal a command's process group (default SIGKILL)",
    tag: 'exec',
    auth: 'operator',
    body: json(S.KillBodySchema),
    responses: { 200: json(V.KillViewSchema) },
  },
  // ---- background processes ----
  { method: 'get', path: '/v1/sessions/:id/processes', summary: 'Background processes of the session, running and ended', tag: 'processes', auth: 'operator', responses: { 200: json(V.ProcessListViewSchema) } },
  { method: 'get', path: '/v1/sessions/:id/processes/:execId', summary: 'One background process', tag: 'processes', auth: 'operator', responses: { 200: json(V.ProcessViewSchema) } },
  {
    method: 'get',
    path: '/v1/sessions/:id/processes/:execId/output',
    summary: 'Replay (and with follow, stream) what a background process wrote',
    description: 'NDJSON: `stdout`/`stderr` lines (base64) with their stream offset and the `cursor` to resume from (`?offset=<cursor>` misses and repeats nothing), `ping` when quiet, and finally `exit` once the command has ended or, without follow, `end` (it still runs). Closing the connection stops only this reader.',
    tag: 'processes',
    auth: 'operator',
    query: P.ProcessOutputQuerySchema,
    responses: { 200: { kind: 'ndjson', line: V.ProcessOutputLineSchema, description: 'the output stream (each line is one ProcessOutputLine)' } },
  },
  {
    method: 'post',
    path: '/v1/sessions/:id/processes/:execId/kill',
    summary: "Signal a background process's group (default SIGTERM)",
    tag: 'processes',
    auth: 'operator',
    body: json(S.KillBodySchema),
    responses: { 200: json(V.ProcessKillViewSchema) },
  },
  // ---- port links (issue 9 §3); the links themselves (`/p/<token>/…`, any method, WebSocket too, no token header) are served beside this table ----
  {
    method: 'post',
    path: '/v1/sessions/:id/port-links',
    summary: 'A signed, expiring link to a port, for a browser (no token needed)',
    description: '`url` (`<origin>/p/<token>/`) is shown this once: the server keeps only the SHA-256 of the token. Requests under it reach the port as through `…/ports/:port/` (prefix stripped, `X-Forwarded-Prefix: /p/<token>`). A link that is unknown, expired, revoked or whose session ended answers 404 `not_found`, the same for each. Operators only.',
    tag: 'ports',
    auth: 'operator',
    body: json(PL.PortLinkCreateBodySchema),
    responses: { 201: json(PL.PortLinkCreatedViewSchema) },
  },
  { method: 'get', path: '/v1/sessions/:id/port-links', summary: "The session's port links, in any state (without their URLs)", tag: 'ports', auth: 'operator', responses: { 200: json(PL.PortLinkListViewSchema) } },
  { method: 'delete', path: '/v1/sessions/:id/port-links/:linkId', summary: 'Revoke a port link (idempotent)', tag: 'ports', auth: 'operator', responses: { 200: json(PL.PortLinkViewSchema) } },
  // ---- terminals (issue 9 §2); the WebSocket routes (GET …/terminals and …/terminals/:termId with Upgrade) are served beside this table ----
  {
    method: 'get',
    path: '/v1/sessions/:id/terminals',
    summary: 'Terminals of the session, running and ended',
    description: 'With `Upgrade: websocket` this path creates a terminal and attaches to it (query: cols, rows, cwd, command as a JSON array, env=K=V repeated, mode); `…/terminals/:termId` with Upgrade attaches (query: mode, ticket). Binary frames carry bytes; text frames carry JSON control (`resize`, `control` up; `hello`, `role`, `resize`, `exit`, `error` down). A watcher\'s input is refused with an `error` frame (code forbidden, details.reason not_controller).',
    tag: 'terminals',
    auth: 'operator',
    responses: { 200: json(TM.TerminalListViewSchema) },
  },
  { method: 'post', path: '/v1/sessions/:id/terminals', summary: 'Open a terminal (attach to it later by id)', tag: 'terminals', auth: 'operator', body: json(TM.TerminalCreateBodySchema), responses: { 201: json(TM.TerminalViewSchema) } },
  { method: 'get', path: '/v1/sessions/:id/terminals/:termId', summary: 'One terminal', tag: 'terminals', auth: 'operator', responses: { 200: json(TM.TerminalViewSchema) } },
  { method: 'post', path: '/v1/sessions/:id/terminals/:termId/kill', summary: "Signal a terminal's process group (default SIGTERM)", tag: 'terminals', auth: 'operator', body: json(TM.TerminalKillBodySchema), responses: { 200: json(TM.TerminalKillViewSchema) } },
  { method: 'post', path: '/v1/sessions/:id/terminals/:termId/tickets', summary: 'A single-use ticket (60 s) to attach a WebSocket with ?ticket= (browsers cannot set headers)', tag: 'terminals', auth: 'operator', responses: { 201: json(TM.TerminalTicketViewSchema) } },
  { method: 'get', path: '/v1/sessions/:id/terminals/:termId/recording', summary: 'The asciicast v2 recording of the terminal', tag: 'terminals', auth: 'operator', responses: { 200: { kind: 'bytes', description: 'asciicast v2 (JSON lines)', mediaType: TM.ASCIICAST } } },
  // ---- a desktop's live view (issue 11); the WebSocket (GET …/desktop/vnc with Upgrade) is served beside this table ----
  {
    method: 'post',
    path: '/v1/sessions/:id/desktop/tickets',
    summary: "A single-use ticket (60 s) to open the desktop's live view with ?ticket= (browsers cannot set headers)",
    description:
      '`GET /v1/sessions/:id/desktop/vnc` with `Upgrade: websocket` (Authorization: Bearer, or ?ticket= from this route) joins the caller to the VNC server of a session created with a desktop: RFB 3.8 in binary frames both ways (subprotocol `binary` answered when asked; security type None, as Berth authenticated the socket). Only the holder of the session\'s control lease may act: anyone else\'s keys, pointer, clipboard and resize requests are dropped by the server while the view stays live; watchers (watch links) may look. A client stream the server cannot read is closed with 1002 and a reason. Before the upgrade: 401, 404, 409 invalid_state (details.reason no_desktop).',
    tag: 'desktop',
    auth: 'operator',
    responses: { 201: json(VNC.DesktopTicketViewSchema) },
  },
  // ---- a desktop's recording (issue 11): a video per session, kept inside its machine ----
  {
    method: 'get',
    path: '/v1/sessions/:id/desktop',
    summary: "The desktop's screen and its recording's state",
    description: 'A session created without a desktop: 409 invalid_state (details.reason no_desktop). Wakes a hibernated session (the state is kept inside its machine).',
    tag: 'desktop',
    auth: 'operator',
    responses: { 200: json(DSK.DesktopViewSchema) },
  },
  {
    method: 'post',
    path: '/v1/sessions/:id/desktop/recording/start',
    summary: 'Start recording the desktop (MPEG-TS, 5 fps, capped); replaces an earlier video',
    description: 'Answers once the first frame is written (at most about 15 s; ffmpeg takes 1-4 s to start). ffmpeg runs inside the machine as a background process (`berth ps` lists it) and stops by itself at the cap. The video belongs to the machine: hibernate and wake keep it (and a running recording goes on), terminate removes it, a fork branch gets a copy that its own recording continues. 409 conflict while a recording runs; 409 invalid_state (no_desktop) without a desktop. Audited `session.desktop.record.start`.',
    tag: 'desktop',
    auth: 'operator',
    body: json(DSK.RecordingStartBodySchema, 'no body, {}, or {maxBytes}'),
    responses: { 200: json(DSK.DesktopRecordingViewSchema) },
  },
  {
    method: 'post',
    path: '/v1/sessions/:id/desktop/recording/stop',
    summary: 'Stop recording (the video stays); answers once ffmpeg has exited',
    description: 'Nothing recording: `stopped: false` and the state, not an error. Audited `session.desktop.record.stop` when it stopped one.',
    tag: 'desktop',
    auth: 'operator',
    body: json(S.EmptyBodySchema, 'no body, or {}'),
    responses: { 200: json(DSK.DesktopRecordingStopViewSchema) },
  },
  {
    method: 'get',
    path: '/v1/sessions/:id/desktop/recording',
    summary: 'The video so far (MPEG-TS, whole packets), streamed',
    description: 'Readable while recording (the bytes written so far). 404 not_found (details.reason no_recording) when nothing was recorded.',
    tag: 'desktop',
    auth: 'operator',
    responses: { 200: { kind: 'bytes', mediaType: DSK.MPEG_TS, description: 'the video, MPEG transport stream (H.264)' } },
  },
  // ---- files ----
  {
    method: 'put',
    path: '/v1/sessions/:id/files',
    summary: 'Write a file atomically from the raw body (streamed)',
    tag: 'files',
    auth: 'operator',
    query: S.WriteFileQuerySchema,
    body: { kind: 'bytes', description: 'the file content' },
    responses: { 200: json(V.FileWriteViewSchema) },
  },
  {
    method: 'get',
    path: '/v1/sessions/:id/files',
    summary: 'Read a file (streamed)',
    tag: 'files',
    auth: 'operator',
    query: S.FilePathQuerySchema,
    responses: { 200: { kind: 'bytes', description: 'the file content' } },
  },
  {
    method: 'delete',
    path: '/v1/sessions/:id/files',
    summary: 'Remove a file or (recursive=true) a directory tree',
    tag: 'files',
    auth: 'operator',
    query: S.RemoveFileQuerySchema,
    responses: { 200: json(V.OkViewSchema) },
  },
  { method: 'get', path: '/v1/sessions/:id/files/list', summary: 'List a directory', tag: 'files', auth: 'operator', query: S.FilePathQuerySchema, responses: { 200: json(V.FileListViewSchema) } },
  { method: 'get', path: '/v1/sessions/:id/files/stat', summary: 'Stat a path', tag: 'files', auth: 'operator', query: S.FilePathQuerySchema, responses: { 200: json(V.FileStatViewSchema) } },
  { method: 'post', path: '/v1/sessions/:id/files/mkdir', summary: 'Create a directory', tag: 'files', auth: 'operator', body: json(S.MkdirBodySchema), responses: { 200: json(V.OkViewSchema) } },
  { method: 'post', path: '/v1/sessions/:id/files/move', summary: 'Rename or move a file or directory within the session', tag: 'files', auth: 'operator', body: json(P.MoveBodySchema), responses: { 200: json(V.OkViewSchema) } },
  {
    method: 'put',
    path: '/v1/sessions/:id/files/tar',
    summary: 'Unpack a tar stream (the raw body, streamed) into a directory, made if missing',
    tag: 'files',
    auth: 'operator',
    query: P.TarQuerySchema,
    body: { kind: 'bytes', mediaType: P.TAR, description: 'a tar stream' },
    responses: { 200: json(V.TarPushViewSchema) },
  },
  {
    method: 'get',
    path: '/v1/sessions/:id/files/tar',
    summary: 'A directory as a tar stream (streamed)',
    tag: 'files',
    auth: 'operator',
    query: P.TarQuerySchema,
    responses: { 200: { kind: 'bytes', mediaType: P.TAR, description: 'a tar stream of the directory' } },
  },
  {
    method: 'get',
    path: '/v1/sessions/:id/files/watch',
    summary: 'File system events under a path, as they happen',
    description: 'NDJSON: `ready` once the watch is in place, then one `event` line per change (`ping` when quiet) until the client closes the connection.',
    tag: 'files',
    auth: 'operator',
    query: P.WatchQuerySchema,
    responses: { 200: { kind: 'ndjson', line: V.WatchLineSchema, description: 'the event stream (each line is one WatchLine)' } },
  },
  // ---- snapshots ----
  {
    method: 'post',
    path: '/v1/sessions/:id/snapshots',
    summary: 'Snapshot a running session (it keeps running)',
    tag: 'snapshots',
    auth: 'operator',
    body: json(S.SnapshotBodySchema),
    idempotent: true,
    responses: { 201: json(V.SnapshotViewSchema), 200: json(V.SnapshotViewSchema, RECOVERED) },
  },
  { method: 'get', path: '/v1/snapshots', summary: 'List snapshots', tag: 'snapshots', auth: 'operator', query: S.ListSnapshotsQuerySchema, responses: { 200: json(V.SnapshotListViewSchema) } },
  { method: 'get', path: '/v1/snapshots/:id', summary: 'Show a snapshot', tag: 'snapshots', auth: 'operator', responses: { 200: json(V.SnapshotViewSchema) } },
  { method: 'delete', path: '/v1/snapshots/:id', summary: 'Delete a snapshot', tag: 'snapshots', auth: 'operator', responses: { 200: json(V.OkViewSchema) } },
  {
    method: 'post',
    path: '/v1/snapshots/:id/fork',
    summary: 'Start count independent sessions from a snapshot, each with a fresh identity',
    tag: 'snapshots',
    auth: 'operator',
    body: json(S.ForkBodySchema),
    idempotent: true,
    responses: { 201: json(V.ForkViewSchema), 200: json(RecoveredForkSchema, RECOVERED) },
  },
  // ---- templates (issue 8 §4) ----
  {
    method: 'post',
    path: '/v1/templates',
    summary: 'Build a template from a recipe; the answer streams the build',
    description: 'Bad input (an unknown recipe field, a name in use, a missing `from`) is an ordinary error response. Then the answer is NDJSON: `started`, `session`, per step `step` → `stdout`/`stderr` (base64) → `exit`, then `capturing` and `done` with the template, or `error` (a failing step: invalid_argument naming recipe.run.N, with exitCode, stdout and stderr in details). Nothing of a failed build is kept. Closing the connection fails the build.',
    tag: 'templates',
    auth: 'operator',
    body: json(T.BuildTemplateBodySchema),
    responses: { 200: { kind: 'ndjson', line: T.TemplateBuildLineSchema, description: 'the build progress' } },
  },
  { method: 'get', path: '/v1/templates', summary: "List the tenant's templates", tag: 'templates', auth: 'operator', query: T.TemplateScopeQuerySchema, responses: { 200: json(T.TemplateListViewSchema) } },
  { method: 'get', path: '/v1/templates/:name', summary: 'Show a template', tag: 'templates', auth: 'operator', query: T.TemplateScopeQuerySchema, responses: { 200: json(T.TemplateViewSchema) } },
  { method: 'delete', path: '/v1/templates/:name', summary: 'Remove a template (sessions made from it keep running)', tag: 'templates', auth: 'operator', query: T.TemplateScopeQuerySchema, responses: { 200: json(V.OkViewSchema) } },
  // ---- tenants and audit ----
  { method: 'post', path: '/v1/tenants', summary: 'Create a tenant (root only)', tag: 'tenants', auth: 'operator', body: json(S.CreateTenantBodySchema), responses: { 201: json(V.CreatedTenantViewSchema, 'the tenant, with its API key (shown once)') } },
  { method: 'get', path: '/v1/tenants', summary: 'List tenants', tag: 'tenants', auth: 'operator', responses: { 200: json(V.TenantListViewSchema) } },
  { method: 'get', path: '/v1/audit', summary: 'Audit entries, oldest first', tag: 'audit', auth: 'operator', query: S.AuditQuerySchema, responses: { 200: json(V.AuditListViewSchema) } },
  { method: 'get', path: '/v1/audit/verify', summary: 'Check the hash chain and the Merkle tree', tag: 'audit', auth: 'operator', responses: { 200: json(V.AuditVerifyViewSchema) } },
  {
    method: 'post',
    path: '/v1/audit/verify',
    summary: 'Check the chain, the tree, and each published signed head against it (consistency proofs)',
    tag: 'audit',
    auth: 'operator',
    body: json(S.AuditVerifyBodySchema, 'checkpoints: signed heads as `berth audit checkpoint` printed them'),
    responses: { 200: json(V.AuditVerifyViewSchema) },
  },
  { method: 'get', path: '/v1/audit/key', summary: "The audit signing key's public half", tag: 'audit', auth: 'operator', responses: { 200: json(V.AuditKeyViewSchema) } },
  { method: 'post', path: '/v1/audit/checkpoints', summary: 'A signed tree head of the log as it is now', tag: 'audit', auth: 'operator', responses: { 200: json(V.SignedHeadViewSchema) } },
  {
    method: 'get',
    path: '/v1/audit/proofs/inclusion/:seq',
    summary: 'An inclusion proof for one entry (RFC 9162 audit path with a signed head)',
    tag: 'audit',
    auth: 'operator',
    query: S.AuditProveQuerySchema,
    responses: { 200: json(V.InclusionProofViewSchema) },
  },
  {
    method: 'get',
    path: '/v1/audit/proofs/consistency',
    summary: 'A consistency proof between two tree sizes (RFC 9162), with a signed head for the larger',
    tag: 'audit',
    auth: 'operator',
    query: S.AuditConsistencyQuerySchema,
    responses: { 200: json(V.ConsistencyProofViewSchema) },
  },
  // ---- MCP ----
  {
    method: 'post',
    path: '/v1/sessions/:id/mcp',
    summary: "The session's tools over MCP (streamable HTTP, stateless)",
    description: 'A JSON-RPC 2.0 message in, its answer out (application/json or text/event-stream, as the MCP streamable-HTTP transport says). Tool calls pass the gate exactly as POST …/tools/:name/call does.',
    tag: 'gate',
    auth: 'agent',
    body: { kind: 'json', schema: McpMessage, description: 'an MCP JSON-RPC message' },
    responses: { 200: { kind: 'none', description: 'the JSON-RPC answer (JSON or an SSE stream)' }, 202: { kind: 'none', description: 'a notification was accepted' } },
  },
  { method: 'get', path: '/v1/sessions/:id/mcp', summary: 'Not used by the stateless transport (405)', tag: 'gate', auth: 'agent', responses: { 405: { kind: 'none', description: 'always' } } },
  { method: 'delete', path: '/v1/sessions/:id/mcp', summary: 'Not used by the stateless transport (405)', tag: 'gate', auth: 'agent', responses: { 405: { kind: 'none', description: 'always' } } },
  // ---- the gate ----
  { method: 'get', path: '/v1/sessions/:id/tools', summary: 'The tools the caller may call', tag: 'gate', auth: 'agent', responses: { 200: json(V.ToolListViewSchema) } },
  {
    method: 'put',
    path: '/v1/sessions/:id/tools',
    summary: 'Choose which tools a session has',
    tag: 'gate',
    auth: 'operator',
    body: json(G.InstallToolsBodySchema),
    responses: { 200: json(V.GateViewSchema) },
  },
  {
    method: 'post',
    path: '/v1/sessions/:id/tools/:name/call',
    summary: 'Call a tool through the gate: allow (with the result), deny (stage, code, reason) or pending (approvalId)',
    tag: 'gate',
    auth: 'agent',
    body: json(G.CallBodySchema),
    responses: { 200: json(V.CallResultViewSchema) },
  },
  { method: 'post', path: '/v1/sessions/:id/calls', summary: 'Call a tool named in the body', tag: 'gate', auth: 'agent', body: json(G.CallsBodySchema), idempotent: true, responses: { 200: json(V.CallResultViewSchema) } },
  { method: 'get', path: '/v1/sessions/:id/approvals/:approvalId', summary: "One of the session's approvals, with the result once run", tag: 'gate', auth: 'agent', responses: { 200: json(V.ApprovalViewSchema) } },
  {
    method: 'put',
    path: '/v1/policy',
    summary: "Replace the tenant's Cedar policy (a policy that does not validate is refused, the old one kept)",
    tag: 'gate',
    auth: 'operator',
    query: G.TenantQuerySchema,
    body: { kind: 'cedar', schema: G.PolicyBodySchema, description: 'the policy as text/plain, or {policy} as JSON' },
    responses: { 200: json(V.PolicyViewSchema) },
  },
  { method: 'get', path: '/v1/policy', summary: "The tenant's Cedar policy", tag: 'gate', auth: 'operator', query: G.TenantQuerySchema, responses: { 200: json(V.PolicyViewSchema) } },
  {
    method: 'post',
    path: '/v1/tools',
    summary: 'Add or replace an operator tool of the tenant',
    description: 'The definition is checked by the gate: name, description, inputSchema and outputSchema (JSON Schema), risk, and an executor `{kind: "command", argv}` run in the sandbox with the arguments as JSON on stdin.',
    tag: 'gate',
    auth: 'operator',
    query: G.TenantQuerySchema,
    body: json(ToolDefinitionBody),
    responses: { 201: json(V.ToolDefinitionViewSchema) },
  },
  { method: 'get', path: '/v1/tools', summary: 'Every tool of the tenant, built-ins included', tag: 'gate', auth: 'operator', query: G.TenantQuerySchema, responses: { 200: json(V.ToolDefinitionListViewSchema) } },
  { method: 'get', path: '/v1/approvals', summary: 'List approvals', tag: 'gate', auth: 'operator', query: G.ApprovalsQuerySchema, responses: { 200: json(V.ApprovalListViewSchema) } },
  { method: 'post', path: '/v1/approvals/:id/approve', summary: 'Approve a parked call; it runs at once', tag: 'gate', auth: 'operator', body: json(S.EmptyBodySchema), responses: { 200: json(V.ApprovalViewSchema) } },
  { method: 'get', path: '/v1/approvals/:id/screenshot', summary: 'The screen kept when a computer call was parked, its point marked', tag: 'gate', auth: 'operator', responses: { 200: { kind: 'bytes', description: 'PNG', mediaType: 'image/png' } } },
  { method: 'post', path: '/v1/approvals/:id/deny', summary: 'Deny a parked call', tag: 'gate', auth: 'operator', body: json(G.DenyBodySchema), responses: { 200: json(V.ApprovalViewSchema) } },
  { method: 'get', path: '/v1/sessions/:id/gate', summary: "A session's gate settings and breaker", tag: 'gate', auth: 'operator', responses: { 200: json(V.GateViewSchema) } },
  { method: 'put', path: '/v1/sessions/:id/gate', summary: 'Change gate settings (fields left out keep their value)', tag: 'gate', auth: 'operator', body: json(G.GateSettingsBodySchema), responses: { 200: json(V.GateViewSchema) } },
  { method: 'post', path: '/v1/sessions/:id/breaker/reset', summary: 'Close a tripped breaker and resume the session', tag: 'gate', auth: 'operator', body: json(S.EmptyBodySchema), responses: { 200: json(V.GateViewSchema) } },
  { method: 'get', path: '/v1/sessions/:id/plan', summary: "A session's plan and progress", tag: 'gate', auth: 'operator', responses: { 200: json(V.PlanViewSchema) } },
  {
    method: 'put',
    path: '/v1/sessions/:id/plan',
    summary: 'Bind a session to a plan, replacing any other',
    tag: 'gate',
    auth: 'operator',
    body: json(PlanBody),
    responses: { 200: json(V.PlanViewSchema) },
  },
  { method: 'delete', path: '/v1/sessions/:id/plan', summary: "Clear a session's plan", tag: 'gate', auth: 'operator', responses: { 200: json(V.PlanViewSchema) } },
  // ---- tenant quotas (issue 12 §3) ----
  { method: 'get', path: '/v1/tenants/:id', summary: 'A tenant with its quotas in force and what it uses (root: any; an operator: its own)', tag: 'tenants', auth: 'operator', responses: { 200: json(Q.TenantDetailViewSchema) } },
  {
    method: 'put',
    path: '/v1/tenants/:id/quotas',
    summary: "Set some of a tenant's quotas (root only); a request over a quota answers 429 quota_exceeded naming the limit and the current use",
    tag: 'tenants',
    auth: 'operator',
    body: json(Q.SetTenantQuotasBodySchema),
    responses: { 200: json(Q.TenantDetailViewSchema) },
  },
  // ---- the web console (issue 10): control leases, policy validation, live events, sign-in ----
  { method: 'get', path: '/v1/sessions/:id/control', summary: "Who holds the session's control lease, if anyone", tag: 'console', auth: 'operator', responses: { 200: json(C.ControlViewSchema) } },
  {
    method: 'post',
    path: '/v1/sessions/:id/control',
    summary: 'Take control of a session (or renew your lease)',
    description: "An exclusive lease: while it is held, the agent's tool calls are refused with `human_control` (retryable; nothing cuts its connection). Someone else's live lease: 409 conflict naming them. It lapses after 10 min without activity by its holder; taking it again renews it. Start and end are audited.",
    tag: 'console',
    auth: 'operator',
    body: json(S.EmptyBodySchema, 'no body, or {}'),
    responses: { 200: json(C.ControlViewSchema) },
  },
  { method: 'delete', path: '/v1/sessions/:id/control', summary: 'Hand control back to the agent (force: end someone else\'s lease)', tag: 'console', auth: 'operator', query: C.ReleaseControlQuerySchema, responses: { 200: json(C.ControlViewSchema) } },
  {
    method: 'post',
    path: '/v1/policy/validate',
    summary: 'Check a Cedar policy without saving it',
    description: 'The checks of PUT /v1/policy against the tenant\'s tools; answers 200 with the errors (ok false) rather than refusing. Nothing is stored or audited.',
    tag: 'console',
    auth: 'operator',
    query: G.TenantQuerySchema,
    body: { kind: 'bytes', mediaType: 'text/plain', description: 'the Cedar text' },
    responses: { 200: json(C.PolicyValidationViewSchema) },
  },
  {
    method: 'get',
    path: '/v1/events',
    summary: 'Live audit entries (server-sent events)',
    description: 'text/event-stream: `ready` with the starting seq, then one `audit` event (data: an AuditEntryView) per entry the caller may see, as it is appended; `after=SEQ` resumes. The console refreshes its pages from it.',
    tag: 'console',
    auth: 'operator',
    responses: { 200: { kind: 'bytes', mediaType: 'text/event-stream', description: 'the event stream' } },
  },
  {
    method: 'post',
    path: '/v1/sessions/:id/watch-links',
    summary: "Share a watch-only link to one session's console view",
    description: 'Whoever opens `url` (until `expiresAt`, unless revoked) sees this session read-only in the console: state, plan, timeline, terminals to watch; nothing else, and no actions. The token is in the URL fragment and shown only here; only its SHA-256 is stored. Audited console.watch_link.create.',
    tag: 'console',
    auth: 'operator',
    body: json(C.WatchLinkCreateBodySchema),
    responses: { 201: json(C.WatchLinkCreatedViewSchema) },
  },
  { method: 'get', path: '/v1/sessions/:id/watch-links', summary: "The session's watch-only links (active, expired, revoked)", tag: 'console', auth: 'operator', responses: { 200: json(C.WatchLinkListViewSchema) } },
  { method: 'delete', path: '/v1/sessions/:id/watch-links/:linkId', summary: 'Revoke a watch-only link (consoles open through it end); audited console.watch_link.revoke', tag: 'console', auth: 'operator', responses: { 200: json(C.WatchLinkViewSchema) } },
  { method: 'post', path: '/v1/console/links', summary: 'A one-time console sign-in link for this token (valid 60 s)', tag: 'console', auth: 'operator', body: json(C.ConsoleLinkBodySchema), responses: { 201: json(C.ConsoleLinkViewSchema) } },
  { method: 'get', path: '/v1/console/me', summary: 'Who the caller is, as the console shows it', tag: 'console', auth: 'operator', responses: { 200: json(C.ConsoleMeViewSchema) } },
  { method: 'post', path: '/v1/console/signout', summary: 'End this console session (clears the cookie)', tag: 'console', auth: 'operator', body: json(S.EmptyBodySchema, 'no body, or {}'), responses: { 200: json(V.OkViewSchema) } },
  {
    method: 'post',
    path: '/console/signin',
    summary: "Exchange a sign-in code (once), a token or a watch link's token for the console cookie",
    description: 'Sets an HttpOnly, SameSite=Strict cookie holding an opaque console session id (never the token). Requires the `x-berth-csrf: 1` header and, when sent, a same-origin Origin.',
    tag: 'console',
    auth: 'none',
    body: json(C.ConsoleSignInBodySchema),
    responses: { 200: json(C.ConsoleMeViewSchema) },
  },
  { method: 'get', path: '/', summary: 'The web console (HTML)', tag: 'console', auth: 'none', responses: { 200: { kind: 'bytes', mediaType: 'text/html', description: 'the console page' } } },
  { method: 'get', path: '/assets/:file', summary: "The console's built assets", tag: 'console', auth: 'none', responses: { 200: { kind: 'bytes', mediaType: 'text/javascript', description: 'a script or stylesheet' } } },
  // ---- end console ----
];
