/**
 * Validates real HTTP responses against the server's OpenAPI document with ajv (JSON Schema 2020-12, the
 * dialect of OpenAPI 3.1). Wrap an app's fetch with `checked(app)`; every JSON response, and every line of
 * an exec NDJSON stream, is checked against the schema the document gives for its route and status. Raw
 * byte bodies (file reads) are not read, so big transfers stay streamed.
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
   * cancels the server's side, as it would without the checker.
   */
  function tapped(res: Response): { res: Response; text: Promise<string> } {
    let text = '';
    const dec = new TextDecoder();
    let done!: (t: string) => void;
    const whole = new Promise<string>((r) => (done = r));
    const tap = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, ctrl) {
        text += dec.decode(chunk, { stream: true });
        ctrl.enqueue(chunk);
      },
      flush() {
        done(text + dec.decode());
      },
    });
    return { res: new Response(res.body!.pipeThrough(tap), { status: res.status, statusText: res.statusText, headers: res.headers }), text: whole };
  }

  async function check(req: Request, res: Response, streamed?: Promise<string>): Promise<void> {
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
    if (!resolved.content) {
      seen.set(t.key, (seen.get(t.key) ?? 0) + 1);
      return;
    }
    const media = resolved.content[type];
    if (!media) return void fail(`content-type ${type || '(none)'} is not documented (${Object.keys(resolved.content).join(', ')})`);
    if (type === 'application/octet-stream') return void seen.set(t.key, (seen.get(t.key) ?? 0) + 1);
    // A stream the client cancels never completes: there is then nothing whole to check.
    const text = streamed ? await streamed : await res.clone().text();
    const values = type === 'application/x-ndjson' ? text.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l)) : [JSON.parse(text)];
    const schema = type === 'application/x-ndjson' ? media['x-berth-line-schema'] : media.schema;
    const validate = validatorFor(schema);
    for (const v of values) {
      if (!validate(v)) fail(`${ajv.errorsText(validate.errors)} in ${JSON.stringify(v).slice(0, 300)}`);
    }
    seen.set(t.key, (seen.get(t.key) ?? 0) + 1);
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
          let streamed: Promise<string> | undefined;
          if (res.body && (res.headers.get('content-type') ?? '').startsWith('application/x-ndjson')) ({ res, text: streamed } = tapped(res));
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
