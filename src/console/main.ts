/**
 * The Berth web console: sign-in, then Sessions, a Session, Approvals, Audit and Policy. Hash routes
 * (#/sessions, #/sessions/ses_…, #/approvals, #/audit, #/policy). A one-time sign-in link arrives as
 * #signin=CODE: the code is exchanged for the cookie and the URL replaced at once. A watch-only link arrives
 * as #watch=TOKEN: the same, and the console then shows that one session's page, read-only, and nothing else
 * (the server refuses the watcher everything else whatever this page does).
 */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { ConsoleMeView } from '../sdk/index.js';
import { api, errText, startEvents, stopEvents } from './api.js';
import { html } from './ui.js';
import { SessionsPage } from './page-sessions.js';
import { SessionPage } from './page-session.js';
import { ApprovalsPage } from './page-approvals.js';
import { AuditPage } from './page-audit.js';
import { PolicyPage } from './page-policy.js';
import './style.css';

function useRoute(): string {
  const [r, setR] = useState(location.hash || '#/sessions');
  useEffect(() => {
    const on = () => setR(location.hash || '#/sessions');
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return r;
}

function SignIn(props: { onSignedIn: (m: ConsoleMeView) => void; message: string | null }) {
  const [token, setToken] = useState('');
  const [err, setErr] = useState<string | null>(props.message);
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      props.onSignedIn(await api.console.signIn({ token: token.trim() }));
    } catch (x) {
      setErr(errText(x));
    }
  };
  return html`<main class="signin">
    <h1>Berth console</h1>
    <p>Run <code>berth console</code> for a one-time sign-in link, or sign in with a tenant key or the root token.</p>
    <form onSubmit=${submit}>
      <input type="password" name="token" autocomplete="off" placeholder="btk_… or btr_…" value=${token} onInput=${(e: Event) => setToken((e.target as HTMLInputElement).value)} />
      <button type="submit">Sign in</button>
    </form>
    ${err && html`<p class="error" role="alert" data-testid="signin-error">${err}</p>`}
  </main>`;
}

function App() {
  const [me, setMe] = useState<ConsoleMeView | null>(null);
  const [checking, setChecking] = useState(true);
  const [message, setMessage] = useState<string | null>(null);
  const route = useRoute();

  const signedOut = (why: string | null) => {
    stopEvents();
    setMe(null);
    setMessage(why);
  };

  useEffect(() => {
    void (async () => {
      const m = /^#signin=([A-Za-z0-9_-]+)$/.exec(location.hash);
      const w = /^#watch=(bwl_[A-Za-z0-9_-]+)$/.exec(location.hash);
      if (w) {
        history.replaceState(null, '', `${location.pathname}#/watch`);
        try {
          setMe(await api.console.signIn({ watch: w[1] as string }));
        } catch (e) {
          setMessage(errText(e));
        }
      } else if (m) {
        // The code leaves the address bar (and history) before anything else happens.
        history.replaceState(null, '', `${location.pathname}#/sessions`);
        try {
          setMe(await api.console.signIn({ code: m[1] as string }));
        } catch (e) {
          setMessage(errText(e));
        }
      } else {
        try {
          setMe(await api.console.me());
        } catch {
          /* not signed in */
        }
      }
      setChecking(false);
    })();
  }, []);

  useEffect(() => {
    if (!me) return;
    startEvents((e) => {
      if ((e as { code?: string }).code === 'unauthenticated') signedOut('Your console session ended (idle logoff or sign-out). Sign in again.');
      else setTimeout(() => me && startEvents(() => undefined), 2000);
    });
    // Idle logoff happens on the server; the page notices at the next request, or here, a moment after it.
    const t = setInterval(async () => {
      try {
        await api.console.me();
      } catch (e) {
        if ((e as { code?: string }).code === 'unauthenticated') signedOut('Signed out after inactivity. Sign in again.');
      }
    }, Math.max(5_000, (me.idleLogoffS * 1000) / 4));
    return () => clearInterval(t);
  }, [me]);

  if (checking) return html`<main class="loading">Loading…</main>`;
  if (!me) return html`<${SignIn} onSignedIn=${(m: ConsoleMeView) => { setMessage(null); setMe(m); }} message=${message} />`;

  const signOut = async () => {
    await api.console.signOut().catch(() => undefined);
    signedOut('Signed out.');
  };
  const onAuthError = (e: unknown) => {
    if ((e as { code?: string }).code === 'unauthenticated') signedOut('Your console session ended. Sign in again.');
  };
  if (me.watchSessionId) {
    return html`<div class="shell">
      <header>
        <strong>Berth</strong>
        <span class="who" data-testid="who">watch-only view of ${me.watchSessionId}</span>
        <button class="link" onClick=${signOut}>Sign out</button>
      </header>
      <main><${SessionPage} id=${me.watchSessionId} me=${me} onAuthError=${onAuthError} readOnly=${true} /></main>
    </div>`;
  }
  const nav = (href: string, label: string) => html`<a href=${href} class=${route.startsWith(href) ? 'active' : ''}>${label}</a>`;
  let page;
  const sm = /^#\/sessions\/([a-z]{3}_[0-9a-z]+)/.exec(route);
  if (sm) page = html`<${SessionPage} id=${sm[1]} me=${me} onAuthError=${onAuthError} />`;
  else if (route.startsWith('#/approvals')) page = html`<${ApprovalsPage} onAuthError=${onAuthError} />`;
  else if (route.startsWith('#/audit')) page = html`<${AuditPage} me=${me} onAuthError=${onAuthError} />`;
  else if (route.startsWith('#/policy')) page = html`<${PolicyPage} onAuthError=${onAuthError} />`;
  else page = html`<${SessionsPage} onAuthError=${onAuthError} />`;
  return html`<div class="shell">
    <header>
      <strong>Berth</strong>
      <nav>${nav('#/sessions', 'Sessions')} ${nav('#/approvals', 'Approvals')} ${nav('#/audit', 'Audit')} ${nav('#/policy', 'Policy')}</nav>
      <span class="who" data-testid="who">${me.principal} · ${me.handle}</span>
      <button class="link" onClick=${signOut}>Sign out</button>
    </header>
    <main>${page}</main>
  </div>`;
}

render(html`<${App} />`, document.getElementById('app') as HTMLElement);
