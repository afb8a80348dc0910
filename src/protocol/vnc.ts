/**
 * Wire names of a desktop's live view (issue 11): the console (noVNC) speaks RFB over a WebSocket,
 * `GET /v1/sessions/:id/desktop/vnc` with Upgrade, binary frames both ways, bridged by the server to the
 * VNC server inside the session. Auth: `Authorization: Bearer`, or `?ticket=` from
 * POST /v1/sessions/:id/desktop/tickets (single use, 60 s) for browsers. Only the holder of the session's
 * control lease may act; everyone else's input is dropped by the server (the view stays live).
 */
import * as z from 'zod';

export * from './vnc-names.js';

export interface DesktopTicketView {
  ticket: string;
  expiresAt: string;
}

export const DesktopTicketViewSchema = z.strictObject({ ticket: z.string(), expiresAt: z.string().describe('ISO-8601 time') });
