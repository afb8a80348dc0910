/**
 * The desktop inside a session's machine (issue 11): one background process (DESKTOP_EXEC_ID, listed by
 * `berth ps`) runs the X display, the window manager and the VNC server, and ends when any of them ends.
 * It is part of the machine like any process: hibernate, wake and fork keep it, windows and all. The
 * engine starts it once, at create, and waits until the display answers and the VNC port listens.
 */
import {
  DESKTOP_DISPLAY,
  DESKTOP_EXEC_ID,
  DESKTOP_VNC_PORT,
  SandboxError,
  type CallOptions,
  type DesktopSettings,
  type ExecHandle,
  type SandboxDriver,
} from '../core/index.js';

/** Seconds the display and the VNC server get to come up (generous: TCG on a busy host is slow). */
const READY_DEADLINE_S = 150;

/** A shell function, true when the VNC server sends its RFB greeting within $1 seconds (default 5). */
const GREETS_FN = `greets() { (exec 3<>/dev/tcp/127.0.0.1/${DESKTOP_VNC_PORT} && read -r -t "\${1:-5}" -n 3 g <&3 && [ "$g" = RFB ]) 2>/dev/null; }`;

/**
 * bash, not sh: `wait -n PIDS` ends the script (and so the process record) when the first of the three exits.
 * Xvfb listens on the unix socket only; -ac: no X access control, since nothing but the machine's own
 * processes can reach the socket; -r: no key autorepeat, since a key whose release arrives late on a loaded
 * host repeated ("Grace    Hopper" for an approved "Grace Hopper"), and typed text must be the call's text.
 * x11vnc: loopback only, no password (only Berth's port channel reaches it), shared (the console's watchers
 * and its controller at once), no bell, no XDAMAGE (unreliable on Xvfb),
 * -threads: under gVisor its single-threaded loop never accepts a client (it spins, and a connection waits
 * forever for the server's greeting); with a thread per client it greets in well under a second.
 */
const DESKTOP_SCRIPT = `
set -u
W="$1"; H="$2"
mkdir -p /tmp/.X11-unix && chmod 1777 /tmp/.X11-unix
Xvfb ${DESKTOP_DISPLAY} -screen 0 "\${W}x\${H}x24" -nolisten tcp -ac -dpi 96 -r &
x=$!
# Deadlines, not try counts: under QEMU's TCG on a loaded host Xvfb took 83 s once to listen.
end=$((SECONDS + ${READY_DEADLINE_S}))
until xdpyinfo -display ${DESKTOP_DISPLAY} >/dev/null 2>&1; do
  if ! kill -0 "$x" 2>/dev/null || [ "$SECONDS" -ge "$end" ]; then echo "Xvfb did not start" >&2; exit 1; fi
  sleep 0.1
done
export DISPLAY=${DESKTOP_DISPLAY}
openbox &
w=$!
# x11vnc in a loop, under a watchdog: after a restore it has been seen (rarely, on a loaded host) to accept
# connections and never greet again. Probed every 5 s once it has greeted; 2 silent probes in a row (or
# 12 before it ever greeted) and it is killed, and the loop starts a new one. Viewers then reconnect.
${GREETS_FN}
(while :; do
  x11vnc -display ${DESKTOP_DISPLAY} -rfbport ${DESKTOP_VNC_PORT} -localhost -forever -shared -threads -nopw -noxdamage -nobell -quiet -noxrecord &
  p=$!; up=0; bad=0
  while sleep 5 && kill -0 "$p" 2>/dev/null; do
    if greets 3; then up=1; bad=0; else bad=$((bad + 1)); fi
    if [ "$bad" -ge $((up ? 2 : 12)) ]; then echo "x11vnc stopped greeting: restarted" >&2; kill -9 "$p"; fi
  done
  wait "$p"; sleep 0.5
done) &
v=$!
(sleep 1; xsetroot -solid '#3b4252') &
wait -n "$x" "$w" "$v"
exit $?
`;

/** Waits for the display to answer and the VNC server to greet (at most READY_DEADLINE_S). */
const READY_SCRIPT = `
${GREETS_FN}
end=$((SECONDS + ${READY_DEADLINE_S}))
while [ "$SECONDS" -lt "$end" ]; do
  # Ready means greeting: a port that accepts is not enough (x11vnc without -threads accepted and never spoke).
  if xdpyinfo >/dev/null 2>&1 && greets; then exit 0; fi
  sleep 0.05
done
echo "the desktop did not start: the display or the VNC server is not answering" >&2
exit 1
`;

const DESKTOP_SCRIPT_PATH = '/run/berth/desktop.sh';

async function* once(data: Uint8Array): AsyncIterable<Uint8Array> {
  yield data;
}

async function drain(h: ExecHandle): Promise<{ code: number; stderr: string }> {
  let stderr = '';
  for await (const ev of h) if (ev.type === 'stderr') stderr += Buffer.from(ev.data).toString();
  const exit = await h.wait();
  return { code: exit.code, stderr };
}

/** Starts the desktop in a freshly created machine and waits until it is ready. */
export async function startDesktop(d: SandboxDriver, sandboxId: string, screen: DesktopSettings, opts: CallOptions = {}): Promise<void> {
  // A file, so `berth ps` shows one line: /bin/bash /run/berth/desktop.sh 1280 800.
  await d.writeFile(sandboxId, DESKTOP_SCRIPT_PATH, once(new TextEncoder().encode(DESKTOP_SCRIPT)), { ...opts, mode: 0o755 });
  await d.startProcess(sandboxId, DESKTOP_EXEC_ID, { argv: ['/bin/bash', DESKTOP_SCRIPT_PATH, String(screen.width), String(screen.height)], stdin: false }, opts);
  const ready = await drain(await d.exec(sandboxId, { argv: ['/bin/bash', '-c', READY_SCRIPT], env: { DISPLAY: DESKTOP_DISPLAY }, timeoutMs: (READY_DEADLINE_S + 30) * 1000 }, opts));
  if (ready.code !== 0) {
    const procs = await d.listProcesses(sandboxId, opts).catch(() => []);
    const p = procs.find((x) => x.execId === DESKTOP_EXEC_ID);
    throw new SandboxError(`${ready.stderr.trim() || 'the desktop did not start'}${p?.exit ? ` (its process exited with ${p.exit.code})` : ''}`);
  }
}

/** Greets within 5 s, or x11vnc is killed (its loop in DESKTOP_SCRIPT starts a new one) and awaited again. */
const REVIVE_SCRIPT = `
${GREETS_FN}
greets && exit 0
pkill -x x11vnc
end=$((SECONDS + 30))
while [ "$SECONDS" -lt "$end" ]; do greets && exit 0; sleep 0.2; done
echo "the VNC server does not greet" >&2
exit 1
`;

/**
 * After a restore (wake): x11vnc has been seen, rarely, to accept connections and never greet again. Checks
 * and, if so, restarts it. Best effort: the machine itself is fine either way, so a failure is only returned.
 */
export async function reviveVnc(d: SandboxDriver, sandboxId: string, opts: CallOptions = {}): Promise<string | null> {
  const r = await drain(await d.exec(sandboxId, { argv: ['/bin/bash', '-c', REVIVE_SCRIPT], timeoutMs: 60_000 }, opts));
  return r.code === 0 ? null : r.stderr.trim() || `exit ${r.code}`;
}
