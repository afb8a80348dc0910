/**
 * Every HTTP upgrade the server takes, in the order they are tried: the port proxy's WebSocket and TCP
 * tunnel (ports-upgrade.ts), port links' upgrades (`/p/<token>/…`, same file), the terminals'
 * WebSocket (terminal-ws.ts), then the desktop's live view (desktop-ws.ts). Hono never sees upgrades.
 */
import type { Engine } from '../engine/api.js';
import { desktopUpgrade } from './desktop-ws.js';
import type { Logger } from './log.js';
import { portLinkUpgrade, portUpgrade } from './ports-upgrade.js';
import type { UpgradeHandler } from './serve.js';
import { terminalUpgrade } from './terminal-ws.js';

export function upgradeHandlers(engine: Engine, log: Logger): UpgradeHandler[] {
  return [portUpgrade(engine, log), portLinkUpgrade(engine, log), terminalUpgrade({ engine, log }), desktopUpgrade({ engine, log })];
}
