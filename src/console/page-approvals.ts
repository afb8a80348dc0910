/**
 * Approvals inbox: pending first, each with what a person needs to decide: the tool and its exact
 * arguments, its risk class, the plan step it claims and where it departs from that step's schema, the
 * Cedar policy (@id and @reason) that asked, the session's last calls, and the time left. Approve, or deny
 * with a reason the agent receives. Bulk approval is offered only for calls that are not irreversible.
 */
import { useEffect, useState } from 'preact/hooks';
import type { ApprovalView, AuditEntryView, PlanView, ToolDefinitionView } from '../sdk/index.js';
import { api, bg, errText } from './api.js';
import { callsOf } from './page-session.js';
import { useLive } from './page-sessions.js';
import { html } from './ui.js';
import { departures, policyReasons } from './decide.js';

function left(expiresAt: string | null, now: number): string {
  if (!expiresAt) return 'no expiry';
  const s = Math.round((Date.parse(expiresAt) - now) / 1000);
  if (s <= 0) return 'expired';
  return s >= 60 ? `${Math.floor(s / 60)}m ${s % 60}s left` : `${s}s left`;
}

interface Context {
  risks: Record<string, string>;
  reasons: Record<string, string>;
  plans: Record<string, PlanView>;
  audit: Record<string, AuditEntryView[]>;
}

