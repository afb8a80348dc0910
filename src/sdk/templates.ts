/**
 * Templates (issue 8 §4): build one from a recipe (its progress streams as it runs), list, show, remove.
 * Start a session from one with `berth.sessions.create({ template: 'name' })`.
 */
import { AppError } from '../core/errors.js';
import { fromWireError } from '../protocol/errors.js';
import type { OkView } from '../protocol/types.js';
import type { BuildTemplateBody, TemplateBuildLine, TemplateListView, TemplateRecipeBody, TemplateView } from '../protocol/templates.js';
import type { Transport } from './http.js';
import type { CallOpts } from './session.js';

export interface BuildTemplateOptions extends CallOpts, Omit<BuildTemplateBody, 'name' | 'recipe'> {
  /** Sees every progress line as it arrives (step starts, output as base64, exits). */
  onEvent?: (line: TemplateBuildLine) => void;
}

export interface TemplateScope extends CallOpts {
  /** Root only: the tenant (default "default"). */
  tenantId?: string;
}

const enc = (s: string) => encodeURIComponent(s);

function decode(text: string): TemplateBuildLine {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new AppError('internal', 'malformed template build line (not JSON)');
  }
  if (!v || typeof v !== 'object' || typeof (v as { type?: unknown }).type !== 'string') throw new AppError('internal', `unexpected template build line: ${text.slice(0, 200)}`);
  return v as TemplateBuildLine;
}

export class TemplatesApi {
  constructor(private readonly t: Transport) {}

  /**
   * Builds a template and resolves with it once captured. A failing step rejects with invalid_argument
   * naming the step (`details.field` = "recipe.run.N", with exitCode, stdout and stderr); nothing is kept.
   */
  async build(name: string, recipe: TemplateRecipeBody, opts: BuildTemplateOptions = {}): Promise<TemplateView> {
    const { signal, onEvent, ...rest } = opts;
    const { res } = await this.t.send('POST', '/templates', { json: { name, recipe, ...rest }, signal, deadline: false });
    if (!res.body) throw new AppError('internal', 'template build answered without a body');
    const dec = new TextDecoder();
    let buf = '';
    const handle = (text: string): TemplateView | undefined => {
      if (text.trim() === '') return undefined;
      const l = decode(text);
      onEvent?.(l);
      if (l.type === 'error') throw fromWireError({ error: l.error }, 400);
      return l.type === 'done' ? l.template : undefined;
    };
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const done = handle(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        if (done) return done;
      }
    }
    const last = handle(buf + dec.decode());
    if (last) return last;
    throw new AppError('unavailable', 'the template build stream ended before the build finished', { retryable: true });
  }

  async list(opts: TemplateScope = {}): Promise<TemplateView[]> {
    return (await this.t.json<TemplateListView>('GET', '/templates', { query: { tenantId: opts.tenantId }, signal: opts.signal })).templates;
  }

  get(name: string, opts: TemplateScope = {}): Promise<TemplateView> {
    return this.t.json<TemplateView>('GET', `/templates/${enc(name)}`, { query: { tenantId: opts.tenantId }, signal: opts.signal });
  }

  /** Sessions already started from it keep running (each is its own copy). */
  async delete(name: string, opts: TemplateScope = {}): Promise<void> {
    await this.t.json<OkView>('DELETE', `/templates/${enc(name)}`, { query: { tenantId: opts.tenantId }, signal: opts.signal, deadline: false });
  }
}
