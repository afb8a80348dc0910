/**
 * A desktop session's screen, live, in the console: noVNC over the server's VNC bridge (GET …/desktop/vnc),
 * on the WebSocket the SDK opens with a single-use ticket. View-only unless this person holds the session's
 * control lease, the same lease as terminals ("Take control" / "Hand back" above). The server decides who
 * may act: it drops a non-holder's input whatever this page does; viewOnly only keeps the page from sending it.
 * noVNC is loaded only when a session page shows a desktop, so the first page stays small.
 */
import type RFB from '@novnc/novnc';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { Session } from '../sdk/index.js';
import { errText } from './api.js';
import { html } from './ui.js';

type Status = 'connecting' | 'connected' | 'disconnected';

export function DesktopPanel(props: { session: Session; screen: { width: number; height: number }; inControl: boolean; readOnly?: boolean }) {
  const { session, screen, inControl } = props;
  const ro = props.readOnly === true;
  const box = useRef<HTMLDivElement>(null);
  const rfb = useRef<RFB | null>(null);
  const [status, setStatus] = useState<Status>('connecting');
  const [err, setErr] = useState<string | null>(null);
  const [attempt, setAttempt] = useState(0);
  const control = useRef(inControl);
  control.current = inControl;

  useEffect(() => {
    if (!box.current) return;
    let gone = false;
    setStatus('connecting');
    setErr(null);
    void (async () => {
      try {
        const { default: Rfb } = await import('@novnc/novnc');
        if (gone) return;
        // Opened after noVNC is loaded and handed over still connecting, so no frame comes before its reader.
        const ws = await session.desktopView.open();
        if (gone || !box.current) return void ws.close();
        const r = new Rfb(box.current, ws, { shared: true });
        r.viewOnly = !control.current;
        r.scaleViewport = true;
        r.resizeSession = false; // the screen is the session's, fixed at create: the agent works in it too
        r.background = 'transparent';
        r.addEventListener('connect', () => !gone && setStatus('connected'));
        r.addEventListener('disconnect', (e) => {
          if (gone) return;
          setStatus('disconnected');
          if (!(e as CustomEvent<{ clean: boolean }>).detail?.clean) setErr('the connection to the desktop was lost');
        });
        rfb.current = r;
      } catch (e) {
        if (!gone) {
          setStatus('disconnected');
          setErr(errText(e));
        }
      }
    })();
    return () => {
      gone = true;
      rfb.current?.disconnect();
      rfb.current = null;
    };
  }, [session.id, attempt]);

  useEffect(() => {
    if (rfb.current) rfb.current.viewOnly = !inControl;
  }, [inControl]);

  const mode = inControl ? 'you have control' : 'view only';
  return html`<div class="panel desktop">
    <h3>Desktop <small data-testid="desktop-mode" data-status=${status}>${status === 'connected' ? mode : status}</small></h3>
    ${err && html`<p class="error">${err}</p>`}
    ${status === 'disconnected' && html`<button onClick=${() => setAttempt((n) => n + 1)} data-action="desktop-reconnect">Reconnect</button>`}
    <div ref=${box} class="vnc-box" data-testid="desktop" style=${`aspect-ratio: ${screen.width} / ${screen.height}`}></div>
    ${!inControl && html`<p class="sub">${ro ? 'Watch-only link: you see the desktop, and cannot act on it.' : 'Take control of the session to use the mouse and keyboard; the agent waits meanwhile.'}</p>`}
  </div>`;
}
