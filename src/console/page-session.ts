/**
 * One session: state and actions, the control lease (take control / hand back), its plan with progress,
 * its desktop (when it has one) and terminal, watch-only links to share it, and a live timeline of its tool calls (each stage's verdict,
 * arguments, result, duration).
 */
import { useEffect, useState } from 'preact/hooks';
import type { AuditEntryView, ConsoleMeView, ControlView, PlanView, Session } from '../sdk/index.js';
import { ago, api, bg, bytes, errText } from './api.js';
import { useLive } from './page-sessions.js';
import { confirmAction, html } from './ui.js';
import { TerminalPanel } from './terminal.js';
import { DesktopPanel } from './desktop.js';
import { SharePanel } from './share.js';

/** Tool calls of a session from its audit entries: one row per callId, its stage verdicts in order. */
export interface CallRow {
  callId: string;
  tool: string;
  subject: string | null;
  startedAt: number;
  endedAt: number;
  stages: Array<{ stage: string; verdict: string; detail: string; code?: string }>;
  outcome: string;
  result?: unknown;
}

export function callsOf(entries: AuditEntryView[]): CallRow[] {
  const calls = new Map<string, CallRow>();
  for (const e of entries) {
    if (!e.action.startsWith('tool.')) continue;
    const d = e.data as Record<string, unknown>;
    const id = typeof d.callId === 'string' ? d.callId : `seq${e.seq}`;
    let c = calls.get(id);
    if (!c) {
      c = { callId: id, tool: String(d.tool ?? '?'), subject: typeof d.subject === 'string' ? d.subject : null, startedAt: e.tsMs, endedAt: e.tsMs, stages: [], outcome: 'running' };
      calls.set(id, c);
    }
    if (typeof d.subject === 'string') c.subject = d.subject;
    c.endedAt = e.tsMs;
    c.stages.push({ stage: e.action.slice(5), verdict: e.outcome, detail: String(d.detail ?? ''), ...(typeof d.code === 'string' ? { code: d.code } : {}) });
    if (e.outcome === 'deny') c.outcome = typeof d.code === 'string' ? d.code : 'denied';
    else if (e.outcome === 'ask') c.outcome = 'pending approval';
    else if (e.action === 'tool.result') c.outcome = e.outcome === 'skip' ? 'not run: decided again' : 'ran';
    if ('result' in d) c.result = d.result;
  }
  return [...calls.values()].reverse();
}

