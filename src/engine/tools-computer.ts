/**
 * The `computer` tool's executor (issue 11): each action is one exec in the sandbox of xdotool (input) and
 * scrot (screenshots) against the session's X display, followed, unless the call says screenshot: false,
 * by a screenshot taken once the screen settles (two shots SETTLE_MS apart are equal, or SETTLE_TRIES
 * passed). Arguments were checked by the gate (schema, points inside the screenshot); here they are mapped
 * from screenshot pixels to screen pixels. Text and key names reach xdotool as argv, never through a shell.
 */
import { randomBytes } from 'node:crypto';
import { DESKTOP_DISPLAY, SCREENSHOT_MAX_WIDTH, pngInfo, sha256Hex, type DesktopSettings, type ExecHandle } from '../core/index.js';
import { CLICK_ACTIONS, screenshotSize, type ComputerAction } from '../policy/index.js';
import type { ExecContext, ExecOutcome } from './executor.js';
import { decodePng, encodePng, scaleDown } from './png.js';

/**
 * After an action: wait SETTLE_MS, shoot, and shoot again every SETTLE_MS until two shots are equal, at most
 * SETTLE_TRIES times (a blinking cursor never settles, so the bound matters). A plain screenshot is one shot.
 */
const SETTLE_MS = 120;
const SETTLE_TRIES = 3;
/** xdotool's delay between typed characters, ms (its default, 12, drops characters under load). */
const TYPE_DELAY_MS = 20;
/** Longest text typed by one xdotool command (xdotool is given the rest in further commands). */
const TYPE_CHUNK = 200;

/**
 * Runs "$@" as xdotool command lines separated by $SEP (one xdotool each: `type` takes every argument after
 * it as text, so nothing can follow it in the same command), then prints the settled screen as PNG on
 * stdout when $SHOT is 1 (scrot -a X,Y,W,H when $AREA is set). bash: `cmp` of two shots decides "settled".
 */
const ACTION_SCRIPT = `
set -e
cmd=()
for a in "$@"; do
  if [ "$a" = "$SEP" ]; then
    if [ "\${#cmd[@]}" -gt 0 ]; then xdotool "\${cmd[@]}"; fi
    cmd=()
  else
    cmd+=("$a")
  fi
done
if [ "\${#cmd[@]}" -gt 0 ]; then xdotool "\${cmd[@]}"; fi
[ "$SHOT" = 1 ] || exit 0
area=(); [ -n "$AREA" ] && area=(-a "$AREA")
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
[ "$TRIES" -gt 0 ] && sleep "$SETTLE"
scrot -o "\${area[@]}" "$d/a.png"
for _ in $(seq "$TRIES"); do
  sleep "$SETTLE"
  scrot -o "\${area[@]}" "$d/b.png"
  if cmp -s "$d/a.png" "$d/b.png"; then break; fi
  mv "$d/b.png" "$d/a.png"
done
cat "$d/a.png"
`;

/** Separates xdotool command lines in Run.xdo; ACTION_SCRIPT gets a random one per call as $SEP. */
const NEXT = '\u0000next';

interface Run {
  /** xdotool arguments (empty: none); NEXT between two command lines. */
  xdo: string[];
  shot: boolean;
  /** Screen area for the shot ("x,y,w,h"), zoom only. */
  area?: string;
  /** Seconds the action itself may take beyond the default (wait, hold_key). */
  extraS?: number;
}

async function collect(h: ExecHandle): Promise<{ code: number; stdout: Buffer; stderr: string }> {
  const out: Uint8Array[] = [];
  let err = '';
  for await (const ev of h) {
    if (ev.type === 'stdout') out.push(ev.data);
    else if (ev.type === 'stderr') err += Buffer.from(ev.data).toString();
  }
  return { code: (await h.wait()).code, stdout: Buffer.concat(out), stderr: err };
}

const BUTTONS: Record<string, string> = { left_click: '1', right_click: '3', middle_click: '2', double_click: '1', triple_click: '1' };
const REPEAT: Record<string, string> = { double_click: '2', triple_click: '3' };
const WHEEL: Record<string, string> = { up: '4', down: '5', left: '6', right: '7' };

/** Modifier names given in `text` with a click or a scroll ("shift", "ctrl+alt"). */
const modifiers = (text: unknown): string[] => (typeof text === 'string' ? text.split(/[+\s]+/).filter(Boolean) : []);

