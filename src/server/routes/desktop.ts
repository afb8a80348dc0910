import { Hono } from 'hono';
import {
  EmptyBodySchema,
  MPEG_TS,
  RecordingStartBodySchema,
  toDesktopRecordingView,
  type DesktopRecordingStopView,
  type DesktopRecordingView,
  type DesktopView,
} from '../../protocol/index.js';
import { callOpts, idParam, principal, readJson, type Env, type RouteDeps } from '../context.js';
import { byteStream } from '../streams.js';

/**
 * A session's desktop (issue 11): its screen and the recording of it (engine/desktop-recording.ts). The
 * live view's ticket is routes/vnc.ts. Errors: 404 (session, or no video yet), 403 (an agent token), 409
 * invalid_state with details.reason no_desktop, 409 conflict when a recording already runs.
 */
export function desktopRoutes({ engine, log }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.get('/sessions/:id/desktop', async (c) => {
    const id = idParam(c, 'session');
    const info = await engine.desktop.info(principal(c), id, callOpts(c));
    return c.json<DesktopView>({ sessionId: info.sessionId, screen: info.screen, recording: toDesktopRecordingView(info.recording) });
  });

  r.post('/sessions/:id/desktop/recording/start', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, RecordingStartBodySchema);
    const s = await engine.desktop.start(principal(c), id, { ...callOpts(c), maxBytes: body.maxBytes });
    return c.json<DesktopRecordingView>(toDesktopRecordingView(s));
  });

  r.post('/sessions/:id/desktop/recording/stop', async (c) => {
    const id = idParam(c, 'session');
    await readJson(c, EmptyBodySchema);
    const { stopped, ...s } = await engine.desktop.stop(principal(c), id, callOpts(c));
    return c.json<DesktopRecordingStopView>({ ...toDesktopRecordingView(s), stopped });
  });

  r.get('/sessions/:id/desktop/recording', async (c) => {
    const id = idParam(c, 'session');
    const body = await byteStream(await engine.desktop.read(principal(c), id, callOpts(c)), { log, what: 'desktop recording read' });
    return new Response(body, {
      status: 200,
      headers: { 'content-type': MPEG_TS, 'cache-control': 'no-store', 'content-disposition': `attachment; filename="${id}-desktop.ts"` },
    });
  });

  return r;
}
