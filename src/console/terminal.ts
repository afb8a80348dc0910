/**
 * The session's terminal in the console: xterm.js over the SDK's Terminal (WebSocket + single-use ticket).
 * Watching by default; the person holding the session's control lease gets the input (the server decides
 * who holds input: a watcher's keystrokes are refused there, whatever this page does). xterm is loaded
 * only when a session page shows a terminal, so the first page stays small.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import type { Session, Terminal, TerminalView } from '../sdk/index.js';
import { errText } from './api.js';
import { html } from './ui.js';
import '@xterm/xterm/css/xterm.css';

export function TerminalPanel(props: { session: Session; inControl: boolean; readOnly?: boolean }) {
  const { session, inControl } = props;
  const ro = props.readOnly === true;
  const box = useRef<HTMLDivElement>(null);
  const [terms, setTerms] = useState<TerminalView[] | null>(null);
  const [termId, setTermId] = useState<string | null>(null);
  const [role, setRole] = useState<'controller' | 'watcher' | null>(null);
  const [err, setErr] = useState<string | null>(null);
  const conn = useRef<Terminal | null>(null);

  const refresh = async () => {
    try {
      const list = (await session.terminals.list()).filter((t) => t.state === 'running');
      setTerms(list);
      if (!termId && list[0]) setTermId(list[0].termId);
    } catch (e) {
      setErr(errText(e));
    }
  };
  useEffect(() => void refresh(), [session.id]);

  // Attach (watching unless this person holds the lease) and draw with xterm.js.
  useEffect(() => {
    if (!termId || !box.current) return;
    let closed = false;
    let xterm: import('@xterm/xterm').Terminal | null = null;
    void (async () => {
      const [{ Terminal: XTerm }, { FitAddon }] = await Promise.all([import('@xterm/xterm'), import('@xterm/addon-fit')]);
      if (closed) return;
      xterm = new XTerm({ convertEol: false, cursorBlink: inControl, fontSize: 13, scrollback: 2000 });
      const fit = new FitAddon();
      xterm.loadAddon(fit);
      xterm.open(box.current as HTMLDivElement);
      try {
        const t = await session.terminals.attach(termId, { mode: inControl ? 'control' : 'watch' });
        if (closed) return t.close();
        conn.current = t;
        if (inControl && t.role !== 'controller') t.takeControl();
        setRole(t.role);
        if (t.cols && t.rows) xterm.resize(t.cols, t.rows);
        xterm.onData((d) => {
          if (t.role === 'controller') t.write(d);
        });
        const timer = setInterval(() => setRole(t.role), 500);
        for await (const chunk of t) xterm.write(chunk);
        clearInterval(timer);
      } catch (e) {
        if (!closed) setErr(errText(e));
      }
    })();
    return () => {
      closed = true;
      conn.current?.close();
      conn.current = null;
      xterm?.dispose();
    };
  }, [termId, inControl]);

  const open = async () => {
    try {
      const t = await session.terminals.create({ cols: 100, rows: 28, mode: 'watch' });
      t.close();
      setTermId(t.termId);
      await refresh();
    } catch (e) {
      setErr(errText(e));
    }
  };

  return html`<div class="panel terminal">
    <h3>Terminal <small data-testid="terminal-role">${role === 'controller' ? 'you have the input' : role === 'watcher' ? 'watching (read-only)' : ''}</small></h3>
    ${err && html`<p class="error">${err}</p>`}
    ${terms !== null && !termId && html`<p class="sub">No terminal is open.${!ro && html` <button onClick=${open} data-action="open-terminal">Open one</button>`}</p>`}
    ${terms && terms.length > 1 && html`<select onChange=${(e: Event) => setTermId((e.target as HTMLSelectElement).value)}>${terms.map((t) => html`<option value=${t.termId} selected=${t.termId === termId}>${t.termId} ${t.argv.join(' ')}</option>`)}</select>`}
    <div ref=${box} class="xterm-box" data-testid="terminal"></div>
    ${!inControl && termId && html`<p class="sub">${ro ? 'Watch-only link: you see what is typed, and cannot type.' : 'Take control of the session to type.'}</p>`}
  </div>`;
}
