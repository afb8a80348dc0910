/**
 * The console's only door to the server: the public TypeScript SDK over same-origin fetch. The browser
 * holds no token: the HttpOnly console cookie rides along, and every request carries the CSRF header the
 * server demands of cookie requests that change state. `bg` marks requests the console makes on its own
 * (refreshes after a live event), which do not count as the person's activity for idle logoff.
 */
import { Berth } from '../sdk/index.js';
import { CONSOLE_BACKGROUND_HEADER, CONSOLE_CSRF_HEADER } from '../protocol/console-names.js';

function consoleFetch(background: boolean): typeof fetch {
  return (input, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set(CONSOLE_CSRF_HEADER, '1');
    if (background) headers.set(CONSOLE_BACKGROUND_HEADER, '1');
    return fetch(input, { ...init, headers, credentials: 'same-origin' });
  };
}

export const api = new Berth({ url: location.origin, fetch: consoleFetch(false), timeoutMs: 30_000 });
export const bg = new Berth({ url: location.origin, fetch: consoleFetch(true), timeoutMs: 30_000 });

/** Listeners of the live event stream (one stream per tab, opened after sign-in). */
type Listener = (e: import('../sdk/index.js').AuditEntryView) => void;
const listeners = new Set<Listener>();
let stream: AbortController | null = null;

export function onEvent(l: Listener): () => void {
  listeners.add(l);
  return () => listeners.delete(l);
}

export function startEvents(onEnd: (e: unknown) => void): void {
  stream?.abort();
  const ac = new AbortController();
  stream = ac;
  void (async () => {
    try {
      for await (const e of bg.console.events({ signal: ac.signal })) for (const l of listeners) l(e);
      if (!ac.signal.aborted) onEnd(new Error('event stream closed'));
    } catch (e) {
      if (!ac.signal.aborted) onEnd(e);
    }
  })();
}

export function stopEvents(): void {
  stream?.abort();
  stream = null;
}

export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

export function errText(e: unknown): string {
  const x = e as { code?: string; message?: string };
  return x.code ? `${x.code}: ${x.message}` : String(x.message ?? e);
}
