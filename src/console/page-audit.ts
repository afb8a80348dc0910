/** Audit: the tenant's log (newest first), filtered by session and kind, the chain's verification state, and an export. */
import { useEffect, useState } from 'preact/hooks';
import type { AuditEntryView, AuditVerifyView, ConsoleMeView } from '../sdk/index.js';
import { api, errText, onEvent } from './api.js';
import { html } from './ui.js';

export function AuditPage(props: { me: ConsoleMeView; onAuthError: (e: unknown) => void }) {
  const [entries, setEntries] = useState<AuditEntryView[] | null>(null);
  const [session, setSession] = useState('');
  const [kind, setKind] = useState('');
  const [verify, setVerify] = useState<AuditVerifyView | string | null>(null);
  const [err, setErr] = useState<string | null>(null);

  const load = async () => {
    try {
      const all: AuditEntryView[] = [];
      for (let after = 0; ; ) {
        const page = await api.audit.query({ afterSeq: after, limit: 1000, ...(session.trim() ? { sessionId: session.trim() } : {}) });
        all.push(...page);
        if (page.length < 1000) break;
        after = (page[page.length - 1] as AuditEntryView).seq;
      }
      setEntries(all);
      setErr(null);
    } catch (e) {
      props.onAuthError(e);
      setErr(errText(e));
    }
  };
  useEffect(() => void load(), [session]);
  useEffect(() => onEvent((e) => setEntries((l) => (l && (!session.trim() || e.sessionId === session.trim()) && !l.some((x) => x.seq === e.seq) ? [...l, e] : l))), [session]);
  useEffect(() => {
    if (props.me.kind !== 'root') {
      setVerify('Verifying the whole chain needs the root token (it spans every tenant).');
      return;
    }
    void api.audit.verify().then(setVerify, (e) => setVerify(errText(e)));
  }, []);

  const shown = (entries ?? []).filter((e) => !kind || e.action === kind || e.action.startsWith(`${kind}.`)).slice().reverse();
  const kinds = [...new Set((entries ?? []).map((e) => e.action.split('.')[0] as string))].sort();
  const exportJson = () => {
    const blob = new Blob([shown.map((e) => JSON.stringify(e)).join('\n') + '\n'], { type: 'application/x-ndjson' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `berth-audit${session ? `-${session}` : ''}.ndjson`;
    a.click();
    URL.revokeObjectURL(a.href);
  };
  const v = verify;
  return html`<section>
    <h2>Audit <small>${entries ? `${shown.length} entries` : ''}</small></h2>
    <p class="verify" data-testid="chain">${v === null ? 'Verifying…' : typeof v === 'string' ? v : v.ok ? html`<span class="badge good">chain verified</span> ${v.entries} entries` : html`<span class="badge bad">chain broken</span> ${JSON.stringify(v)}`}</p>
    <div class="filters">
      <input placeholder="Session id" value=${session} onChange=${(e: Event) => setSession((e.target as HTMLInputElement).value)} data-testid="audit-session" />
      <select value=${kind} onChange=${(e: Event) => setKind((e.target as HTMLSelectElement).value)} data-testid="audit-kind">
        <option value="">every kind</option>
        ${kinds.map((k) => html`<option value=${k}>${k}</option>`)}
      </select>
      <button onClick=${exportJson}>Export NDJSON</button>
    </div>
    ${err && html`<p class="error" role="alert">${err}</p>`}
    <table class="audit" data-testid="audit-table">
      <thead><tr><th>#</th><th>When</th><th>Who</th><th>Action</th><th>Outcome</th><th>Session</th><th>Data</th></tr></thead>
      <tbody>${shown.slice(0, 1000).map((e) => html`<tr key=${e.seq}><td>${e.seq}</td><td>${new Date(e.tsMs).toLocaleTimeString()}</td><td>${e.principal.kind}:${e.principal.id}</td><td>${e.action}</td><td>${e.outcome}</td><td>${e.sessionId ?? ''}</td><td><code>${JSON.stringify(e.data).slice(0, 160)}</code></td></tr>`)}</tbody>
    </table>
  </section>`;
}
