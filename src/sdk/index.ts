export { Berth, type BerthOptions, type CreateSessionOptions, type SessionsApi, type SnapshotsApi, type TenantsApi, type AuditApi } from './client.js';
export { Session, SessionFiles, type CallOpts, type RunOptions, type RunResult } from './session.js';
export { Execution, type ExecOptions, type ExecOutput, type ExecResult } from './exec.js';
export type { BytesSource } from './streams.js';
export { resolveEnv, DEFAULT_URL, type EnvResolution } from './env.js';
export { AppError, isAppError, ERROR_CODES, type ErrorCode } from '../core/errors.js';
export type * from '../protocol/types.js';
