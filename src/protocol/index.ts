export * from './types.js';
export * from './schemas.js';
export * from './validate.js';
export * from './errors.js';
export * from './views.js';
export * from './exec.js';
export * from './gate.js';
export * from './processes.js';