export function ApprovalsPage(props: { onAuthError: (e: unknown) => void }) {
  const [list, setList] = useState<ApprovalView[] | null>(null);
  const [ctx, setCtx] = useState<Context>({ risks: {}, reasons: {}, plans: {}, audit: {} });
  const [err, setErr] = useState<string | null>(null);
  const [now, setNow] = useState(Date.now());
  const [denying, setDenying] = useState<string | null>(null);
  const [reason, setReason] = useState('');
  const [picked, setPicked] = useState<Set<string>>(new Set());

  const load = async (client = bg) => {
    try {
      const [all, tools, policy] = await Promise.all([client.approvals.list(), client.tools.definitions(), client.policy.get()]);
      setList(all);
      const pendingSessions = [...new Set(all.filter((a) => a.status === 'pending').map((a) => a.sessionId))];
      const plans: Record<string, PlanView> = {};
      const audit: Record<string, AuditEntryView[]> = {};
      await Promise.all(
        pendingSessions.map(async (sid) => {
          const [p, a] = await Promise.all([client.plans.get(sid).catch(() => null), client.audit.query({ sessionId: sid }).catch(() => [])]);
          if (p) plans[sid] = p;
          audit[sid] = a;
        }),
      );
      setCtx({ risks: Object.fromEntries(tools.map((t: ToolDefinitionView) => [t.name, t.risk])), reasons: policyReasons(policy.text), plans, audit });
      setErr(null);
    } catch (e) {
      props.onAuthError(e);
      setErr(errText(e));
    }
  };
  useEffect(() => void load(api), []);
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);
  useLive(() => load(), (a) => a.startsWith('approval.') || a === 'tool.approval');

  const decide = async (f: () => Promise<unknown>) => {
    try {
      await f();
      setDenying(null);
      setReason('');
      await load(api);
    } catch (e) {
      props.onAuthError(e);
      setErr(errText(e));
    }
  };

  if (list === null) return html`<section><h2>Approvals</h2>${err ? html`<p class="error">${err}</p>` : html`<p>Loading…</p>`}</section>`;
  const pending = list.filter((a) => a.status === 'pending').sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  const decided = list.filter((a) => a.status !== 'pending').sort((a, b) => (b.decidedAt ?? b.createdAt).localeCompare(a.decidedAt ?? a.createdAt));
  const bulkable = pending.filter((a) => ctx.risks[a.tool] !== 'irreversible');
  return html`<section>
    <h2>Approvals <small>${pending.length} pending</small></h2>
    ${err && html`<p class="error" role="alert">${err}</p>`}
    ${bulkable.length > 1 &&
    html`<p class="bulk">Bulk (calls that are not irreversible only): <button disabled=${picked.size === 0} onClick=${() => decide(async () => { for (const id of picked) await api.approvals.approve(id); setPicked(new Set()); })}>Approve ${picked.size} selected</button></p>`}
    ${pending.length === 0 && html`<p class="sub">Nothing is waiting for a decision.</p>`}
    ${pending.map((a) => {
      const risk = ctx.risks[a.tool] ?? 'unknown';
      const plan = ctx.plans[a.sessionId];
      const steps = (plan?.plan?.steps ?? []) as Array<{ id: string; tool: string; arguments: unknown }>;
      const claimed = a.step ? steps.find((st) => st.id === a.step) : undefined;
      const off = claimed ? (claimed.tool !== a.tool ? [`the step is a ${claimed.tool} call, not ${a.tool}`] : departures(claimed.arguments, a.args)) : [];
      const last = callsOf(ctx.audit[a.sessionId] ?? []).slice(0, 5);
      return html`<article class="approval" key=${a.id} data-approval=${a.id}>
        <header>
          ${risk !== 'irreversible' && bulkable.length > 1 && html`<input type="checkbox" checked=${picked.has(a.id)} onChange=${() => setPicked((p) => { const n = new Set(p); if (n.has(a.id)) n.delete(a.id); else n.add(a.id); return n; })} />`}
          <strong>${a.tool}</strong> <span class=${`badge risk-${risk}`}>${risk}</span>
          <a href=${`#/sessions/${a.sessionId}`}>${a.sessionId}</a>
          <span class="time-left" data-testid="time-left">${left(a.expiresAt, now)}</span>
        </header>
        <pre class="args" data-testid="args">${JSON.stringify(a.args, null, 2)}</pre>
        ${a.screenshotUrl && html`<figure class="screen"><img src=${a.screenshotUrl} alt="the screen when the call was parked; a red ring marks the point it would act on" data-testid="approval-screenshot" /><figcaption>The screen when the call was parked; the red ring marks where it would act.</figcaption></figure>`}
        <dl>
          <dt>Asked by policy</dt><dd>${a.policyIds.map((id) => html`<div><code>@id("${id}")</code> ${ctx.reasons[id] ? html`— ${ctx.reasons[id]}` : ''}</div>`)}</dd>
          <dt>Plan step</dt><dd>${a.step ? html`claims <code>${a.step}</code>${claimed ? (off.length ? html`<ul class="departs">${off.map((o) => html`<li>${o}</li>`)}</ul>` : html` — matches the step's schema`) : ' — no such step in the plan'}` : plan?.plan ? 'claims no step' : 'no plan'}</dd>
          <dt>Requested</dt><dd>${new Date(a.createdAt).toLocaleString()} by ${a.requestedBy}</dd>
          <dt>Last calls</dt><dd>${last.length ? html`<ul>${last.map((c) => html`<li><code>${c.subject ?? c.tool}</code> → ${c.outcome}</li>`)}</ul>` : '-'}</dd>
        </dl>
        <div class="decide">
          <button class="approve" onClick=${() => decide(() => api.approvals.approve(a.id))} data-action="approve">Approve</button>
          ${denying === a.id
            ? html`<form onSubmit=${(e: Event) => { e.preventDefault(); if (reason.trim()) void decide(() => api.approvals.deny(a.id, reason.trim())); }}>
                <input name="reason" placeholder="Reason (the agent receives it)" value=${reason} onInput=${(e: Event) => setReason((e.target as HTMLInputElement).value)} required />
                <button type="submit" data-action="confirm-deny">Deny</button>
              </form>`
            : html`<button class="deny" onClick=${() => setDenying(a.id)} data-action="deny">Deny…</button>`}
        </div>
      </article>`;
    })}
    <h3>History</h3>
    <table class="history" data-testid="history">
      <thead><tr><th>Decided</th><th>Tool</th><th>Session</th><th>Decision</th><th>By</th><th>Reason</th></tr></thead>
      <tbody>${decided.map((a) => html`<tr key=${a.id}><td>${a.decidedAt ? new Date(a.decidedAt).toLocaleString() : '-'}</td><td>${a.tool}</td><td>${a.sessionId}</td><td>${a.status}</td><td>${a.decidedBy ?? '-'}</td><td>${a.reason ?? ''}</td></tr>`)}</tbody>
    </table>
  </section>`;
}
