/** Sessions: every session of the tenant, live (refreshed from the event stream), filterable, with lifecycle actions. */
import { useEffect, useState } from 'preact/hooks';
import type { Session } from '../sdk/index.js';
import { ago, api, bg, bytes, errText, onEvent } from './api.js';
import { confirmAction, html } from './ui.js';

interface Extra {
  pending: Record<string, number>;
  breaker: Record<string, boolean>;
}

export function useLive(load: () => Promise<void>, filter: (action: string, sessionId: string | null) => boolean, deps: unknown[] = []): void {
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | null = null;
    const off = onEvent((e) => {
      if (!filter(e.action, e.sessionId)) return;
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        void load();
      }, 150);
    });
    return () => {
      off();
      if (timer) clearTimeout(timer);
    };
  }, deps);
}

export function SessionsPage(props: { onAuthError: (e: unknown) => void }) {
  const [list, setList] = useState<Session[] | null>(null);
  const [extra, setExtra] = useState<Extra>({ pending: {}, breaker: {} });
  const [q, setQ] = useState('');
  const [err, setErr] = useState<string | null>(null);
  const [busy, setBusy] = useState<string | null>(null);

  const load = async (client = bg) => {
    try {
      const [sessions, pending] = await Promise.all([client.sessions.list(), client.approvals.list({ states: ['pending'] })]);
      setList(sessions);
      const counts: Record<string, number> = {};
      for (const a of pending) if (a.status === 'pending') counts[a.sessionId] = (counts[a.sessionId] ?? 0) + 1;
      setExtra((x) => ({ ...x, pending: counts }));
      setErr(null);
      // Breakers after the table is on screen: one call per session must not hold up the first paint.
      void Promise.all(
        sessions.map(async (s) => {
          try {
            return [s.id, (await client.gate.get(s.id)).breaker.open] as const;
          } catch {
            return [s.id, false] as const;
          }
        }),
      ).then((pairs) => setExtra((x) => ({ ...x, breaker: Object.fromEntries(pairs) })));
    } catch (e) {
      props.onAuthError(e);
      setErr(errText(e));
    }
  };
  useEffect(() => void load(api), []);
  useLive(() => load(), (a) => a.startsWith('session.') || a.startsWith('approval.') || a.startsWith('gate.') || a.startsWith('tool.') || a.startsWith('snapshot.'));

  const act = async (s: Session, verb: string) => {
    if ((verb === 'terminate' || verb === 'hibernate') && !confirmAction(`${verb} ${s.id}?${verb === 'terminate' ? ' Its machine and state are gone for good.' : ''}`)) return;
    setBusy(`${s.id}:${verb}`);
    try {
      if (verb === 'snapshot') await s.snapshot();
      else if (verb === 'fork') {
        const snap = await s.snapshot();
        await api.snapshots.fork(snap.id);
      } else await (s as unknown as Record<string, () => Promise<unknown>>)[verb]!.call(s);
      await load(api);
    } catch (e) {
      props.onAuthError(e);
      setErr(errText(e));
    } finally {
      setBusy(null);
    }
  };

  const needle = q.trim().toLowerCase();
  const shown = (list ?? []).filter((s) => {
    if (!needle) return true;
    const i = s.info;
    return [i.id, i.state, i.backend, i.objective ?? '', ...Object.entries(i.metadata).map(([k, v]) => `${k}=${v}`)].some((x) => x.toLowerCase().includes(needle));
  });
  const now = Date.now();
  const verbs: Record<string, string[]> = {
    running: ['pause', 'hibernate', 'snapshot', 'fork', 'terminate'],
    paused: ['resume', 'snapshot', 'terminate'],
    hibernated: ['wake', 'terminate'],
  };
  return html`<section>
    <h2>Sessions <small>${list ? `${shown.length} of ${list.length}` : ''}</small></h2>
    <input class="filter" placeholder="Filter: id, state, backend, objective, label=value" value=${q} onInput=${(e: Event) => setQ((e.target as HTMLInputElement).value)} data-testid="session-filter" />
    ${err && html`<p class="error" role="alert">${err}</p>`}
    ${list === null
      ? html`<p>Loading…</p>`
      : html`<table class="sessions" data-testid="sessions-table">
          <thead><tr><th>Session</th><th>State</th><th>Backend</th><th>Template</th><th>Age</th><th>CPU</th><th>Memory</th><th>Egress</th><th>Approvals</th><th>Breaker</th><th>Actions</th></tr></thead>
          <tbody>
            ${shown.map((s) => {
              const i = s.info;
              return html`<tr key=${i.id} data-session=${i.id}>
                <td><a href=${`#/sessions/${i.id}`}>${i.id}</a><div class="sub">${i.objective ?? ''}</div></td>
                <td><span class=${`state ${i.state}`} data-testid="state">${i.state}</span></td>
                <td>${i.backend}</td>
                <td>${i.metadata.template ?? '-'}</td>
                <td>${ago(i.createdAt, now)}</td>
                <td>${i.metering.cpuSeconds.toFixed(1)} s</td>
                <td>${bytes(i.metering.peakMemoryBytes)}</td>
                <td>${bytes(i.metering.bytesOut)}</td>
                <td>${extra.pending[i.id] ? html`<a class="badge" href="#/approvals">${extra.pending[i.id]} pending</a>` : '-'}</td>
                <td>${extra.breaker[i.id] ? html`<span class="badge bad">open</span>` : 'closed'}</td>
                <td class="actions">${(verbs[i.state] ?? []).map((v) => html`<button disabled=${busy !== null} onClick=${() => act(s, v)} data-action=${v}>${v}</button>`)}</td>
              </tr>`;
            })}
          </tbody>
        </table>`}
  </section>`;
}
