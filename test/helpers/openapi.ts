/**
 * Validates real HTTP responses against the server's OpenAPI document with ajv (JSON Schema 2020-12, the
 * dialect of OpenAPI 3.1). Wrap an app's fetch with `checked(app)`; every JSON response, and every line of
 * an NDJSON stream (exec, process output, watch), is checked against the schema the document gives for its
 * route and status. Raw byte bodies (file reads, tar streams) are not read, so big transfers stay streamed.
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import { openApiDocument, openApiPath } from '../../src/protocol/openapi.js';
import { ROUTES } from '../../src/protocol/openapi-routes.js';

type Json = Record<string, any>;

export interface Violation {
  route: string;
  status: number;
  problem: string;
}

export interface ResponseChecker {
  readonly doc: Json;
  /** Responses validated, by "METHOD /path/{template}". */
  readonly seen: Map<string, number>;
  readonly violations: Violation[];
  /** Waits for the checks of streams still being read. */
  settle(): Promise<void>;
  /** The app, with every response checked as it passes. */
  wrap<A extends { fetch: (r: Request, ...rest: any[]) => Response | Promise<Response> }>(app: A): { fetch: (r: Request) => Promise<Response> };
}

/** The lines of an NDJSON response as they pass; done once it ends or the client cancels it. */
interface Streamed {
  done: Promise<void>;
  attach(fn: (line: string) => void): void;
}

const TEMPLATES = ROUTES.map((r) => ({
  key: `${r.method.toUpperCase()} ${openApiPath(r.path)}`,
  method: r.method.toUpperCase(),
  path: openApiPath(r.path),
  re: new RegExp(`^${r.path.replace(/:[A-Za-z_]+/g, '[^/]+')}$`),
}));

export function responseChecker(): ResponseChecker {
  const doc = openApiDocument({ version: 'test' }) as Json;
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
  ajv.addSchema({ ...doc, $id: 'berth-openapi' });
  const validators = new Map<string, ReturnType<typeof ajv.compile>>();
  const validatorFor = (ref: Json): ReturnType<typeof ajv.compile> => {
    const key = JSON.stringify(ref);
    let v = validators.get(key);
    if (!v) {
      v = ajv.compile(ref.$ref ? { $ref: `berth-openapi${ref.$ref}` } : ref);
      validators.set(key, v);
    }
    return v;
  };
  const seen = new Map<string, number>();
  const violations: Violation[] = [];

  /**
   * An NDJSON response is observed as it passes (not teed), so a client that cancels the stream still
   * cancels the server's side, as it would without the checker. Each complete line goes to the sink as it
   * passes, so the lines of a stream the client cancels (a watch, a follow it detaches from) are checked too.
   */
  function tapped(res: Response): { res: Response; stream: Streamed } {
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let buf = '';
    const early: string[] = [];
    let sink: ((line: string) => void) | null = null;
    const emit = (l: string) => (l.trim() === '' ? undefined : sink ? sink(l) : early.push(l));
    const feed = (text: string) => {
      buf += text;
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        emit(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    };
    let finish!: () => void;
    const done = new Promise<void>((r) => (finish = r));
    const body = new ReadableStream<Uint8Array>({
      async pull(ctrl) {
        try {
          const r = await reader.read();
          if (r.done) {
            feed(dec.decode());
            emit(buf);
            buf = '';
            finish();
            return ctrl.close();
          }
          feed(dec.decode(r.value, { stream: true }));
          ctrl.enqueue(r.value);
        } catch (e) {
          finish();
          ctrl.error(e);
        }
      },
      cancel(reason) {
        finish();
        return reader.cancel(reason);
      },
    });
    const stream: Streamed = {
      done,
      attach(fn) {
        sink = fn;
        for (const l of early.splice(0)) fn(l);
      },
    };
    return { res: new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers }), stream };
  }

  async function check(req: Request, res: Response, streamed?: Streamed): Promise<void> {
    const path = new URL(req.url).pathname;
    const t = TEMPLATES.find((x) => x.method === req.method && x.re.test(path));
    if (!t) {
      if (res.status !== 404 && res.status !== 405) violations.push({ route: `${req.method} ${path}`, status: res.status, problem: 'no documented route matches' });
      return check404(req, res);
    }
    const op = doc.paths[t.path][req.method.toLowerCase()];
    const answer = op.responses[String(res.status)] ?? op.responses.default;
    const resolved = answer.$ref ? doc.components.responses[answer.$ref.split('/').pop()] : answer;
    const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim();
    const fail = (problem: string) => violations.push({ route: t.key, status: res.status, problem });
    const saw = () => seen.set(t.key, (seen.get(t.key) ?? 0) + 1);
    if (!resolved.content) return void saw();
    const media = resolved.content[type];
    if (!media) return void fail(`content-type ${type || '(none)'} is not documented (${Object.keys(resolved.content).join(', ')})`);
    // Raw bytes (file content, tar streams) are not read, so big transfers stay streamed.
    if (type !== 'application/json' && type !== 'application/x-ndjson') return void saw();
    const schema = type === 'application/x-ndjson' ? media['x-berth-line-schema'] : media.schema;
    const validate = validatorFor(schema);
    const checkOne = (v: unknown) => {
      if (!validate(v)) fail(`${ajv.errorsText(validate.errors)} in ${JSON.stringify(v).slice(0, 300)}`);
    };
    if (type === 'application/x-ndjson' && streamed) {
      let lines = 0;
      streamed.attach((l) => {
        try {
          checkOne(JSON.parse(l));
        } catch (e) {
          fail(`not JSON: ${(e as Error).message} in ${l.slice(0, 300)}`);
        }
        if (lines++ === 0) saw();
      });
      await streamed.done;
      if (lines === 0) saw();
      return;
    }
    const text = await res.clone().text();
    const values = type === 'application/x-ndjson' ? text.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l)) : [JSON.parse(text)];
    for (const v of values) checkOne(v);
    saw();
  }

  /** Unknown routes answer the documented error body too. */
  async function check404(_req: Request, res: Response): Promise<void> {
    if ((res.headers.get('content-type') ?? '').startsWith('application/json')) {
      const v = validatorFor({ $ref: '#/components/schemas/Error' });
      const body = JSON.parse(await res.clone().text());
      if (!v(body)) violations.push({ route: 'unknown route', status: res.status, problem: ajv.errorsText(v.errors) });
    }
  }

  const pending = new Set<Promise<void>>();
  return {
    doc,
    seen,
    violations,
    async settle() {
      // Streams the client cancelled never complete; give the rest a moment, then stop waiting for those.
      const end = Date.now() + 5000;
      while (pending.size && Date.now() < end) await Promise.race([Promise.all([...pending]), new Promise((r) => setTimeout(r, 100))]);
    },
    wrap(app) {
      return {
        async fetch(req: Request) {
          let res = await app.fetch(req);
          let streamed: Streamed | undefined;
          if (res.body && (res.headers.get('content-type') ?? '').startsWith('application/x-ndjson')) ({ res, stream: streamed } = tapped(res));
          // Checked beside the client, never before it: an exec stream must reach it while it runs.
          const p = check(req, res, streamed)
            .catch((e: unknown) => void violations.push({ route: `${req.method} ${new URL(req.url).pathname}`, status: res.status, problem: `unreadable: ${(e as Error).message}` }))
            .finally(() => pending.delete(p));
          pending.add(p);
          return res;
        },
      };
    },
  };
}
