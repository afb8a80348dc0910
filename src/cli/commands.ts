/**
 * The CLI's one table of verbs, subcommands and flags. The parser (parseCommand), every `--help`, the
 * top-level help and the shell completions are all generated from it, so they cannot drift.
 *
 * To add a verb: add an entry here (summary, commands with their flags), a loader in main.ts's LOADERS,
 * and a thin file that calls parseCommand('verb', 'sub', ctx.argv). Numeric limits come from the
 * protocol's LIMITS, the same numbers the server enforces.
 */
import { BACKENDS } from '../core/sandbox.js';
import { DESKTOP_RECORDING_BYTES } from '../core/desktop.js';
import { LIMITS } from '../protocol/schemas.js';

export type FlagKind = 'bool' | 'string' | 'int' | 'number' | 'kv' | 'list' | 'choice';

/** What a flag's value is, for completion: a session or snapshot id, or a local file. */
export type Completes = 'session' | 'snapshot' | 'file';

export interface Flag {
  readonly kind: FlagKind;
  readonly help: string;
  /** Placeholder in usage lines, e.g. MB. Default: the flag's name in upper case. */
  readonly arg?: string;
  readonly short?: string;
  /** int / number: the accepted range, inclusive. */
  readonly min?: number;
  readonly max?: number;
  readonly choices?: readonly string[];
  readonly required?: boolean;
  readonly completes?: Completes;
}

export interface Command {
  /** Positionals as shown in usage, e.g. 'ID PATH'. */
  readonly args?: string;
  readonly min?: number;
  /** Most positionals; absent = any number. */
  readonly max?: number;
  /** Usage text after the flags, e.g. '-- CMD [ARGS…]'. */
  readonly tail?: string;
  readonly summary?: string;
  readonly flags: Readonly<Record<string, Flag>>;
  /** What each positional completes to, in order. */
  readonly completes?: readonly Completes[];
}

export interface VerbSpec {
  readonly summary: string;
  /** Subcommands by name; '' is the verb used without one (`berth exec ID …`, `berth snapshot ID`). */
  readonly commands: Readonly<Record<string, Command>>;
  /** Other names for subcommands (ls → list). */
  readonly aliases?: Readonly<Record<string, string>>;
}

const json = { kind: 'bool', help: 'print the result as JSON' } as const satisfies Flag;
const tenant = { kind: 'string', arg: 'ID', help: 'root only: act on this tenant' } as const satisfies Flag;
const id = { args: 'ID', min: 1, max: 1, completes: ['session'] } as const;
const lifecycle = (summary: string) => ({ summary, commands: { '': { ...id, flags: { json } } } }) as const;
const range = (l: { min: number; max: number }) => ({ min: l.min, max: l.max });

