/**
 * The `computer` tool (issue 11): one action on the session's desktop per call, in the action schema of
 * Anthropic's computer-use tool, so agents built for it work unchanged. Coordinates are in the space of the
 * screenshots the tool returns (the screen scaled to at most SCREENSHOT_MAX_WIDTH wide); the executor
 * checks them against that size and maps them to the screen. Risk 'write': an action changes the machine,
 * never anything outside it. Policies tell actions apart by `context.args.action` (and see points as
 * `context.args.coordinate.x`/`.y`, see cedar-schema.ts), e.g. screenshots freely, `type` only approved.
 */
import { SCREENSHOT_MAX_WIDTH, type DesktopSettings } from '../core/index.js';
import { defineTool } from './tools.js';
import type { JsonSchema } from './types.js';

export const COMPUTER_ACTIONS = [
  'screenshot',
  'left_click',
  'right_click',
  'middle_click',
  'double_click',
  'triple_click',
  'mouse_move',
  'left_click_drag',
  'left_mouse_down',
  'left_mouse_up',
  'scroll',
  'type',
  'key',
  'hold_key',
  'wait',
  'cursor_position',
  'zoom',
] as const;
export type ComputerAction = (typeof COMPUTER_ACTIONS)[number];

/** Actions that press a mouse button at `coordinate` (or where the pointer is). */
export const CLICK_ACTIONS: readonly ComputerAction[] = ['left_click', 'right_click', 'middle_click', 'double_click', 'triple_click'];

const COORD = { type: 'integer', minimum: 0, maximum: 100_000 } as const;
/** [x, y] in screenshot pixels. */
const POINT: JsonSchema = { type: 'array', items: COORD, minItems: 2, maxItems: 2 };
/** A PNG as base64 with its size: what `screenshot` and every action's settled screen come back as. */
const IMAGE: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['mimeType', 'data', 'width', 'height', 'sha256'],
  properties: {
    mimeType: { const: 'image/png' },
    data: { type: 'string', pattern: '^[A-Za-z0-9+/]*={0,2}$', description: 'The PNG, base64.' },
    width: { type: 'integer', minimum: 1 },
    height: { type: 'integer', minimum: 1 },
    sha256: { type: 'string', pattern: '^[0-9a-f]{64}$', description: 'SHA-256 of the PNG bytes (what the audit log keeps).' },
  },
};

const needs = (actions: readonly ComputerAction[], required: string[]): JsonSchema => ({
  if: { properties: { action: { enum: [...actions] } }, required: ['action'] },
  then: { required },
});

export const COMPUTER = defineTool({
  name: 'computer',
  description:
    "Operates the session's desktop: one action per call (Anthropic computer-use actions). Coordinates are [x, y] in the " +
    "screenshot's pixels. screenshot returns the screen as a PNG (at most 1280 px wide); every other action returns the " +
    'screen after it settles, unless screenshot: false. key and hold_key take xdotool key names (Return, ctrl+s, alt+Tab); ' +
    'type types text; scroll turns the wheel scroll_amount clicks; wait and hold_key take duration in seconds; zoom returns ' +
    'the region [x0, y0, x1, y1] at full resolution. cursor_position returns coordinate.',
  risk: 'write',
  executor: { kind: 'builtin', name: 'computer' },
  inputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['action'],
    properties: {
      action: { type: 'string', enum: [...COMPUTER_ACTIONS] },
      coordinate: { ...POINT, description: 'Where to act, [x, y]; clicks without it act where the pointer is.' },
      start_coordinate: { ...POINT, description: 'left_click_drag: where the drag starts.' },
      text: { type: 'string', minLength: 1, maxLength: 65536, description: 'type: the text; key, hold_key: the key(s); clicks, scroll: modifier keys held meanwhile (e.g. "shift").' },
      scroll_direction: { type: 'string', enum: ['up', 'down', 'left', 'right'] },
      scroll_amount: { type: 'integer', minimum: 1, maximum: 100, description: 'Wheel clicks; default 3.' },
      duration: { type: 'number', minimum: 0, maximum: 60, description: 'Seconds (wait, hold_key).' },
      region: { type: 'array', items: COORD, minItems: 4, maxItems: 4, description: 'zoom: [x0, y0, x1, y1].' },
      screenshot: { type: 'boolean', description: 'Return the settled screen after the action. Default true.' },
    },
    allOf: [
      needs(['mouse_move', 'left_click_drag'], ['coordinate']),
      needs(['left_click_drag'], ['start_coordinate']),
      needs(['type', 'key', 'hold_key'], ['text']),
      needs(['hold_key', 'wait'], ['duration']),
      needs(['scroll'], ['scroll_direction']),
      needs(['zoom'], ['region']),
    ],
  },
  outputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['action', 'screen'],
    properties: {
      action: { type: 'string', enum: [...COMPUTER_ACTIONS] },
      screen: {
        type: 'object',
        additionalProperties: false,
        required: ['width', 'height'],
        properties: { width: { type: 'integer', minimum: 1 }, height: { type: 'integer', minimum: 1 } },
        description: 'The real screen, pixels (screenshots may be scaled down from it).',
      },
      screenshot: IMAGE,
      coordinate: { ...POINT, description: 'cursor_position: where the pointer is, in screenshot pixels.' },
    },
  },
  imageResults: ['screenshot'],
}, { deferCompile: true });

/** The size of the screenshots of a screen: at most SCREENSHOT_MAX_WIDTH wide, the height in proportion. */
export function screenshotSize(screen: DesktopSettings): { width: number; height: number; scale: number } {
  if (screen.width <= SCREENSHOT_MAX_WIDTH) return { width: screen.width, height: screen.height, scale: 1 };
  const scale = SCREENSHOT_MAX_WIDTH / screen.width;
  return { width: SCREENSHOT_MAX_WIDTH, height: Math.max(1, Math.round(screen.height * scale)), scale };
}

/** What is wrong with a schema-valid call's points for this screen (null: nothing), for the arguments stage. */
export function computerArgProblem(args: Record<string, unknown>, screen: DesktopSettings | null): string | null {
  if (!screen) return 'this session has no desktop (create it with desktop: true)';
  const { width, height } = screenshotSize(screen);
  const inside = (name: string, x: number, y: number) =>
    x < width && y < height ? null : `${name} (${x}, ${y}) is outside the ${width}x${height} screenshot`;
  for (const name of ['coordinate', 'start_coordinate'] as const) {
    const v = args[name];
    if (Array.isArray(v)) {
      const bad = inside(name, v[0] as number, v[1] as number);
      if (bad) return bad;
    }
  }
  const r = args.region;
  if (Array.isArray(r)) {
    const [x0, y0, x1, y1] = r as number[];
    if (x1! <= x0! || y1! <= y0!) return `region [${r.join(', ')}] must have x1 > x0 and y1 > y0`;
    const bad = inside('region', x1! - 1, y1! - 1);
    if (bad) return bad;
  }
  return null;
}
