/**
 * Sharing a session's view: watch-only links (issue 10). An operator makes an expiring link that opens this
 * one session's page read-only for whoever holds it, copies it from here (the token is shown only once, at
 * creation: the server keeps its hash), sees the session's links with their state, and revokes one, which
 * also ends the consoles open through it. Every step is the public API's; the server audits each.
 */
import { useEffect, useState } from 'preact/hooks';
import type { WatchLinkCreatedView, WatchLinkView } from '../sdk/index.js';
import { api, errText } from './api.js';
import { html } from './ui.js';

/** The lifetimes offered, seconds (the server accepts 60 s to 30 days). */
const TTLS: Array<[number, string]> = [
  [900, '15 minutes'],
  [3600, '1 hour'],
  [86_400, '1 day'],
];

export function SharePanel(props: { sessionId: string; onAuthError: (e: unknown) => void }) {
  const { sessionId } = props;
  const [links, setLinks] = useState<WatchLinkView[]>([]);
  const [created, setCreated] = useState<WatchLinkCreatedView | null>(null);
  const [ttlS, setTtlS] = useState(3600);
  const [label, setLabel] = useState('');
  const [err, setErr] = useState<string | null>(null);

  const guard = async (f: () => Promise<void>) => {
    try {
      await f();
      setErr(null);
    } catch (e) {
      props.onAuthError(e);
      setErr(errText(e));
    }
  };
  const load = () => guard(async () => setLinks(await api.console.watchLinks(sessionId)));
  useEffect(() => void load(), [sessionId]);

  const create = () =>
    guard(async () => {
      setCreated(await api.console.createWatchLink(sessionId, { ttlS, ...(label.trim() ? { label: label.trim() } : {}) }));
      setLabel('');
      setLinks(await api.console.watchLinks(sessionId));
    });
  const revoke = (linkId: string) =>
    guard(async () => {
      await api.console.revokeWatchLink(sessionId, linkId);
      if (created?.linkId === linkId) setCreated(null);
      setLinks(await api.console.watchLinks(sessionId));
    });

  return html`<div class="panel" data-testid="share">
    <h3>Share a watch-only link</h3>
    <p class="sub">Whoever opens it sees this session's page, live and read-only, until it expires or is revoked.</p>
    <label>Label <input value=${label} onInput=${(e: Event) => setLabel((e.target as HTMLInputElement).value)} placeholder="for the reviewer" maxlength="200" /></label>
    <label> valid for <select value=${ttlS} onChange=${(e: Event) => setTtlS(Number((e.target as HTMLSelectElement).value))} data-testid="watch-link-ttl">
      ${TTLS.map(([s, name]) => html`<option value=${s}>${name}</option>`)}
    </select></label>
    <button onClick=${create} data-action="create-watch-link">Create link</button>
    ${err && html`<p class="error" role="alert">${err}</p>`}
    ${created && html`<p>Copy it now; it is not shown again: <input readonly size="60" value=${created.url} data-testid="watch-link-url" onFocus=${(e: Event) => (e.target as HTMLInputElement).select()} />
      <button onClick=${() => void navigator.clipboard?.writeText(created.url)}>Copy</button></p>`}
    ${links.length > 0 && html`<table data-testid="watch-links">
      <thead><tr><th>Label</th><th>By</th><th>Expires</th><th>State</th><th></th></tr></thead>
      <tbody>${links.map((l) => html`<tr key=${l.linkId} data-link=${l.linkId}>
        <td>${l.label ?? ''}</td><td>${l.createdBy}</td><td>${new Date(l.expiresAt).toLocaleString()}</td>
        <td data-testid="watch-link-state">${l.state}</td>
        <td>${l.state === 'active' && html`<button onClick=${() => revoke(l.linkId)} data-action="revoke-watch-link">Revoke</button>`}</td>
      </tr>`)}</tbody>
    </table>`}
  </div>`;
}
