import Database from 'better-sqlite3';
import { AppError } from '../core/errors.js';

/**
 * Turns a better-sqlite3 error into an AppError where the cause is one a caller can act on; anything else
 * (including our own AppErrors thrown inside a transaction) is rethrown unchanged.
 */
export function translateSqliteError(e: unknown, subject: { kind: string; id?: string }): never {
  if (e instanceof Database.SqliteError) {
    const details: Record<string, unknown> = { ...subject, sqliteCode: e.code };
    if (e.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || e.code === 'SQLITE_CONSTRAINT_UNIQUE') {
      throw new AppError('conflict', `${subject.kind} already exists`, { details, cause: e });
    }
    if (e.code.startsWith('SQLITE_BUSY') || e.code.startsWith('SQLITE_LOCKED')) {
      throw new AppError('unavailable', 'the database is locked by another writer', { details, retryable: true, cause: e });
    }
    if (e.code === 'SQLITE_FULL' || e.code.startsWith('SQLITE_IOERR') || e.code === 'SQLITE_READONLY') {
      throw new AppError('unavailable', `the database cannot be written (${e.code})`, { details, cause: e });
    }
  }
  throw e;
}
