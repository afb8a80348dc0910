/**
 * The real engine (in-memory driver) behind the HTTP app, every response validated against the OpenAPI
 * document as it passes: a fresh one per test. Returns a holder whose fields are set before each test.
 */
import { afterEach, beforeEach, expect } from 'vitest';
import { createApp } from '../../src/server/app.js';
import { createTestEngine, type TestEngine } from './engine.js';
import { responseChecker, type ResponseChecker } from './openapi.js';

export interface CheckedApp {
  t: TestEngine;
  app: { fetch: (r: Request) => Promise<Response> };
  /** Root bearer token and a JSON content type. */
  auth: Record<string, string>;
  /** The OpenAPI checker: its `seen` routes, `settle()`. */
  checker: ResponseChecker;
}

export function useCheckedApp(): CheckedApp {
  const h = {} as CheckedApp;
  beforeEach(async () => {
    h.t = await createTestEngine();
    h.checker = responseChecker();
    h.app = h.checker.wrap(createApp({ engine: h.t.engine }));
    h.auth = { authorization: `Bearer ${h.t.rootKey}`, 'content-type': 'application/json' };
  });
  afterEach(async () => {
    await h.checker.settle();
    await h.t.close();
    expect(h.checker.violations).toEqual([]);
  });
  return h;
}