/** readOnly: a watch-only link's view (no actions; the server refuses them anyway). */
export function SessionPage(props: { id: string; me: ConsoleMeView; onAuthError: (e: unknown) => void; readOnly?: boolean }) {
  const ro = props.readOnly === true;
  const { id } = props;
  const [s, setS] = useState<Session | null>(null);
  const [plan, setPlan] = useState<PlanView | null>(null);
  const [control, setControl] = useState<ControlView | null>(null);
  const [entries, setEntries] = useState<AuditEntryView[]>([]);
  const [err, setErr] = useState<string | null>(null);

  const load = async (client = bg) => {
    try {
      const [sess, pl, ctl, audit] = await Promise.all([client.sessions.get(id), client.plans.get(id), client.control.get(id), client.audit.query({ sessionId: id })]);
      setS(sess);
      setPlan(pl);
      setControl(ctl);
      setEntries(audit);
      setErr(null);
    } catch (e) {
      props.onAuthError(e);
      setErr(errText(e));
    }
  };
  useEffect(() => void load(api), [id]);
  useLive(() => load(), (_a, sid) => sid === id, [id]);

  const mine = !ro && control?.held && control.holder?.endsWith(`(${props.me.handle})`);
  // While this person holds the lease, what they do on the page keeps it alive (at most one renewal per 30 s).
  useEffect(() => {
    if (!mine) return;
    let last = Date.now();
    const renew = () => {
      if (Date.now() - last < 30_000) return;
      last = Date.now();
      void api.control.take(id).then(setControl, () => undefined);
    };
    // Capture phase: the desktop view (noVNC) stops the events it takes from bubbling.
    window.addEventListener('keydown', renew, true);
    window.addEventListener('pointerdown', renew, true);
    return () => {
      window.removeEventListener('keydown', renew, true);
      window.removeEventListener('pointerdown', renew, true);
    };
  }, [mine, id]);

  const run = async (f: () => Promise<unknown>) => {
    try {
      await f();
      await load(api);
    } catch (e) {
      props.onAuthError(e);
      setErr(errText(e));
    }
  };
  if (!s) return html`<section><h2>${id}</h2>${err ? html`<p class="error" role="alert">${err}</p>` : html`<p>Loading…</p>`}</section>`;
  const i = s.info;
  const calls = callsOf(entries);
  const steps = (plan?.plan?.steps ?? []) as Array<{ id: string; tool: string; arguments: unknown }>;
  const cursor = plan?.state?.cursor ?? 0;
  return html`<section>
    <h2>${i.id} <span class=${`state ${i.state}`} data-testid="session-state">${i.state}</span></h2>
    <p class="sub">${i.objective ?? 'no objective'} · ${i.backend} · up ${ago(i.createdAt)} · CPU ${i.metering.cpuSeconds.toFixed(1)} s · memory ${bytes(i.metering.peakMemoryBytes)} · egress ${bytes(i.metering.bytesOut)}</p>
    ${err && html`<p class="error" role="alert">${err}</p>`}
    <div class="panel control" data-testid="control">
      ${control?.held
        ? html`<p><strong data-testid="control-holder">${mine ? 'You have control' : `${control.holder} has control`}</strong> since ${new Date(control.since as string).toLocaleTimeString()} · lapses ${new Date(control.expiresAt as string).toLocaleTimeString()} without activity. The agent's calls wait (human_control).</p>
            ${ro ? '' : mine ? html`<button onClick=${() => run(() => api.control.release(id))} data-action="hand-back">Hand back</button>` : html`<button onClick=${() => confirmAction(`End ${control.holder}'s lease?`) && run(() => api.control.release(id, { force: true }))}>Force hand back</button>`}`
        : html`<p>The agent has control.</p>${!ro && html`<button onClick=${() => run(() => api.control.take(id))} data-action="take-control" disabled=${i.state === 'terminated'}>Take control</button>`}`}
      ${!ro && i.state === 'running' && html`<button onClick=${() => run(() => s.pause())}>Pause</button> <button onClick=${() => run(() => s.snapshot())}>Snapshot</button>`}
      ${!ro && i.state === 'paused' && html`<button onClick=${() => run(() => s.resume())}>Resume</button>`}
    </div>
    <div class="panel">
      <h3>Plan</h3>
      ${plan?.plan
        ? html`<p>${String(plan.plan.objective)} <small>(${Math.min(cursor, steps.length)}/${steps.length} steps)</small></p>
            <progress max=${steps.length} value=${Math.min(cursor, steps.length)}></progress>
            <ol class="plan">${steps.map((st, n) => html`<li class=${n < cursor ? 'done' : n === cursor ? 'next' : ''}><code>${st.id}</code> ${st.tool} <span class="sub">${JSON.stringify(st.arguments)}</span></li>`)}</ol>`
        : html`<p class="sub">No plan set.</p>`}
    </div>
    ${i.state === 'running' && i.settings.desktop && html`<${DesktopPanel} session=${s} screen=${i.settings.desktop} inControl=${!!mine} readOnly=${ro} />`}
    ${i.state === 'running' && html`<${TerminalPanel} session=${s} inControl=${!!mine} readOnly=${ro} />`}
    ${!ro && i.state !== 'terminated' && html`<${SharePanel} sessionId=${i.id} onAuthError=${props.onAuthError} />`}
    <div class="panel">
      <h3>Tool calls <small>(live)</small></h3>
      <table class="timeline" data-testid="timeline">
        <thead><tr><th>When</th><th>Call</th><th>Stages</th><th>Outcome</th><th>Took</th></tr></thead>
        <tbody>
          ${calls.map(
            (c) => html`<tr key=${c.callId} data-call=${c.callId}>
              <td>${new Date(c.startedAt).toLocaleTimeString()}</td>
              <td><code>${c.subject ?? c.tool}</code></td>
              <td>${c.stages.map((st) => html`<span class=${`verdict ${st.verdict}`} title=${st.detail}>${st.stage}: ${st.verdict}${st.code ? ` (${st.code})` : ''}</span> `)}</td>
              <td data-testid="call-outcome">${c.outcome}${c.result !== undefined ? html`<pre>${JSON.stringify(c.result, null, 1).slice(0, 400)}</pre>` : ''}</td>
              <td>${c.endedAt - c.startedAt} ms</td>
            </tr>`,
          )}
        </tbody>
      </table>
    </div>
  </section>`;
}