export const SPEC = {
  serve: {
    summary: 'run the API server',
    commands: {
      '': {
        max: 0,
        flags: {
          port: { kind: 'int', min: 0, max: 65535, help: 'TCP port (0: any free one); else $BERTH_PORT, else 7070' },
          host: { kind: 'string', arg: 'ADDR', help: 'interface to bind; default 127.0.0.1' },
          data: { kind: 'string', arg: 'DIR', completes: 'file', help: 'data directory; else $BERTH_DATA, else ./.berth' },
          'image-cache': { kind: 'string', arg: 'DIR', completes: 'file', help: 'built images; else $BERTH_IMAGE_CACHE, else <data>/images' },
          'audit-key': { kind: 'string', arg: 'FILE', completes: 'file', help: 'Ed25519 key that signs audit tree heads (made 0600 if missing); else $BERTH_AUDIT_KEY, else <data>/audit.key' },
          'accept-audit-rollback': { kind: 'bool', help: 'start although the audit log is behind its last signed head, and record that it did' },
          'checkpoint-every': { kind: 'string', arg: 'DURATION', help: 'publish a signed head this often (e.g. 5m); needs --checkpoint-to' },
          'checkpoint-to': { kind: 'string', arg: 'FILE|URL', help: 'append signed heads to this file (outside the data directory) or POST them to this URL' },
          database: { kind: 'string', arg: 'URL', help: 'postgres://… to keep records in PostgreSQL; else $BERTH_DATABASE, else SQLite <data>/berth.db' },
          'console-idle-logoff': { kind: 'string', arg: 'DURATION', help: 'end a web-console session after this long without activity (default 15m)' },
        },
      },
    },
  },
  session: {
    summary: 'create | list | show | rm sessions',
    aliases: { ls: 'list', get: 'show', terminate: 'rm' },
    commands: {
      create: {
        max: 0,
        summary: 'start a session; prints its id and the agent token (shown once)',
        flags: {
          objective: { kind: 'string', arg: 'TEXT', help: 'what the session is for' },
          memory: { kind: 'int', arg: 'MB', ...range(LIMITS.memoryMb), help: 'memory, MiB (default 512)' },
          disk: { kind: 'int', arg: 'MB', ...range(LIMITS.diskMb), help: "room for the session's writes, MiB; past it a writer gets ENOSPC (gvisor: default half of --memory, at most --memory; qemu: grows the disk)" },
          cpus: { kind: 'number', arg: 'N', ...range(LIMITS.cpus), help: 'CPUs (default 1)' },
          'idle-timeout': { kind: 'int', arg: 'S', ...range(LIMITS.idleTimeoutS), help: 'hibernate after S idle seconds (0: never, the default)' },
          env: { kind: 'kv', arg: 'K=V', help: 'environment variable (repeatable)' },
          meta: { kind: 'kv', arg: 'K=V', help: 'metadata label (repeatable)' },
          backend: { kind: 'choice', choices: BACKENDS, help: 'sandbox backend (default gvisor)' },
          template: { kind: 'string', arg: 'NAME', help: 'start from this template (its files and running processes), fresh identity' },
          tenant,
          'egress-allow': { kind: 'list', arg: 'HOST[:PORT]', help: 'a host the session may connect to (host, *.domain, IP or CIDR; repeatable; default none)' },
          'egress-allow-cidr': { kind: 'list', arg: 'CIDR', help: 'a loopback/private range the session may reach anyway (repeatable)' },
          desktop: { kind: 'bool', help: 'also run a desktop (X display, window manager, VNC; the computer tool)' },
          screen: { kind: 'string', arg: 'WxH', help: 'the desktop screen in pixels (implies --desktop); default 1280x800' },
          json,
        },
      },
      list: {
        max: 0,
        summary: 'sessions not terminated, oldest first',
        flags: {
          state: { kind: 'string', arg: 'S[,S…]', help: 'only these states' },
          metadata: { kind: 'kv', arg: 'K=V', help: 'only sessions with this metadata label (repeatable: all must match)' },
          limit: { kind: 'int', arg: 'N', min: 1, max: LIMITS.listLimit, help: `at most N sessions (1..${LIMITS.listLimit})` },
          after: { kind: 'string', arg: 'CURSOR', help: 'the next page: the nextCursor of the previous one' },
          json,
        },
      },
      show: { ...id, summary: 'state, settings, metadata, metering', flags: { json } },
      rm: { ...id, summary: 'terminate (the machine is wiped)', flags: { json } },
    },
  },
  exec: {
    summary: 'run a command in a session',
    commands: {
      '': {
        args: 'ID',
        min: 1,
        tail: '-- CMD [ARGS…]',
        completes: ['session'],
        flags: {
          cwd: { kind: 'string', arg: 'DIR', help: 'working directory (absolute)' },
          env: { kind: 'kv', arg: 'K=V', help: 'environment variable (repeatable)' },
          timeout: { kind: 'int', arg: 'MS', ...range(LIMITS.timeoutMs), help: 'kill the command after MS ms (exit 124)' },
          background: { kind: 'bool', short: 'b', help: 'start it and return at once, printing its execId (output kept: berth logs)' },
          json: { kind: 'bool', help: 'events as JSON lines (output base64), exit status still the command’s; with --background {execId,pid}' },
        },
      },
    },
  },
  files: {
    summary: 'write | read | list | stat | mkdir | rm | mv | push | pull | watch files in a session',
    aliases: { ls: 'list' },
    commands: {
      write: {
        args: 'ID PATH',
        min: 2,
        max: 2,
        tail: '< data',
        completes: ['session'],
        summary: 'stdin to PATH, atomically (missing parents made)',
        flags: { mode: { kind: 'string', arg: 'OCTAL', help: 'file mode, e.g. 644' }, 'no-parents': { kind: 'bool', help: 'fail if the parent directory is missing' }, json },
      },
      read: { args: 'ID PATH', min: 2, max: 2, tail: '> data', completes: ['session'], summary: 'PATH to stdout', flags: {} },
      list: { args: 'ID PATH', min: 2, max: 2, completes: ['session'], flags: { json } },
      stat: { args: 'ID PATH', min: 2, max: 2, completes: ['session'], flags: { json } },
      mkdir: { args: 'ID PATH', min: 2, max: 2, completes: ['session'], flags: { parents: { kind: 'bool', short: 'p', help: 'create missing parents' }, json } },
      rm: { args: 'ID PATH', min: 2, max: 2, completes: ['session'], flags: { recursive: { kind: 'bool', short: 'r', help: 'remove a directory and its contents' }, json } },
      mv: { args: 'ID FROM TO', min: 3, max: 3, completes: ['session'], summary: 'rename or move within the session', flags: { json } },
      push: { args: 'ID LOCAL_DIR REMOTE_DIR', min: 3, max: 3, completes: ['session', 'file'], summary: 'a local directory into the session (as tar)', flags: { json } },
      pull: { args: 'ID REMOTE_DIR LOCAL_DIR', min: 3, max: 3, completes: ['session'], summary: 'a session directory to a local one (as tar)', flags: {} },
      watch: { args: 'ID PATH', min: 2, max: 2, completes: ['session'], summary: 'one JSON line per change until Ctrl-C', flags: { recursive: { kind: 'bool', short: 'r', help: 'watch subdirectories too' } } },
    },
  },
  pause: lifecycle('freeze a session (memory kept)'),
  resume: lifecycle('unfreeze a paused session'),
  hibernate: lifecycle('checkpoint a session to disk and free its RAM'),
  wake: lifecycle('restore a hibernated session'),
  snapshot: {
    summary: 'snapshot a session (or list | show | rm snapshots)',
    aliases: { ls: 'list' },
    commands: {
      '': { ...id, summary: 'snapshot a running session (it keeps running)', flags: { name: { kind: 'string', help: 'a name for the snapshot' }, json } },
      list: { max: 0, flags: { session: { kind: 'string', arg: 'ID', completes: 'session', help: 'only snapshots of this session' }, json } },
      show: { args: 'SNAPSHOT', min: 1, max: 1, completes: ['snapshot'], flags: { json } },
      rm: { args: 'SNAPSHOT', min: 1, max: 1, completes: ['snapshot'], flags: { json } },
    },
  },
  fork: {
    summary: 'start N sessions from a snapshot',
    commands: {
      '': { args: 'SNAPSHOT', min: 1, max: 1, completes: ['snapshot'], flags: { count: { kind: 'int', arg: 'N', ...range(LIMITS.forkCount), help: 'branches (default 1)' }, json } },
    },
  },
  tenant: {
    summary: 'create | list | show tenants, set their quotas (root only)',
    aliases: { ls: 'list' },
    commands: {
      create: { args: 'NAME', min: 1, max: 1, flags: { json } },
      list: { max: 0, flags: { json } },
      // quotas (issue 12 §3)
      show: { args: 'ID', min: 1, max: 1, summary: 'the quotas in force and what the tenant uses', flags: { json } },
      set: {
        args: 'ID',
        min: 1,
        max: 1,
        summary: "set some of a tenant's quotas (root only; the others keep theirs)",
        flags: {
          'max-sessions': { kind: 'int', arg: 'N', min: 0, max: Number.MAX_SAFE_INTEGER, help: 'sessions not terminated or failed' },
          'max-memory-mb': { kind: 'int', arg: 'MB', min: 0, max: Number.MAX_SAFE_INTEGER, help: 'MiB of the sessions holding a machine' },
          'max-snapshot-gb': { kind: 'number', arg: 'GB', min: 0, max: 1e12, help: 'GiB of snapshots on disk' },
          'max-egress-gb': { kind: 'number', arg: 'GB', min: 0, max: 1e12, help: 'GiB through the egress proxy' },
          json,
        },
      },
    },
  },
  audit: {
    summary: 'query, verify or export the audit log',
    commands: {
      '': {
        max: 0,
        summary: 'entries, oldest first',
        flags: {
          session: { kind: 'string', arg: 'ID', completes: 'session', help: 'only entries of this session' },
          after: { kind: 'int', arg: 'SEQ', min: 0, max: Number.MAX_SAFE_INTEGER, help: 'entries after this sequence number' },
          limit: { kind: 'int', arg: 'N', min: 1, max: LIMITS.auditLimit, help: `at most N entries (1..${LIMITS.auditLimit})` },
          json,
        },
      },
      verify: {
        args: '[FILE…]',
        summary: 'check the chain and tree, and each signed head given against it (exit 1 naming the first bad entry)',
        flags: {
          checkpoint: { kind: 'list', arg: 'FILE', completes: 'file', help: 'signed heads (JSON, array or JSON Lines) the log must be consistent with; repeatable' },
          'public-key': { kind: 'string', arg: 'FILE', completes: 'file', help: 'check the heads were signed by this key (PEM), not only by the server\'s' },
          json,
        },
      },
      key: { max: 0, summary: "print the audit signing key's public half (PEM)", flags: { json } },
      checkpoint: { max: 0, summary: 'a signed tree head, one JSON line (berth audit checkpoint >> heads.jsonl)', flags: {} },
      prove: {
        args: 'SEQ',
        min: 1,
        max: 1,
        summary: 'an inclusion proof for one entry, checkable with the public key alone',
        flags: { 'tree-size': { kind: 'int', arg: 'N', min: 1, max: Number.MAX_SAFE_INTEGER, help: 'prove against the tree of this size; default the current one' } },
      },
      export: {
        max: 0,
        summary: 'every entry as JSON Lines',
        flags: {
          session: { kind: 'string', arg: 'ID', completes: 'session', help: 'only entries of this session' },
          after: { kind: 'int', arg: 'SEQ', min: 0, max: Number.MAX_SAFE_INTEGER, help: 'entries after this sequence number' },
        },
      },
    },
  },
  tools: {
    summary: "list a session's tools (what its agent may call)",
    commands: { '': { ...id, flags: { json } } },
  },
  call: {
    summary: 'call a tool through the gate (exit 0 allow, 3 deny, 4 pending)',
    commands: {
      '': {
        args: 'ID TOOL',
        min: 2,
        max: 2,
        completes: ['session'],
        flags: {
          args: { kind: 'string', arg: 'JSON', help: 'the tool’s arguments, a JSON object' },
          step: { kind: 'string', help: 'the plan step this call claims to be' },
          screenshot: { kind: 'string', arg: 'FILE', completes: 'file', help: 'write the result’s screenshot (the computer tool) to FILE as PNG, and print it without its data' },
          json,
        },
      },
    },
  },
  policy: {
    summary: "set | show the tenant's Cedar policy",
    aliases: { get: 'show' },
    commands: {
      set: { args: 'FILE.cedar', min: 1, max: 1, completes: ['file'], flags: { tenant, json } },
      show: { max: 0, flags: { tenant, json } },
    },
  },
  plan: {
    summary: "set | show | clear a session's plan",
    aliases: { get: 'show' },
    commands: {
      set: { args: 'ID FILE.json', min: 2, max: 2, completes: ['session', 'file'], flags: { json } },
      show: { ...id, flags: { json } },
      clear: { ...id, flags: { json } },
    },
  },
  approvals: {
    summary: 'list approvals',
    aliases: { ls: 'list' },
    commands: {
      list: {
        max: 0,
        flags: {
          state: { kind: 'string', arg: 'S[,S…]', help: 'pending, approved, denied, expired, used, cancelled' },
          session: { kind: 'string', arg: 'ID', completes: 'session', help: 'only approvals of this session' },
          json,
        },
      },
    },
  },
  approve: { summary: 'approve a parked call (it runs at once)', commands: { '': { args: 'APPROVAL_ID', min: 1, max: 1, flags: { json } } } },
  deny: {
    summary: 'deny a parked call',
    commands: { '': { args: 'APPROVAL_ID', min: 1, max: 1, flags: { reason: { kind: 'string', arg: 'TEXT', required: true, help: 'why (kept in the audit log)' }, json } } },
  },
  breaker: { summary: "reset a session's tripped breaker", commands: { reset: { ...id, flags: { json } } } },
  // ---- the web console (issue 10) ----
  console: {
    summary: 'print (or open) a one-time sign-in link to the web console, valid 60 s',
    commands: { '': { max: 0, flags: { open: { kind: 'bool', help: 'open the link in the default browser (xdg-open, open)' }, json } } },
  },
  control: {
    summary: "take | release | show a session's control lease (the agent's calls wait while a person holds it)",
    aliases: { get: 'show', 'hand-back': 'release' },
    commands: {
      show: { ...id, flags: { json } },
      take: { ...id, flags: { json } },
      release: { ...id, flags: { force: { kind: 'bool', help: "end someone else's lease" }, json } },
    },
  },
  'watch-link': {
    summary: "create | list | revoke watch-only links to a session's console view (read-only, expiring)",
    aliases: { ls: 'list', rm: 'revoke' },
    commands: {
      create: {
        ...id,
        flags: {
          ttl: { kind: 'string', arg: 'DURATION', help: 'how long the link works: 30m, 1h, 7d (default 1h, at most 30d)' },
          label: { kind: 'string', arg: 'TEXT', help: 'a note shown in the list (who it was shared with)' },
          json,
        },
      },
      list: { ...id, flags: { json } },
      revoke: { args: 'ID LINK_ID', min: 2, max: 2, completes: ['session'], flags: { json } },
    },
  },
  // ---- end console ----
  tool: {
    summary: 'define | list operator tools',
    aliases: { ls: 'list' },
    commands: {
      define: { args: 'FILE.json', min: 1, max: 1, completes: ['file'], flags: { tenant, json } },
      list: { max: 0, flags: { tenant, json } },
    },
  },
  gate: {
    summary: "set | show a session's gate settings",
    aliases: { get: 'show' },
    commands: {
      set: {
        ...id,
        flags: {
          'http-allow': { kind: 'list', arg: 'HOST', help: 'older name of --egress-allow' },
          'egress-allow': { kind: 'list', arg: 'HOST[:PORT]', help: 'a host the session may connect to, by proxy or http.request (repeatable; replaces the list)' },
          'egress-allow-cidr': { kind: 'list', arg: 'CIDR', help: 'a loopback/private range the session may reach anyway (repeatable; replaces them)' },
          'breaker-failures': { kind: 'int', arg: 'N', min: 1, max: 1_000_000, help: 'identical failures in a row that trip the breaker' },
          'breaker-per-minute': { kind: 'int', arg: 'M', min: 1, max: 100_000, help: 'calls per minute that trip the breaker' },
          'approval-ttl': { kind: 'int', arg: 'S', min: 0, max: 30 * 86_400, help: 'seconds an approval waits (0: forever)' },
          tools: { kind: 'string', arg: 'NAME[,NAME…]', help: 'the tools the session has' },
          json,
        },
      },
      show: { ...id, flags: { json } },
    },
  },
  mcp: {
    summary: "serve a session's tools over MCP on stdio",
    commands: { '': { max: 0, flags: { session: { kind: 'string', arg: 'ID', required: true, completes: 'session', help: "the session (BERTH_TOKEN: normally its agent token)" } } } },
  },
  ps: { summary: "list a session's background processes", commands: { '': { ...id, flags: { json } } } },
  logs: {
    summary: 'replay (and --follow) the output of a background process',
    commands: {
      '': {
        args: 'ID EXECID',
        min: 2,
        max: 2,
        completes: ['session'],
        flags: {
          follow: { kind: 'bool', short: 'f', help: 'stream live until the command ends (exit status: the command’s); Ctrl-C detaches' },
          offset: { kind: 'string', arg: 'N|N,M', help: 'start at byte N of stdout (and M of stderr), e.g. a nextOffset' },
          stdout: { kind: 'bool', help: 'only stdout' },
          stderr: { kind: 'bool', help: 'only stderr' },
        },
      },
    },
  },
  kill: {
    summary: 'signal a background process',
    commands: {
      '': { args: 'ID EXECID', min: 2, max: 2, completes: ['session'], flags: { signal: { kind: 'string', arg: 'SIG', short: 's', help: 'signal name or number (default TERM)' }, json } },
    },
  },
  template: {
    summary: 'build | list | show | rm templates (machine images built from a recipe)',
    aliases: { ls: 'list' },
    commands: {
      build: {
        args: 'NAME',
        min: 1,
        max: 1,
        summary: 'run a recipe in a fresh session and keep the machine as template NAME (output streams live)',
        flags: {
          file: { kind: 'string', arg: 'FILE', completes: 'file', required: true, help: 'the recipe, JSON {from?, run, files?, env?, egressAllow?} ("-": stdin)' },
          backend: { kind: 'choice', choices: BACKENDS, help: 'sandbox backend (default gvisor; not with recipe.from)' },
          memory: { kind: 'int', arg: 'MB', ...range(LIMITS.memoryMb), help: 'memory, MiB (default 512; not with recipe.from)' },
          disk: { kind: 'int', arg: 'MB', ...range(LIMITS.diskMb), help: "room for the machine's writes, MiB (gvisor: default half of --memory; not with recipe.from)" },
          cpus: { kind: 'number', arg: 'N', ...range(LIMITS.cpus), help: 'CPUs (default 1; not with recipe.from)' },
          tenant,
          json: { kind: 'bool', help: 'progress as JSON lines (as the server sends them)' },
        },
      },
      list: { max: 0, flags: { tenant, json } },
      show: { args: 'NAME', min: 1, max: 1, flags: { tenant, json } },
      rm: { args: 'NAME', min: 1, max: 1, summary: 'remove it (sessions made from it keep running)', flags: { tenant, json } },
    },
  },
  'port-forward': {
    summary: 'forward a local TCP port to a port inside a session, until Ctrl-C',
    commands: {
      '': {
        args: 'ID [LOCAL:]REMOTE',
        min: 2,
        max: 2,
        completes: ['session'],
        flags: { address: { kind: 'string', arg: 'HOST', help: 'local address to listen on (default 127.0.0.1)' }, json },
      },
    },
  },
  'port-link': {
    summary: 'a signed, expiring link to a port for a browser, no token needed (or list | revoke links)',
    aliases: { ls: 'list', rm: 'revoke' },
    commands: {
      '': {
        args: 'ID PORT',
        min: 2,
        max: 2,
        completes: ['session'],
        summary: 'make a link and print its URL (shown this once)',
        flags: {
          ttl: { kind: 'string', arg: 'DURATION', help: 'how long it works: 90s, 30m, 1h, 7d or seconds (default 1h, at most 7d)' },
          label: { kind: 'string', help: 'a note shown by list' },
          json,
        },
      },
      list: { ...id, flags: { json } },
      revoke: { args: 'ID LINKID', min: 2, max: 2, completes: ['session'], flags: { json } },
    },
  },
  // ---- terminals (issue 9 §2) ----
  shell: {
    summary: 'open an interactive terminal in a session (default: the login shell); exit status: the remote one',
    commands: {
      '': {
        args: 'ID',
        min: 1,
        max: 1,
        tail: '-- [CMD ARGS…]',
        completes: ['session'],
        flags: {
          cwd: { kind: 'string', arg: 'DIR', help: 'working directory (absolute)' },
          env: { kind: 'kv', arg: 'K=V', help: 'environment variable (repeatable); TERM is passed from here' },
          attach: { kind: 'string', arg: 'TID', help: 'attach to an existing terminal instead of opening one' },
          watch: { kind: 'bool', help: 'with --attach: watch only, never take input' },
        },
      },
    },
  },
  terminal: {
    summary: "list | kill | record a session's terminals",
    aliases: { ls: 'list' },
    commands: {
      list: { ...id, flags: { json } },
      kill: { args: 'ID TID', min: 2, max: 2, completes: ['session'], flags: { signal: { kind: 'string', arg: 'SIG', short: 's', help: 'signal name or number (default TERM; a shell ignores it: KILL)' }, json } },
      record: { args: 'ID TID', min: 2, max: 2, completes: ['session'], summary: 'print the asciicast v2 recording (berth terminal record ID TID > t.cast)', flags: {} },
    },
  },
  // ---- a desktop's recording (issue 11) ----
  desktop: {
    summary: "a desktop session's screen and its recording: show | record | recording",
    commands: {
      '': { ...id, summary: 'the screen and whether it is being recorded', flags: { json } },
      record: {
        ...id,
        summary: 'start recording the desktop (MPEG-TS, 5 fps; replaces the last video), or --stop',
        flags: {
          stop: { kind: 'bool', help: 'stop the recording (the video stays in the session)' },
          'max-bytes': { kind: 'int', arg: 'N', min: DESKTOP_RECORDING_BYTES.min, max: DESKTOP_RECORDING_BYTES.max, help: "size cap of the video, bytes (default 256 MiB or a quarter of the session's memory, whichever is less)" },
          json,
        },
      },
      recording: { ...id, tail: '> video.ts', summary: 'the video so far to stdout (berth desktop recording ID > video.ts)', flags: {} },
    },
  },
  demo: {
    summary: 'run the Plan-then-Execute scenario against the server',
    commands: { '': { max: 0, flags: { keep: { kind: 'bool', help: 'keep the session afterwards' }, json } } },
  },
  completion: {
    summary: 'print a shell completion script (bash | zsh | fish)',
    commands: { '': { args: 'bash|zsh|fish', min: 1, max: 1, flags: {} } },
  },
  help: { summary: 'this list, or a verb’s usage (berth help VERB)', commands: { '': { args: '[VERB]', max: 1, flags: {} } } },
} as const satisfies Record<string, VerbSpec>;

export type VerbName = keyof typeof SPEC;
export const VERB_NAMES = Object.keys(SPEC) as VerbName[];

export function verbSpec(name: string): VerbSpec | undefined {
  return Object.hasOwn(SPEC, name) ? (SPEC as Record<string, VerbSpec>)[name] : undefined;
}

/** Global flags, accepted before any verb. */
export const GLOBAL_FLAGS = { help: 'print usage and exit', version: 'print the version and exit' } as const;
