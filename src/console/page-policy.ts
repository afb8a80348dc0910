/** Policy: the tenant's Cedar, editable; validated as you type (nothing saved) and refused inline if invalid. */
import { useEffect, useState } from 'preact/hooks';
import type { PolicyValidationView, PolicyView } from '../sdk/index.js';
import { api, errText } from './api.js';
import { html } from './ui.js';

export function PolicyPage(props: { onAuthError: (e: unknown) => void }) {
  const [policy, setPolicy] = useState<PolicyView | null>(null);
  const [text, setText] = useState('');
  const [check, setCheck] = useState<PolicyValidationView | null>(null);
  const [msg, setMsg] = useState<string | null>(null);

  useEffect(() => {
    void api.policy.get().then(
      (p) => {
        setPolicy(p);
        setText(p.text);
      },
      (e) => {
        props.onAuthError(e);
        setMsg(errText(e));
      },
    );
  }, []);
  useEffect(() => {
    if (!policy) return;
    const t = setTimeout(() => void api.console.validatePolicy(text).then(setCheck, (e) => setMsg(errText(e))), 300);
    return () => clearTimeout(t);
  }, [text, policy]);

  const save = async () => {
    try {
      const p = await api.policy.set(text);
      setPolicy(p);
      setMsg(`Saved version ${p.version}.`);
    } catch (e) {
      props.onAuthError(e);
      setMsg(errText(e));
    }
  };
  if (!policy) return html`<section><h2>Policy</h2><p>${msg ?? 'Loading…'}</p></section>`;
  return html`<section>
    <h2>Policy <small>version ${policy.version}${policy.isDefault ? ' (default)' : ''}${policy.updatedBy ? `, by ${policy.updatedBy}` : ''}</small></h2>
    <textarea class="cedar" spellcheck="false" value=${text} onInput=${(e: Event) => setText((e.target as HTMLTextAreaElement).value)} data-testid="policy-text"></textarea>
    <div class="check" data-testid="policy-check">
      ${check === null ? '' : check.ok ? html`<span class="badge good">valid</span>${check.warnings.map((w) => html`<div class="warn">${w}</div>`)}` : html`<span class="badge bad">invalid</span><ul class="error">${check.errors.map((x) => html`<li>${x}</li>`)}</ul>`}
    </div>
    <button onClick=${save} disabled=${!check?.ok || text === policy.text} data-action="save-policy">Save</button>
    ${msg && html`<p class="sub" role="status">${msg}</p>`}
  </section>`;
}
