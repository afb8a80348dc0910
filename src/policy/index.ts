/**
 * The gate: schema check, Cedar policy, plan binding, approvals, breaker; pure evaluate() → Decision.
 * Imports only src/core and npm packages; no I/O, no clock.
 */
export * from './types.js';
export * from './schema.js';
export * from './tools.js';
export * from './builtin-tools.js';
export * from './cedar-schema.js';
export * from './cedar.js';
export * from './default-policy.js';
export * from './plan.js';
export * from './breaker.js';
export * from './approval.js';
export * from './args.js';
export * from './egress.js';
export * from './gate.js';
export * from './egress.js';
export * from './computer-tool.js';
