/**
 * The server before its backends are ready: it listens at once (the first start builds the base image,
 * about a minute), /healthz answers `{ok: false, starting: {...}}` and every /v1 route answers 503
 * `unavailable` with the same progress in details.starting, so clients can tell "starting" from "down"
 * and retry. Once the engine is composed, requests go to the real app.
 */
import { AppError } from '../core/index.js';
import { toErrorBody, type HealthView, type StartingView } from '../protocol/index.js';

type FetchApp = { fetch: (request: Request) => Response | Promise<Response> };

/**
 * Where startup is; updated by the composition root as it goes. The backends get ready side by side, so
 * several phases can be under way at once: the view shows the one that started first and is still going
 * (at a first start, the base image build the others wait for), or, when none is, the last one that ended.
 */
export class StartupProgress {
  private readonly t0: number;
  private readonly active = new Map<string, { message: string; detail: string | null }>();
  private shown: { phase: string; message: string; detail: string | null } = { phase: 'starting', message: 'starting', detail: null };
  private readonly listeners = new Set<(v: StartingView) => void>();

  constructor(private readonly now: () => number = Date.now) {
    this.t0 = now();
  }

  /** A phase begins (a backend, recovery…), with a sentence for people. */
  set(phase: string, message: string): void {
    this.active.delete(phase);
    this.active.set(phase, { message, detail: null });
    this.emit();
  }

  /** The latest line of a phase's work (a debootstrap step, say). */
  line(text: string, phase: string): void {
    const t = text.trim();
    const entry = this.active.get(phase);
    if (!t || !entry) return;
    entry.detail = t.slice(0, 300);
    this.emit();
  }

  /** A phase ended; the view moves on to the next one still under way. */
  done(phase: string): void {
    const entry = this.active.get(phase);
    if (!entry) return;
    this.active.delete(phase);
    this.shown = { phase, ...entry };
    this.emit();
  }

  onChange(fn: (v: StartingView) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  view(): StartingView {
    const first = this.active.entries().next();
    const { phase, message, detail } = first.done ? this.shown : { phase: first.value[0], ...first.value[1] };
    return { phase, message, detail, elapsedS: Math.round((this.now() - this.t0) / 100) / 10 };
  }

  private emit(): void {
    const v = this.view();
    for (const fn of this.listeners) fn(v);
  }
}

/**
 * A fetch handler that answers from `starting` until ready(app) is called, then from the app. A failed
 * start can be shown with failed(error) until the process exits.
 */
export function startingGate(progress: StartupProgress): FetchApp & { ready(app: FetchApp): void } {
  let app: FetchApp | null = null;
  const json = (body: unknown, status: number) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
  return {
    ready(a) {
      app = a;
    },
    fetch(request) {
      if (app) return app.fetch(request);
      const path = new URL(request.url).pathname;
      const starting = progress.view();
      if (path === '/healthz') return json({ ok: false, backends: {}, starting } satisfies HealthView, 503);
      const err = new AppError('unavailable', `Berth is starting (${starting.message}); retry shortly`, { details: { starting }, retryable: true });
      return json(toErrorBody(err), 503);
    },
  };
}

/** A one-line live status for a terminal: `[berth] starting: building the base image… 12.3 s`. */
export function terminalProgress(progress: StartupProgress, out: NodeJS.WriteStream): { stop(final: string): void } {
  const draw = (v: StartingView) => {
    const cols = out.columns || 100;
    const text = `[berth] ${v.message}${v.detail ? `: ${v.detail}` : ''} (${v.elapsedS.toFixed(0)} s)`;
    out.write(`\r\x1b[K${text.slice(0, cols - 1)}`);
  };
  const off = progress.onChange(draw);
  const tick = setInterval(() => draw(progress.view()), 1000);
  tick.unref();
  draw(progress.view());
  return {
    stop(final) {
      off();
      clearInterval(tick);
      out.write(`\r\x1b[K[berth] ${final}\n`);
    },
  };
}