function plan(action: ComputerAction, a: Record<string, unknown>, toScreen: (p: unknown) => string[]): Run {
  const shot = a.screenshot !== false;
  // No --sync: this xdotool waits for the pointer to leave where it was, so a click where the pointer already
  // is (the second click into the same field) hung about 16 s. Not needed for order either: the motion and the
  // click travel on one X connection, and the server applies its requests in order.
  const at = a.coordinate === undefined ? [] : ['mousemove', ...toScreen(a.coordinate)];
  const held = (mods: string[], inner: string[]) => (mods.length ? ['keydown', mods.join('+'), ...inner, 'keyup', mods.join('+')] : inner);
  if ((CLICK_ACTIONS as readonly string[]).includes(action)) {
    const repeat = REPEAT[action] ? ['--repeat', REPEAT[action]!, '--delay', '80'] : [];
    return { xdo: held(modifiers(a.text), [...at, 'click', ...repeat, BUTTONS[action]!]), shot };
  }
  switch (action) {
    case 'screenshot':
      return { xdo: [], shot: true };
    case 'mouse_move':
      return { xdo: at, shot };
    case 'left_click_drag':
      return { xdo: ['mousemove', ...toScreen(a.start_coordinate), 'mousedown', '1', 'mousemove', ...toScreen(a.coordinate), 'mouseup', '1'], shot };
    case 'left_mouse_down':
      return { xdo: [...at, 'mousedown', '1'], shot };
    case 'left_mouse_up':
      return { xdo: [...at, 'mouseup', '1'], shot };
    case 'scroll': {
      const n = String((a.scroll_amount as number | undefined) ?? 3);
      return { xdo: held(modifiers(a.text), [...at, 'click', '--repeat', n, '--delay', '30', WHEEL[a.scroll_direction as string]!]), shot };
    }
    case 'type': {
      // A newline is the Return key (xdotool would type a linefeed character into the field).
      const text = a.text as string;
      const xdo: string[] = [];
      text.split(/\r?\n/).forEach((line, n) => {
        if (n > 0) xdo.push(NEXT, 'key', 'Return');
        for (let i = 0; i < line.length; i += TYPE_CHUNK) xdo.push(NEXT, 'type', '--delay', String(TYPE_DELAY_MS), '--', line.slice(i, i + TYPE_CHUNK));
      });
      return { xdo, shot, extraS: Math.ceil((text.length * TYPE_DELAY_MS) / 1000) };
    }
    case 'key':
      return { xdo: ['key', '--', ...(a.text as string).split(/\s+/).filter(Boolean)], shot };
    case 'hold_key': {
      const keys = (a.text as string).split(/\s+/).filter(Boolean);
      return { xdo: ['keydown', ...keys, 'sleep', String(a.duration), 'keyup', ...keys], shot, extraS: a.duration as number };
    }
    case 'wait':
      return { xdo: ['sleep', String(a.duration)], shot, extraS: a.duration as number };
    case 'cursor_position':
      return { xdo: ['getmouselocation', '--shell'], shot: false };
    case 'zoom': {
      const [x0, y0, x1, y1] = (a.region as number[]).map((v) => v);
      const tl = toScreen([x0, y0]).map(Number);
      const br = toScreen([x1, y1]).map(Number);
      return { xdo: [], shot: true, area: `${tl[0]},${tl[1]},${Math.max(1, br[0]! - tl[0]!)},${Math.max(1, br[1]! - tl[1]!)}` };
    }
  }
  throw new Error(`unhandled computer action ${action as string}`);
}

export interface ComputerOptions {
  screen: DesktopSettings;
  /** Told every screenshot returned (the session's capped screenshot store). */
  keep?: (png: Buffer) => Promise<void>;
}

/** Runs one computer action in the session's sandbox. */
export async function runComputer(args: Record<string, unknown>, ctx: ExecContext, o: ComputerOptions): Promise<ExecOutcome> {
  const action = args.action as ComputerAction;
  const { scale, width: shotW } = screenshotSize(o.screen);
  const toScreen = (p: unknown): string[] => {
    const [x, y] = p as number[];
    return [String(Math.min(Math.round(x! / scale), o.screen.width - 1)), String(Math.min(Math.round(y! / scale), o.screen.height - 1))];
  };
  const r = plan(action, args, toScreen);
  // NUL cannot travel in argv: each NEXT becomes a per-call random token no argument can equal by chance.
  const sep = `--berth-${randomBytes(12).toString('hex')}--`;
  const xdo = r.xdo.map((x) => (x === NEXT ? sep : x));
  // Generous: a settled screenshot is up to four scrots, each seconds long under QEMU's TCG on a busy host.
  const timeoutMs = 90_000 + Math.ceil((r.extraS ?? 0) * 1000);
  const handle = await ctx.sandboxes.exec(
    ctx.sessionId,
    {
      argv: ['/bin/bash', '-c', ACTION_SCRIPT, 'computer', ...xdo],
      env: { SEP: sep, DISPLAY: DESKTOP_DISPLAY, SHOT: r.shot ? '1' : '0', AREA: r.area ?? '', SETTLE: String(SETTLE_MS / 1000), TRIES: String(action === 'screenshot' || action === 'zoom' ? 0 : SETTLE_TRIES) },
      timeoutMs,
      stdin: false,
    },
    ctx.signal ? { signal: ctx.signal } : {},
  );
  const res = await collect(handle);
  if (res.code !== 0) return { outputError: `computer ${action} failed (exit ${res.code}): ${res.stderr.trim().slice(-500) || 'no message'}` };
  const out: Record<string, unknown> = { action, screen: { width: o.screen.width, height: o.screen.height } };
  if (action === 'cursor_position') {
    const m = /X=(\d+)\s+Y=(\d+)/.exec(res.stdout.toString());
    if (!m) return { outputError: `computer cursor_position: unexpected xdotool output ${JSON.stringify(res.stdout.toString().slice(0, 200))}` };
    out.coordinate = [Math.min(Math.round(Number(m[1]) * scale), shotW - 1), Math.round(Number(m[2]) * scale)];
    return { output: out };
  }
  if (r.shot) {
    // Scaled on the host: the agent works in screenshot pixels, at most SCREENSHOT_MAX_WIDTH wide.
    const info = pngInfo(res.stdout);
    if (!info) return { outputError: `computer ${action}: the screenshot is not a PNG` };
    let png = res.stdout;
    let size = { width: info.width, height: info.height };
    if (info.width > SCREENSHOT_MAX_WIDTH) {
      const small = scaleDown(decodePng(png), SCREENSHOT_MAX_WIDTH);
      png = encodePng(small);
      size = { width: small.width, height: small.height };
    }
    out.screenshot = { mimeType: 'image/png', data: png.toString('base64'), ...size, sha256: sha256Hex(png) };
    await o.keep?.(png);
  }
  return { output: out };
}
