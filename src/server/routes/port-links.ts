/**
 * Port links (issue 9 §3). Under /v1, behind the bearer token: create, list and revoke a session's links.
 * At `/p/<token>/…`, with no token header: the link itself, proxied to the port exactly as the bearer
 * proxy does (routes/ports.ts proxyRequest: prefix stripped and sent as X-Forwarded-Prefix, so an app's
 * relative links stay under the link). A link that is unknown, expired, revoked or whose session ended
 * answers 404 not_found, the same body for each, naming no session. The URL is built on the origin the
 * create request came to; WebSocket upgrades on a link are served in ports-upgrade.ts.
 */
import { Hono } from 'hono';
import type { PortLinkView as EngineLinkView } from '../../engine/api.js';
import { PortLinkCreateBodySchema, portLinkPrefix, toPortLinkView, type PortLinkCreatedView, type PortLinkListView, type PortLinkView } from '../../protocol/index.js';
import { callOpts, idParam, principal, readJson, type Ctx, type Env, type RouteDeps } from '../context.js';
import { proxyRequest } from './ports.js';

const view = (r: EngineLinkView): PortLinkView => toPortLinkView(r);

/** /v1 routes: mounted behind authentication. */
export function portLinkRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();
  r.post('/sessions/:id/port-links', async (c) => {
    const id = idParam(c, 'session');
    const b = await readJson(c, PortLinkCreateBodySchema);
    const { link, token } = await engine.portLinks.create(principal(c), id, b);
    const prefix = portLinkPrefix(token);
    return c.json<PortLinkCreatedView>({ ...view(link), url: `${new URL(c.req.url).origin}${prefix}/`, prefix }, 201);
  });
  r.get('/sessions/:id/port-links', async (c) => {
    const list = await engine.portLinks.list(principal(c), idParam(c, 'session'));
    return c.json<PortLinkListView>({ links: list.map(view) });
  });
  r.delete('/sessions/:id/port-links/:linkId', async (c) => {
    const id = idParam(c, 'session');
    return c.json<PortLinkView>(view(await engine.portLinks.revoke(principal(c), id, idParam(c, 'portLink', 'linkId'))));
  });
  return r;
}

/** `/p/<token>` and everything under it: no Authorization; the token is the credential. */
export function portLinkProxyRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();
  const proxy = async (c: Ctx): Promise<Response> => {
    const token = c.req.param('token') ?? '';
    const { socket, link } = await engine.portLinks.open(token, callOpts(c));
    return proxyRequest(c, { socket, prefix: portLinkPrefix(token), port: link.port });
  };
  r.all('/p/:token', proxy);
  r.all('/p/:token/*', proxy);
  return r;
}
