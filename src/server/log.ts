/** A structured logger: one JSON object per line. The server logs through this port only. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export const LOG_LEVELS = Object.keys(RANK) as LogLevel[];

export interface JsonLoggerOptions {
  /** Lowest level written. Default 'info'. */
  level?: LogLevel;
  /** Where lines go. Default process.stderr. */
  write?: (line: string) => void;
  /** Time source, ms since the epoch. Default Date.now. */
  now?: () => number;
}

export function createJsonLogger(opts: JsonLoggerOptions = {}): Logger {
  const min = RANK[opts.level ?? 'info'];
  const write = opts.write ?? ((line: string) => void process.stderr.write(line));
  const now = opts.now ?? Date.now;
  const emit = (level: LogLevel) => (msg: string, fields?: LogFields) => {
    if (RANK[level] < min) return;
    let line: string;
    try {
      line = JSON.stringify({ ts: new Date(now()).toISOString(), level, msg, ...fields });
    } catch {
      line = JSON.stringify({ ts: new Date(now()).toISOString(), level, msg, note: 'fields not serialisable' });
    }
    write(`${line}\n`);
  };
  return { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
}

export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
