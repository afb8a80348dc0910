/*
 * berth-agent: the in-sandbox end of Berth's host channel. PROTOCOL.md beside this file is the spec;
 * this file implements it and nothing more.
 *
 * Shape: one thread, one poll() loop. Every fd we own is O_CLOEXEC, and every fd the loop reads or
 * writes (except regular files) is non-blocking, so nothing can stall the loop except short file
 * system calls. Lines for the host are queued in one output buffer; when it holds more than OUT_HIGH
 * bytes we stop reading child output and file data (back-pressure reaches the children through their
 * pipes), but host input is always read so a kill can never be stuck behind output.
 *
 * Safe as PID 1: SIGCHLD arrives through a signalfd and every child is reaped with
 * waitpid(-1, WNOHANG); only the pids we started produce `x` lines. When not PID 1 we make ourselves
 * a child subreaper so orphans behave the same way on a plain host (tests).
 *
 * Build: gcc -O2 -static -Wall -Wextra -o berth-agent berth-agent.c
 *
 * Sections: 1 limits and state, 2 utilities, 3 base64, 4 output, 5 line parsing, 6 commands (exec),
 * 7 file reads and writes, 8 file system queries, 9 identity, 10 hello/quiesce/reset, 11 dispatch,
 * 12 the host channel, 13 signals and reaping, 14 main loop.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/random.h>
#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ==== 1. limits and state ============================================================================ */

#define PROTOCOL_VERSION 1
#define MAX_LINE (1u << 20)        /* bytes, without '\n'; a longer line is discarded whole */
#define CHUNK (48u * 1024)         /* raw bytes carried by one o/e/D line */
#define READ_CREDIT 16             /* D lines a read may send before the host grants more */
#define OUT_HIGH (4u << 20)        /* queued output bytes above which producers pause */
#define DRAIN_MAX (1u << 20)       /* bytes drained from each pipe of an exited command */
#define IN_READ (64u * 1024)       /* bytes per read() of host input */
#define RECONNECT_MS 100           /* retry period for a lost channel */
#define LIST_BATCH 256             /* directory entries emitted per loop turn and listing */
#define MAX_CREDIT (1u << 20)      /* cap on outstanding read grants (guards against overflow) */

static const char *DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
static const char *DEFAULT_HOME = "HOME=/root";

/* A byte queue: live data is p[head .. head+len). */
struct buf {
  char *p;
  size_t head, len, cap;
};

/* A running command. Lives from fork until its pid is reaped. */
struct exec {
  struct exec *next;
  uint64_t id;
  pid_t pid;                   /* also its process group id */
  int fd_out, fd_err, fd_in;   /* our pipe ends; -1 once closed */
  struct buf stdin_q;          /* bytes from `I` not yet taken by the child's stdin pipe */
  int stdin_close_pending;     /* `C` arrived while stdin_q was not empty */
  int64_t deadline;            /* monotonic ms at which to SIGKILL the group; 0 = none */
  int timed_out;
  int detached;                /* its host went away (H with reset): still serviced, reports nothing */
};

/* A file being streamed to the host (`R`). */
struct fread {
  struct fread *next;
  uint64_t id;
  int fd;
  uint64_t credit;             /* D lines we may still send */
  uint64_t bytes;
};

/* A file being received from the host (`W`): data goes to tmp, renamed over path on `F`. */
struct fwrite {
  struct fwrite *next;
  uint64_t id;
  int fd;
  char *path, *tmp;
  uint64_t bytes;
};

/* A directory being listed (`L`), a batch of entries per loop turn. */
struct flist {
  struct flist *next;
  uint64_t id;
  DIR *dir;
  uint64_t count;
};

/* A forked helper doing slow work off the loop (recursive removal). */
struct helper {
  struct helper *next;
  uint64_t id;
  pid_t pid;
  char *path;
  int detached;
};

static struct exec *execs;
static struct fread *reads;
static struct fwrite *writes;
static struct flist *lists;
static struct helper *helpers;

static struct buf out;             /* lines for the host, not yet written */
static struct buf inb;             /* host bytes not yet parsed into lines */
static int in_discarding;          /* inside an over-long line: drop bytes up to the next '\n' */
static int last_sent_nl = 1;       /* the last byte written to the host ended a line */

static const char *device_path;    /* --device PATH, else NULL: the channel is fd 0/1 */
static int chan_in = -1, chan_out = -1;
static int chan_in_nonblock;
static int chan_heard;             /* device mode: bytes arrived since the device was (re)opened */
static int64_t chan_retry_at;      /* device mode: when to reopen a lost device */
static int64_t in_paused_until;    /* stdio mode as PID 1: host input hit EOF, look again then */

static int am_pid1;
static int sig_fd = -1;
static int quiesce_pending, quiesced;
static uint64_t next_id = 1;       /* one more than the highest request id seen */
static unsigned tmp_counter;

static char **base_env;            /* K=V strings given to every command, request env merged over */
static size_t base_envc;

static unsigned char iobuf[CHUNK]; /* scratch for one chunk of child output or file data */

/* ==== 2. utilities =================================================================================== */

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logmsg(const char *fmt, ...) {
  char b[512];
  int n = snprintf(b, sizeof b, "berth-agent: ");
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(b + n, sizeof b - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof b - 2) n = (int)sizeof b - 2;
  b[n++] = '\n';
  /* fd 2 may be a pipe nobody reads (and is shared, so it cannot be made non-blocking): drop the line
   * rather than block the loop on it. */
  struct pollfd p = {.fd = 2, .events = POLLOUT};
  if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT)) {
    ssize_t ignored = write(2, b, (size_t)n);
    (void)ignored;
  }
}

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) {
    logmsg("out of memory");
    abort();
  }
  return p;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    logmsg("out of memory");
    abort();
  }
  return p;
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xrealloc(NULL, n), s, n);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Returns a pointer to n writable bytes at the end of b (commit them by adding to b->len). */
static char *buf_reserve(struct buf *b, size_t n) {
  if (b->head && b->head + b->len + n > b->cap) {
    memmove(b->p, b->p + b->head, b->len);
    b->head = 0;
  }
  if (b->len + n > b->cap) {
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->len + n) c *= 2;
    b->p = xrealloc(b->p, c);
    b->cap = c;
  }
  return b->p + b->head + b->len;
}

static void buf_append(struct buf *b, const void *d, size_t n) {
  memcpy(buf_reserve(b, n), d, n);
  b->len += n;
}

static void buf_consume(struct buf *b, size_t n) {
  b->head += n;
  b->len -= n;
  if (!b->len) b->head = 0;
}

static void buf_free(struct buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

static int write_all(int fd, const void *d, size_t n) {
  const char *p = d;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* A fresh temporary name beside `path` (same directory, so rename() is atomic). */
static char *tmp_name_beside(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t dirlen = slash ? (size_t)(slash - path) : 0;
  char *t = xrealloc(NULL, dirlen + 64);
  snprintf(t, dirlen + 64, "%.*s/.berth-tmp-%d-%u", (int)dirlen, path, (int)getpid(), ++tmp_counter);
  return t;
}

/* Creates a temporary file beside path; returns its fd (and name in *tmp) or -errno. */
static int create_tmp_beside(const char *path, mode_t mode, char **tmp) {
  for (int tries = 0; tries < 8; tries++) {
    *tmp = tmp_name_beside(path);
    int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd >= 0) {
      if (fchmod(fd, mode) < 0) { /* keep 0600 rather than fail: the content is what matters */ }
      return fd;
    }
    int e = errno;
    free(*tmp);
    *tmp = NULL;
    if (e != EEXIST) return -e;
  }
  return -EEXIST;
}

/* fsync the directory holding path, so a rename into it survives a crash. Best effort. */
static void fsync_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[PATH_MAX];
  size_t n = slash && slash != path ? (size_t)(slash - path) : 1;
  if (n >= sizeof dir) return;
  memcpy(dir, path, n);
  dir[n] = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* Writes data to path atomically (temporary file, rename; with durable, fsyncs too). Returns 0 or an
 * errno. Identity files are rewritten at every restore, so they need atomicity but not durability, and
 * skipping fsync keeps a wake fast under TCG. */
static int write_file_atomic(const char *path, const void *data, size_t n, mode_t mode, int durable) {
  char *tmp;
  int fd = create_tmp_beside(path, mode, &tmp);
  if (fd < 0) return -fd;
  int e = write_all(fd, data, n);
  if (!e && durable && fsync(fd) < 0) e = errno;
  if (close(fd) < 0 && !e) e = errno;
  if (!e && rename(tmp, path) < 0) e = errno;
  if (e) unlink(tmp);
  else if (durable) fsync_parent(path);
  free(tmp);
  return e;
}

/* ==== 3. base64 (standard alphabet, padded; "-" is the empty string) ================================= */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static signed char b64_rev[256];

static void b64_init(void) {
  memset(b64_rev, -1, sizeof b64_rev);
  for (int i = 0; i < 64; i++) b64_rev[(unsigned char)B64[i]] = (signed char)i;
}

static size_t b64_encode(char *dst, const unsigned char *s, size_t n) {
  char *d = dst;
  for (; n >= 3; s += 3, n -= 3) {
    uint32_t v = (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2];
    *d++ = B64[v >> 18];
    *d++ = B64[(v >> 12) & 63];
    *d++ = B64[(v >> 6) & 63];
    *d++ = B64[v & 63];
  }
  if (n) {
    uint32_t v = (uint32_t)s[0] << 16 | (n == 2 ? (uint32_t)s[1] << 8 : 0);
    *d++ = B64[v >> 18];
    *d++ = B64[(v >> 12) & 63];
    *d++ = n == 2 ? B64[(v >> 6) & 63] : '=';
    *d++ = '=';
  }
  return (size_t)(d - dst);
}

/*
 * Decodes the NUL-terminated token s in place (the output never overtakes the input) and
 * NUL-terminates the result. Returns 0, or -1 when s is not canonical padded base64 or "-".
 */
static int b64_decode_inplace(char *s, size_t *outlen) {
  if (s[0] == '-' && s[1] == 0) {
    s[0] = 0;
    *outlen = 0;
    return 0;
  }
  size_t n = strlen(s);
  if (n == 0 || n % 4) return -1;
  unsigned char *d = (unsigned char *)s;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int pad = (s[i + 3] == '=') + (s[i + 2] == '=');
    if (pad && i + 4 != n) return -1;
    if (pad == 1 && s[i + 3] != '=') return -1;
    int a = b64_rev[(unsigned char)s[i]], b = b64_rev[(unsigned char)s[i + 1]];
    int c = pad == 2 ? 0 : b64_rev[(unsigned char)s[i + 2]];
    int e = pad ? 0 : b64_rev[(unsigned char)s[i + 3]];
    if ((a | b | c | e) < 0) return -1;
    uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)e;
    d[o++] = (unsigned char)(v >> 16);
    if (pad < 2) d[o++] = (unsigned char)(v >> 8);
    if (pad < 1) d[o++] = (unsigned char)v;
  }
  d[o] = 0;
  *outlen = o;
  return 0;
}

/* ==== 4. output to the host ========================================================================== */

static void out_raw(const char *s, size_t n) { buf_append(&out, s, n); }

static void out_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out_fmt(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *p = buf_reserve(&out, 256);
  int n = vsnprintf(p, 256, fmt, ap);
  va_end(ap);
  if (n >= 256) {
    p = buf_reserve(&out, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  out.len += (size_t)n;
}

static void out_b64(const void *d, size_t n) {
  if (!n) {
    out_raw("-", 1);
    return;
  }
  char *p = buf_reserve(&out, 4 * ((n + 2) / 3));
  out.len += b64_encode(p, d, n);
}

static void out_data_line(char tag, uint64_t id, const void *d, size_t n) {
  out_fmt("%c %" PRIu64 " ", tag, id);
  out_b64(d, n);
  out_raw("\n", 1);
}

static void reply_ok(uint64_t id, const char *value) { out_fmt("r %" PRIu64 " 0 %s\n", id, value); }

static void reply_count(uint64_t id, uint64_t n) { out_fmt("r %" PRIu64 " 0 %" PRIu64 "\n", id, n); }

/* `r <id> <errno> <base64 "what path: strerror">` */
static void reply_err(uint64_t id, int err, const char *what, const char *path) {
  char msg[PATH_MAX + 256];
  int n = snprintf(msg, sizeof msg, "%s%s%s: %s", what, path ? " " : "", path ? path : "", strerror(err));
  if (n < 0) n = 0;
  if (n >= (int)sizeof msg) n = (int)sizeof msg - 1;
  out_fmt("r %" PRIu64 " %d ", id, err > 0 ? err : EIO);
  out_b64(msg, (size_t)n);
  out_raw("\n", 1);
}

/* Drops queued lines that were not started yet (keeps the rest of a half-written line intact). */
static void out_drop_unsent(void) {
  size_t keep = 0;
  if (!last_sent_nl) {
    char *nl = memchr(out.p + out.head, '\n', out.len);
    keep = nl ? (size_t)(nl - (out.p + out.head)) + 1 : out.len;
  }
  out.len = keep;
  if (!keep) out.head = 0;
}

/* ==== 5. line parsing ================================================================================ */

static char **tok;
static size_t ntok, tokcap;

/* Splits line on single spaces, in place. */
static void tokenize(char *line) {
  ntok = 0;
  for (char *p = line;;) {
    if (ntok == tokcap) {
      tokcap = tokcap ? tokcap * 2 : 64;
      tok = xrealloc(tok, tokcap * sizeof *tok);
    }
    tok[ntok++] = p;
    char *sp = strchr(p, ' ');
    if (!sp) break;
    *sp = 0;
    p = sp + 1;
  }
}

static int parse_u64(const char *s, uint64_t *v) {
  if (!*s || strlen(s) > 20) return -1;
  uint64_t r = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    unsigned dgt = (unsigned)(*s - '0');
    if (r > (UINT64_MAX - dgt) / 10) return -1;
    r = r * 10 + dgt;
  }
  *v = r;
  return 0;
}

/* Field accessors: 0 on success, else EINVAL (or ENAMETOOLONG for f_path). Each token once only. */
static int f_u64(size_t i, uint64_t *v) { return i < ntok && parse_u64(tok[i], v) == 0 ? 0 : EINVAL; }

static int f_flag(size_t i, int *v) {
  uint64_t u;
  if (f_u64(i, &u) || u > 1) return EINVAL;
  *v = (int)u;
  return 0;
}

static int f_oct(size_t i, mode_t *v) {
  if (i >= ntok || !*tok[i] || strlen(tok[i]) > 5) return EINVAL;
  unsigned r = 0;
  for (const char *s = tok[i]; *s; s++) {
    if (*s < '0' || *s > '7') return EINVAL;
    r = r * 8 + (unsigned)(*s - '0');
  }
  if (r > 07777) return EINVAL;
  *v = (mode_t)r;
  return 0;
}

static int f_bytes(size_t i, char **p, size_t *n) {
  if (i >= ntok || b64_decode_inplace(tok[i], n)) return EINVAL;
  *p = tok[i];
  return 0;
}

/* A text field: base64 without NUL bytes. */
static int f_str(size_t i, char **p) {
  size_t n;
  if (f_bytes(i, p, &n) || strlen(*p) != n) return EINVAL;
  return 0;
}

/* An absolute path. */
static int f_path(size_t i, char **p) {
  if (f_str(i, p) || (*p)[0] != '/') return EINVAL;
  if (strlen(*p) >= PATH_MAX) return ENAMETOOLONG;
  return 0;
}

/* ==== 6. commands (X I C K) ========================================================================== */

/* The base environment with the request's K=V items merged over it (pointers are borrowed). */
static char **merge_env(char **items, size_t n) {
  char **env = xcalloc(base_envc + n + 1, sizeof *env);
  size_t c = 0;
  for (size_t i = 0; i < base_envc; i++) env[c++] = base_env[i];
  for (size_t i = 0; i < n; i++) {
    size_t klen = (size_t)(strchr(items[i], '=') - items[i]) + 1;
    size_t j = 0;
    while (j < c && strncmp(env[j], items[i], klen) != 0) j++;
    env[j] = items[i];
    if (j == c) c++;
  }
  env[c] = NULL;
  return env;
}

/* An fd reading as EOF, for a command without stdin (/dev/null may be missing in a bare rootfs). */
static int null_input(void) {
  int fd = open("/dev/null", O_RDONLY);
  if (fd >= 0) return fd;
  int p[2];
  if (pipe(p) < 0) return -1;
  close(p[1]);
  return p[0];
}

/* In the forked child: never returns. Exit 127 when the program or cwd is missing, else 126. */
static void __attribute__((noreturn))
child_exec(char **argv, char **envp, const char *cwd, int in_fd, int out_fd, int err_fd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL); /* ignored dispositions survive execve; ours must not leak into commands */
  setpgid(0, 0);
  if (in_fd < 0) in_fd = null_input();
  if (in_fd >= 0) dup2(in_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
#ifdef SYS_close_range
  syscall(SYS_close_range, 3U, ~0U, 0U); /* everything of ours is CLOEXEC anyway; this is belt and braces */
#endif
  const char *what = "chdir", *arg = cwd;
  if (!cwd[0] || chdir(cwd) == 0) {
    environ = envp; /* so execvp searches the command's own PATH */
    execvp(argv[0], argv);
    what = "exec";
    arg = argv[0];
  }
  int e = errno;
  dprintf(2, "berth-agent: %s %s: %s\n", what, arg, strerror(e));
  _exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

static struct exec *find_exec(uint64_t id) {
  for (struct exec *x = execs; x; x = x->next)
    if (x->id == id && !x->detached) return x;
  return NULL;
}

/* Forks and starts a command; answers `r <id> 0 <pid>` or `r <id> <errno> ...`. */
static void spawn_exec(uint64_t id, char **argv, char **envp, const char *cwd, int want_stdin, uint64_t timeout) {
  int o[2] = {-1, -1}, e[2] = {-1, -1}, in[2] = {-1, -1};
  if (pipe2(o, O_CLOEXEC) < 0 || pipe2(e, O_CLOEXEC) < 0 || (want_stdin && pipe2(in, O_CLOEXEC) < 0)) {
    int err = errno;
    close_fd(&o[0]), close_fd(&o[1]), close_fd(&e[0]), close_fd(&e[1]), close_fd(&in[0]), close_fd(&in[1]);
    reply_err(id, err, "pipe", NULL);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) child_exec(argv, envp, cwd, in[0], o[1], e[1]);
  int err = errno;
  close_fd(&o[1]), close_fd(&e[1]), close_fd(&in[0]);
  if (pid < 0) {
    close_fd(&o[0]), close_fd(&e[0]), close_fd(&in[1]);
    reply_err(id, err, "fork", NULL);
    return;
  }
  setpgid(pid, pid); /* also in the parent, so a kill right after fork already reaches the group */
  struct exec *x = xcalloc(1, sizeof *x);
  x->id = id;
  x->pid = pid;
  x->fd_out = o[0];
  x->fd_err = e[0];
  x->fd_in = in[1];
  set_nonblock(x->fd_out);
  set_nonblock(x->fd_err);
  if (x->fd_in >= 0) set_nonblock(x->fd_in);
  x->deadline = timeout ? now_ms() + (int64_t)timeout : 0;
  x->next = execs;
  execs = x;
  out_fmt("r %" PRIu64 " 0 %d\n", id, (int)pid);
}

/* X <id> <flags> <timeoutMs> <cwd> <argc> <arg>... <envc> <env>... */
static void cmd_exec(uint64_t id) {
  uint64_t flags, timeout, argc, envc;
  char *cwd;
  if (f_u64(2, &flags) || f_u64(3, &timeout) || f_str(4, &cwd) || f_u64(5, &argc) || argc == 0 ||
      argc > ntok || f_u64(6 + argc, &envc) || envc > ntok || ntok != 7 + argc + envc) {
    reply_err(id, EINVAL, "malformed X line", NULL);
    return;
  }
  if (timeout > (uint64_t)INT64_MAX / 4) timeout = (uint64_t)INT64_MAX / 4;
  char **argv = xcalloc(argc + 1, sizeof *argv);
  char **items = xcalloc(envc + 1, sizeof *items);
  int bad = 0;
  for (size_t i = 0; i < argc; i++) bad |= f_str(6 + i, &argv[i]);
  for (size_t i = 0; i < envc; i++) {
    bad |= f_str(7 + argc + i, &items[i]);
    if (!bad && (items[i][0] == '=' || !strchr(items[i], '='))) bad = 1;
  }
  if (bad) {
    reply_err(id, EINVAL, "malformed X argument or environment item", NULL);
  } else {
    char **envp = merge_env(items, envc);
    spawn_exec(id, argv, envp, cwd, (int)(flags & 1), timeout);
    free(envp);
  }
  free(argv);
  free(items);
}

/* Moves queued stdin into the child's pipe; acknowledges taken (or dropped) bytes with `i`. */
static void exec_stdin_flush(struct exec *x) {
  size_t acked = 0;
  while (x->fd_in >= 0 && x->stdin_q.len) {
    ssize_t n = write(x->fd_in, x->stdin_q.p + x->stdin_q.head, x->stdin_q.len);
    if (n > 0) {
      buf_consume(&x->stdin_q, (size_t)n);
      acked += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      break;
    } else { /* EPIPE: the child closed its stdin; what is left is dropped but still acknowledged */
      acked += x->stdin_q.len;
      buf_consume(&x->stdin_q, x->stdin_q.len);
      close_fd(&x->fd_in);
    }
  }
  if (acked && !x->detached) out_fmt("i %" PRIu64 " %zu\n", x->id, acked);
  if (!x->stdin_q.len) {
    buf_free(&x->stdin_q);
    if (x->stdin_close_pending) close_fd(&x->fd_in);
  }
}

/* I <id> <data> */
static void cmd_stdin(uint64_t id) {
  struct exec *x = find_exec(id);
  char *d;
  size_t n;
  if (!x || ntok != 3 || f_bytes(2, &d, &n) || !n) return;
  if (x->fd_in < 0 || x->stdin_close_pending) { /* nowhere to go: drop, but release the host's window */
    out_fmt("i %" PRIu64 " %zu\n", id, n);
    return;
  }
  buf_append(&x->stdin_q, d, n);
  exec_stdin_flush(x); /* try at once: saves a poll round for the common small write */
}

/* C <id> */
static void cmd_close_stdin(uint64_t id) {
  struct exec *x = find_exec(id);
  if (!x) return;
  if (x->stdin_q.len) x->stdin_close_pending = 1;
  else close_fd(&x->fd_in);
}

/* K <id> <signal> */
static void cmd_kill(uint64_t id) {
  struct exec *x = find_exec(id);
  uint64_t sig;
  if (!x || f_u64(2, &sig) || sig > 64) return;
  kill(-x->pid, (int)sig);
}

/* Reads one chunk of child output; returns bytes read, 0 at EOF/closed, -1 when nothing is there. */
static ssize_t exec_read(struct exec *x, int *fd, char tag) {
  if (*fd < 0) return 0;
  ssize_t n = read(*fd, iobuf, sizeof iobuf);
  if (n > 0) {
    if (!x->detached) out_data_line(tag, x->id, iobuf, (size_t)n);
    return n;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return -1;
  close_fd(fd);
  return 0;
}

/* What is already in the pipe belongs to the command; a background writer's later output does not. */
static void exec_drain(struct exec *x, int *fd, char tag) {
  size_t total = 0;
  ssize_t n;
  while (total < DRAIN_MAX && (n = exec_read(x, fd, tag)) > 0) total += (size_t)n;
}

/* The direct child was reaped: drain, report `x`, and let go of the pipes. */
static void exec_finish(struct exec **pp, int status) {
  struct exec *x = *pp;
  exec_drain(x, &x->fd_out, 'o');
  exec_drain(x, &x->fd_err, 'e');
  if (!x->detached) {
    int code = 255, sig = 0;
    if (WIFEXITED(status)) code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) sig = WTERMSIG(status), code = 128 + sig;
    out_fmt("x %" PRIu64 " %d %d %d\n", x->id, code, sig, x->timed_out);
  }
  close_fd(&x->fd_out);
  close_fd(&x->fd_err);
  close_fd(&x->fd_in);
  buf_free(&x->stdin_q);
  *pp = x->next;
  free(x);
}

static void check_timeouts(int64_t now) {
  for (struct exec *x = execs; x; x = x->next) {
    if (x->deadline && now >= x->deadline) {
      kill(-x->pid, SIGKILL);
      x->timed_out = 1;
      x->deadline = 0;
    }
  }
}

/* ==== 7. file reads and writes (R G W D F A) ========================================================= */

static void fread_free(struct fread **pp) {
  struct fread *r = *pp;
  close(r->fd);
  *pp = r->next;
  free(r);
}

static void fwrite_free(struct fwrite **pp, int remove_tmp) {
  struct fwrite *w = *pp;
  if (w->fd >= 0) close(w->fd);
  if (remove_tmp) unlink(w->tmp);
  free(w->path);
  free(w->tmp);
  *pp = w->next;
  free(w);
}

/* R <id> <path>: only regular files (a FIFO or device could block the loop or never end). */
static void cmd_read(uint64_t id) {
  char *path;
  int bad = ntok != 3 ? EINVAL : f_path(2, &path);
  if (bad) {
    reply_err(id, bad, "read", NULL);
    return;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  struct stat st;
  int err = fd < 0 ? errno : fstat(fd, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : !S_ISREG(st.st_mode) ? EINVAL : 0;
  if (err) {
    if (fd >= 0) close(fd);
    reply_err(id, err, "read", path);
    return;
  }
  struct fread *r = xcalloc(1, sizeof *r);
  r->id = id;
  r->fd = fd;
  r->credit = READ_CREDIT;
  r->next = reads;
  reads = r;
}

/* Sends up to a few chunks of every read that has credit, while the output buffer has room. */
static void pump_reads(void) {
  for (struct fread **pp = &reads; *pp;) {
    struct fread *r = *pp;
    int done = 0;
    for (int k = 0; k < 4 && r->credit && out.len < OUT_HIGH; k++) {
      ssize_t n = read(r->fd, iobuf, sizeof iobuf);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        out_data_line('D', r->id, iobuf, (size_t)n);
        r->credit--;
        r->bytes += (uint64_t)n;
        continue;
      }
      if (n == 0) reply_count(r->id, r->bytes);
      else reply_err(r->id, errno, "read", NULL);
      done = 1;
      break;
    }
    if (done) fread_free(pp);
    else pp = &r->next;
  }
}

static int reads_can_progress(void) {
  for (struct fread *r = reads; r; r = r->next)
    if (r->credit) return 1;
  return 0;
}

/* G <id> <n> */
static void cmd_grant(uint64_t id) {
  uint64_t n;
  if (f_u64(2, &n)) return;
  for (struct fread *r = reads; r; r = r->next) {
    if (r->id == id) {
      r->credit = r->credit + n > MAX_CREDIT ? MAX_CREDIT : r->credit + n;
      return;
    }
  }
}

static struct fwrite **find_write(uint64_t id) {
  struct fwrite **pp = &writes;
  while (*pp && (*pp)->id != id) pp = &(*pp)->next;
  return *pp ? pp : NULL;
}

static int is_dir_nofollow(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* W <id> <path> <mode>: the temporary file is created now, so a bad parent fails before any data. */
static void cmd_write(uint64_t id) {
  char *path;
  mode_t mode;
  int bad = ntok != 4 ? EINVAL : f_path(2, &path);
  if (!bad) bad = f_oct(3, &mode);
  const char *base = bad ? NULL : strrchr(path, '/') + 1;
  if (!bad && (!*base || !strcmp(base, ".") || !strcmp(base, "..") || is_dir_nofollow(path))) bad = EISDIR;
  if (bad) {
    reply_err(id, bad, "write", bad == EISDIR ? path : NULL);
    return;
  }
  char *tmp;
  int fd = create_tmp_beside(path, mode, &tmp);
  if (fd < 0) {
    reply_err(id, -fd, "write", path);
    return;
  }
  struct fwrite *w = xcalloc(1, sizeof *w);
  w->id = id;
  w->fd = fd;
  w->path = xstrdup(path);
  w->tmp = tmp;
  w->next = writes;
  writes = w;
}

/* D <id> <data> */
static void cmd_data(uint64_t id) {
  struct fwrite **pp = find_write(id);
  if (!pp) return;
  char *d;
  size_t n;
  int err = ntok != 3 || f_bytes(2, &d, &n) ? EINVAL : write_all((*pp)->fd, d, n);
  if (err) {
    reply_err(id, err, "write", (*pp)->path);
    fwrite_free(pp, 1);
    return;
  }
  (*pp)->bytes += n;
}

/* F <id>: fsync, rename over the target, fsync the directory. */
static void cmd_finish(uint64_t id) {
  struct fwrite **pp = find_write(id);
  if (!pp) return;
  struct fwrite *w = *pp;
  int err = fsync(w->fd) < 0 ? errno : 0;
  if (close(w->fd) < 0 && !err) err = errno;
  w->fd = -1;
  if (!err && rename(w->tmp, w->path) < 0) err = errno;
  if (err) {
    reply_err(id, err, "write", w->path);
    fwrite_free(pp, 1);
    return;
  }
  fsync_parent(w->path);
  reply_count(id, w->bytes);
  fwrite_free(pp, 0);
}

/* A <id>: aborts a write (temporary file removed) or a read. */
static void cmd_abort(uint64_t id) {
  struct fwrite **wp = find_write(id);
  if (wp) {
    fwrite_free(wp, 1);
    reply_ok(id, "-");
    return;
  }
  for (struct fread **rp = &reads; *rp; rp = &(*rp)->next) {
    if ((*rp)->id == id) {
      fread_free(rp);
      reply_ok(id, "-");
      return;
    }
  }
}

/* ==== 8. file system queries and changes (L S P M U) ================================================= */

static const char *type_name(mode_t m) {
  return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

/* " <type> <size> <mode> <mtimeMs>" */
static void out_stat_fields(const struct stat *st) {
  int64_t mtime = (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
  out_fmt(" %s %" PRIu64 " %o %" PRId64, type_name(st->st_mode), (uint64_t)st->st_size,
          (unsigned)(st->st_mode & 07777), mtime);
}

/* L <id> <path> */
static void cmd_list(uint64_t id) {
  char *path;
  int bad = ntok != 3 ? EINVAL : f_path(2, &path);
  DIR *d = bad ? NULL : opendir(path);
  if (!d) {
    reply_err(id, bad ? bad : errno, "list", bad ? NULL : path);
    return;
  }
  struct flist *l = xcalloc(1, sizeof *l);
  l->id = id;
  l->dir = d;
  l->next = lists;
  lists = l;
}

/* Emits a batch of entries of every listing (bounded so one huge directory cannot hog the loop). */
static void pump_lists(void) {
  for (struct flist **pp = &lists; *pp;) {
    struct flist *l = *pp;
    int done = 0;
    for (int k = 0; k < LIST_BATCH && out.len < OUT_HIGH; k++) {
      errno = 0;
      struct dirent *de = readdir(l->dir);
      if (!de) {
        if (errno) reply_err(l->id, errno, "list", NULL);
        else reply_count(l->id, l->count);
        done = 1;
        break;
      }
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      struct stat st;
      if (fstatat(dirfd(l->dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue; /* gone meanwhile */
      out_fmt("e %" PRIu64, l->id);
      out_stat_fields(&st);
      out_raw(" ", 1);
      out_b64(de->d_name, strlen(de->d_name));
      out_raw("\n", 1);
      l->count++;
    }
    if (done) {
      closedir(l->dir);
      *pp = l->next;
      free(l);
    } else {
      pp = &l->next;
    }
  }
}

/* S <id> <path> */
static void cmd_stat(uint64_t id) {
  char *path;
  struct stat st;
  int bad = ntok != 3 ? EINVAL : f_path(2, &path);
  if (!bad && lstat(path, &st) < 0) bad = errno;
  if (bad) {
    reply_err(id, bad, "stat", ntok == 3 && bad != EINVAL ? path : NULL);
    return;
  }
  out_fmt("s %" PRIu64, id);
  out_stat_fields(&st);
  out_raw("\n", 1);
}

/*
 * Resolves an absolute path the way open() would walk it, except that components below a missing one
 * are taken lexically (".." folded). If ".." climbs back out of the missing part, resolution resumes,
 * so "/missing/../link" still follows link. Returns 0 with the result in res (PATH_MAX), or an errno.
 */
static int resolve_path(const char *path, char *res) {
  char rest[2 * PATH_MAX];
  size_t rlen = 0, rpos = 0, missing = 0; /* missing: lexical components at the end of res */
  int links = 0;
  if (strlen(path) >= sizeof rest) return ENAMETOOLONG;
  strcpy(rest, path);
  res[0] = 0;
  for (;;) {
    while (rest[rpos] == '/') rpos++;
    if (!rest[rpos]) break;
    const char *c = rest + rpos;
    size_t clen = strcspn(c, "/");
    rpos += clen;
    if (clen == 1 && c[0] == '.') continue;
    if (clen == 2 && c[0] == '.' && c[1] == '.') {
      while (rlen && res[rlen - 1] != '/') rlen--;
      if (rlen) rlen--;
      res[rlen] = 0;
      if (missing) missing--;
      continue;
    }
    if (rlen + 1 + clen >= PATH_MAX) return ENAMETOOLONG;
    size_t prev = rlen;
    res[rlen++] = '/';
    memcpy(res + rlen, c, clen);
    rlen += clen;
    res[rlen] = 0;
    if (missing) {
      missing++;
      continue;
    }
    struct stat st;
    if (lstat(res, &st) < 0) {
      if (errno != ENOENT) return errno;
      missing = 1;
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      if (++links > 40) return ELOOP;
      ssize_t tl = readlink(res, target, sizeof target - 1);
      if (tl < 0) return errno;
      size_t remain = strlen(rest + rpos);
      if ((size_t)tl + 1 + remain >= sizeof rest) return ENAMETOOLONG;
      memmove(rest + tl + 1, rest + rpos, remain + 1);
      memcpy(rest, target, (size_t)tl);
      rest[tl] = '/';
      rpos = 0;
      rlen = target[0] == '/' ? 0 : prev;
      res[rlen] = 0;
    } else if (!S_ISDIR(st.st_mode) && rest[rpos + strspn(rest + rpos, "/")]) {
      return ENOTDIR;
    }
  }
  if (!rlen) strcpy(res, "/");
  return 0;
}

/* P <id> <path> */
static void cmd_realpath(uint64_t id) {
  char *path, res[PATH_MAX];
  int bad = ntok != 3 ? EINVAL : f_path(2, &path);
  if (!bad) bad = resolve_path(path, res);
  if (bad) {
    reply_err(id, bad, "realpath", ntok == 3 && bad != EINVAL ? path : NULL);
    return;
  }
  out_fmt("p %" PRIu64 " ", id);
  out_b64(res, strlen(res));
  out_raw("\n", 1);
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Like mkdir(1): -p creates missing parents (0755 before umask) and accepts an existing directory. The
 * leaf gets exactly `mode`. Returns 0 or an errno, with the failing prefix left in path. */
static int make_dirs(char *path, int parents, mode_t mode) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') path[--n] = 0;
  for (char *s = path + 1; parents && (s = strchr(s, '/')); s++) {
    *s = 0;
    int failed = mkdir(path, 0755) < 0 && errno != EEXIST;
    int e = errno;
    if (failed) return e;
    *s = '/';
  }
  if (mkdir(path, mode) == 0) return chmod(path, mode) < 0 ? errno : 0;
  if (errno == EEXIST && parents && is_dir(path)) return 0;
  return errno;
}

/* M <id> <path> <parents> <mode> */
static void cmd_mkdir(uint64_t id) {
  char *path;
  int parents = 0;
  mode_t mode = 0755;
  int bad = ntok != 5 ? EINVAL : f_path(2, &path);
  if (!bad) bad = f_flag(3, &parents);
  if (!bad) bad = f_oct(4, &mode);
  if (bad) {
    reply_err(id, bad, "mkdir", NULL);
    return;
  }
  int err = make_dirs(path, parents, mode);
  if (err) reply_err(id, err, "mkdir", path);
  else reply_ok(id, "-");
}

static int rm_entry(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)type, (void)ftw;
  return remove(p) < 0 && errno != ENOENT ? errno : 0;
}

/* True when path names "/" lexically (".", ".." and repeated slashes folded). */
static int is_root(const char *path) {
  int depth = 0;
  for (const char *s = path; *s;) {
    while (*s == '/') s++;
    size_t n = strcspn(s, "/");
    if (!n) break;
    if (n == 2 && s[0] == '.' && s[1] == '.') depth = depth ? depth - 1 : 0;
    else if (!(n == 1 && s[0] == '.')) depth++;
    s += n;
  }
  return depth == 0;
}

/* Recursive removal runs in a forked helper so a big tree does not stall the loop. */
static void start_rm_helper(uint64_t id, const char *path) {
  pid_t pid = fork();
  if (pid == 0) {
    int r = nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
    _exit(r < 0 ? (errno ? errno : EIO) : r);
  }
  if (pid < 0) { /* no helper: do it here */
    int r = nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
    if (r) reply_err(id, r < 0 ? errno : r, "remove", path);
    else reply_ok(id, "-");
    return;
  }
  struct helper *h = xcalloc(1, sizeof *h);
  h->id = id;
  h->pid = pid;
  h->path = xstrdup(path);
  h->next = helpers;
  helpers = h;
}

/* U <id> <path> <recursive>. A missing path is ENOENT in both modes (unlike rm -f). */
static void cmd_remove(uint64_t id) {
  char *path;
  int recursive = 0;
  struct stat st;
  int bad = ntok != 4 ? EINVAL : f_path(2, &path);
  if (!bad) bad = f_flag(3, &recursive);
  if (bad) {
    reply_err(id, bad, "remove", NULL);
    return;
  }
  int err = is_root(path) ? EPERM : lstat(path, &st) < 0 ? errno : 0;
  if (!err && S_ISDIR(st.st_mode) && recursive) {
    start_rm_helper(id, path);
    return;
  }
  if (!err && (S_ISDIR(st.st_mode) ? rmdir(path) : unlink(path)) < 0) err = errno;
  if (err) reply_err(id, err, "remove", path);
  else reply_ok(id, "-");
}

static void helper_finish(struct helper **pp, int status) {
  struct helper *h = *pp;
  if (!h->detached) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) reply_ok(h->id, "-");
    else reply_err(h->id, WIFEXITED(status) ? WEXITSTATUS(status) : EINTR, "remove", h->path);
  }
  *pp = h->next;
  free(h->path);
  free(h);
}

/* ==== 9. identity (N) ================================================================================ */

static int valid_hostname(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 64) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.'))
      return 0;
  return 1;
}

static int valid_machine_id(const char *s) {
  if (strlen(s) != 32) return 0;
  for (; *s; s++)
    if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return 0;
  return 1;
}

/* Mixes seed into the kernel pool: always written, credited as entropy when we may (CAP_SYS_ADMIN). */
static void mix_seed(const char *seed, size_t n) {
  int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || !n) {
    if (fd >= 0) close(fd);
    return;
  }
  if (write_all(fd, seed, n)) { /* best effort */ }
  struct rand_pool_info *info = xcalloc(1, sizeof *info + n);
  info->entropy_count = (int)(n * 8);
  info->buf_size = (int)n;
  memcpy(info->buf, seed, n);
  ioctl(fd, RNDADDENTROPY, info); /* EPERM or ENOTTY (gVisor) are fine */
  /* Crediting entropy does not reseed a pool that is already ready (Linux >= 5.18): ask for it, so a
   * fork branch stops sharing its parent's output even without vmgenid. */
  ioctl(fd, RNDRESEEDCRNG);
  free(info);
  close(fd);
}

/* SIGUSR2 to every pid listed in /run/berth/resume.pids. */
static void signal_resume_pids(void) {
  char b[65536];
  int fd = open("/run/berth/resume.pids", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, b, sizeof b - 1);
  close(fd);
  if (n <= 0) return;
  b[n] = 0;
  for (char *line = strtok(b, "\n"); line; line = strtok(NULL, "\n")) {
    uint64_t pid;
    if (parse_u64(line, &pid) == 0 && pid > 1 && pid < INT_MAX && (pid_t)pid != getpid()) kill((pid_t)pid, SIGUSR2);
  }
}

/* N <id> <hostname> <machineId> <generation> <reason> <seed>: every step is tried; the first failure
 * is reported. */
static void cmd_identity(uint64_t id) {
  char *host, *mid, *reason, *seed;
  uint64_t gen;
  size_t seedlen;
  if (ntok != 7 || f_str(2, &host) || f_str(3, &mid) || f_u64(4, &gen) || f_str(5, &reason) ||
      f_bytes(6, &seed, &seedlen) || !valid_hostname(host) || !valid_machine_id(mid) ||
      (strcmp(reason, "create") && strcmp(reason, "wake") && strcmp(reason, "fork"))) {
    reply_err(id, EINVAL, "identity: malformed N line", NULL);
    return;
  }
  int err = 0;
  const char *what = NULL, *where = NULL;
#define STEP(e, w, p) do { int e_ = (e); if (e_ && !err) err = e_, what = (w), where = (p); } while (0)
  STEP(sethostname(host, strlen(host)) < 0 ? errno : 0, "sethostname", host);
  char text[64];
  int tn = snprintf(text, sizeof text, "%s\n", mid);
  STEP(write_file_atomic("/etc/machine-id", text, (size_t)tn, 0444, 0), "write", "/etc/machine-id");
  mix_seed(seed, seedlen);
  char dir[] = "/run/berth";
  STEP(make_dirs(dir, 1, 0755), "mkdir", "/run/berth");
  char json[256];
  int jn = snprintf(json, sizeof json, "{\"generation\":%" PRIu64 ",\"reason\":\"%s\",\"hostname\":\"%s\",\"machineId\":\"%s\"}\n",
                    gen, reason, host, mid);
  STEP(write_file_atomic("/run/berth/resume", json, (size_t)jn, 0644, 0), "write", "/run/berth/resume");
#undef STEP
  signal_resume_pids();
  if (err) reply_err(id, err, what, where);
  else reply_ok(id, "-");
}

/* ==== 10. hello, quiesce, reset (H Q) ================================================================ */

/* A new host abandons everything the old one had in flight (see PROTOCOL.md, "H ... 1"). Commands keep
 * running; their output is read and dropped, and no `x` is sent. */
static void reset_channel_state(void) {
  for (struct exec *x = execs; x; x = x->next) {
    x->detached = 1;
    buf_free(&x->stdin_q);
    close_fd(&x->fd_in);
  }
  for (struct helper *h = helpers; h; h = h->next) h->detached = 1;
  while (reads) fread_free(&reads);
  while (writes) fwrite_free(&writes, 1);
  while (lists) {
    struct flist *l = lists;
    closedir(l->dir);
    lists = l->next;
    free(l);
  }
  out_drop_unsent();
}

/* H <nonce> [<reset>] → h <nonce> <version> <pid> <nextId> */
static void cmd_hello(void) {
  if (ntok < 2 || ntok > 3 || !*tok[1] || strlen(tok[1]) > 256) return;
  for (const char *s = tok[1]; *s; s++)
    if (*s <= ' ' || *s > '~') return;
  if (ntok == 3 && strcmp(tok[2], "0") && strcmp(tok[2], "1")) return;
  if (ntok == 3 && tok[2][0] == '1') reset_channel_state();
  out_fmt("h %s %d %d %" PRIu64 "\n", tok[1], PROTOCOL_VERSION, (int)getpid(), next_id);
}

/* Q <id>: answered, then no output is produced or written until the next host line. */
static void cmd_quiesce(uint64_t id) {
  reply_ok(id, "-");
  quiesce_pending = 1;
}

/* ==== 11. dispatch =================================================================================== */

static void handle_line(char *line, size_t len) {
  quiesced = quiesce_pending = 0; /* any line ends a quiesce (and cancels one not yet in effect) */
  if (!len || memchr(line, 0, len)) return;
  tokenize(line);
  if (tok[0][0] == 0 || tok[0][1] != 0) return;
  char verb = tok[0][0];
  if (verb == 'H') {
    cmd_hello();
    return;
  }
  uint64_t id;
  if (ntok < 2 || parse_u64(tok[1], &id)) return; /* no id: nothing to answer to */
  /* Hosts use ids below 2^53 (exact in a JS number); a garbage line with a huge id must not push nextId
   * out of their reach. */
  if (id >= next_id && id < (UINT64_C(1) << 53)) next_id = id + 1;
  switch (verb) {
  case 'X': cmd_exec(id); break;
  case 'I': cmd_stdin(id); break;
  case 'C': cmd_close_stdin(id); break;
  case 'K': cmd_kill(id); break;
  case 'W': cmd_write(id); break;
  case 'D': cmd_data(id); break;
  case 'F': cmd_finish(id); break;
  case 'A': cmd_abort(id); break;
  case 'R': cmd_read(id); break;
  case 'G': cmd_grant(id); break;
  case 'L': cmd_list(id); break;
  case 'S': cmd_stat(id); break;
  case 'P': cmd_realpath(id); break;
  case 'M': cmd_mkdir(id); break;
  case 'U': cmd_remove(id); break;
  case 'N': cmd_identity(id); break;
  case 'Q': cmd_quiesce(id); break;
  default:
    /* An upper-case verb we do not know is a newer host: say so. Anything else is noise. */
    if (verb >= 'A' && verb <= 'Z') reply_err(id, ENOSYS, "unknown verb", NULL);
  }
}

/* Splits the input buffer into lines; discards lines over MAX_LINE whole. */
static void process_input(void) {
  char *nl;
  while (inb.len && (nl = memchr(inb.p + inb.head, '\n', inb.len))) {
    char *start = inb.p + inb.head;
    size_t n = (size_t)(nl - start);
    if (in_discarding) {
      in_discarding = 0;
    } else {
      *nl = 0;
      handle_line(start, n);
    }
    buf_consume(&inb, n + 1);
  }
  if (in_discarding || inb.len > MAX_LINE) {
    in_discarding = 1;
    buf_consume(&inb, inb.len);
  }
}

/* ==== 12. the host channel =========================================================================== */

static void kill_all_and_exit(int code) {
  for (struct exec *x = execs; x; x = x->next) kill(-x->pid, SIGKILL);
  for (struct fwrite *w = writes; w; w = w->next) unlink(w->tmp);
  _exit(code);
}

/*
 * A private, non-blocking description of fd where possible: reopening /proc/self/fd/N gives a new open
 * file description for a FIFO, pipe or tty, so O_NONBLOCK does not leak to whoever else shares the
 * original (a shell, a host process holding the same FIFO description). Sockets and files keep their
 * description; a terminal that cannot be reopened stays blocking.
 * As PID 1 (gVisor) nobody else in the sandbox holds our stdio descriptions, and the sentry's flags never
 * reach the host's, so the originals are used: only they are re-attached to new host FDs on a restore.
 */
static int private_fd(int fd, int accmode, int *nonblock) {
  struct stat st;
  *nonblock = 1;
  if (fstat(fd, &st) < 0) return -1;
  if (!am_pid1 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
    char p[32];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    int nfd = open(p, accmode | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (nfd >= 0) return nfd;
  }
  if (isatty(fd)) {
    *nonblock = 0;
    return fd;
  }
  set_nonblock(fd);
  return fd;
}

static void chan_open_device(void) {
  int fd = open(device_path, O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    chan_retry_at = now_ms() + RECONNECT_MS;
    return;
  }
  struct termios t;
  if (tcgetattr(fd, &t) == 0) { /* a real serial line: no echo, no line editing, 8-bit clean */
    cfmakeraw(&t);
    tcsetattr(fd, TCSANOW, &t);
  }
  chan_in = chan_out = fd;
  chan_in_nonblock = 1;
  buf_consume(&inb, inb.len);
  in_discarding = 0;
}

/* The host side went away (EOF or an error). */
static void chan_lost(int err, int on_output) {
  if (device_path) {
    if (chan_heard) /* once per loss, not at every retry while the host stays away */
      logmsg("channel %s lost (%s); reopening every %d ms", device_path, err ? strerror(err) : "EOF", RECONNECT_MS);
    chan_heard = 0;
    close(chan_in);
    chan_in = chan_out = -1;
    chan_retry_at = now_ms() + RECONNECT_MS;
    return;
  }
  if (!am_pid1) kill_all_and_exit(0); /* a plain process: the host is gone, so are we */
  if (on_output) { /* nobody to deliver to: drop it all (a new reader resyncs with H), keep running */
    buf_consume(&out, out.len);
    last_sent_nl = 1;
  } else {
    in_paused_until = now_ms() + RECONNECT_MS; /* PID 1 never exits; look again later */
  }
}

/* Reads what the host sent (up to 1 MiB per turn) and handles its lines; returns bytes read. */
static size_t chan_read(void) {
  size_t total = 0;
  for (int k = 0; k < 16; k++) {
    ssize_t n = read(chan_in, buf_reserve(&inb, IN_READ), IN_READ);
    if (n > 0) {
      inb.len += (size_t)n;
      total += (size_t)n;
      chan_heard = 1;
      process_input();
      if (chan_in < 0 || !chan_in_nonblock) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    chan_lost(n < 0 ? errno : 0, 0);
    break;
  }
  return total;
}

static void flush_out(void) {
  while (out.len && chan_out >= 0 && !quiesced) {
    ssize_t n = write(chan_out, out.p + out.head, out.len);
    if (n > 0) {
      last_sent_nl = out.p[out.head + (size_t)n - 1] == '\n';
      buf_consume(&out, (size_t)n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      break;
    } else {
      chan_lost(n < 0 ? errno : EIO, 1);
      break;
    }
  }
  if (!out.len && out.cap > 2 * OUT_HIGH) buf_free(&out); /* give a burst's memory back */
  if (!out.len && quiesce_pending) quiesce_pending = 0, quiesced = 1;
}

/* ==== 13. signals and reaping ======================================================================== */

static void setup_signals(void) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGCHLD);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGHUP);
  sigprocmask(SIG_BLOCK, &s, NULL);
  sig_fd = signalfd(-1, &s, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sig_fd < 0) {
    logmsg("signalfd: %s", strerror(errno));
    exit(1);
  }
  signal(SIGPIPE, SIG_IGN); /* a vanished reader must be EPIPE, not death */
}

static void reap_children(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    struct exec **xp = &execs;
    while (*xp && (*xp)->pid != pid) xp = &(*xp)->next;
    if (*xp) {
      exec_finish(xp, status);
      continue;
    }
    struct helper **hp = &helpers;
    while (*hp && (*hp)->pid != pid) hp = &(*hp)->next;
    if (*hp) helper_finish(hp, status);
    /* anything else is an orphan we inherited: reaped, nothing to report */
  }
}

/* SIGTERM/SIGINT/SIGHUP: as PID 1 the host owns our lifetime (it kills the sandbox), so they are
 * logged and ignored; as a plain process they end us, taking our commands with us. */
static void handle_signals(void) {
  struct signalfd_siginfo si;
  while (read(sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
    if (si.ssi_signo == SIGCHLD) continue;
    if (am_pid1) logmsg("ignoring signal %u from pid %u (PID 1)", si.ssi_signo, si.ssi_pid);
    else kill_all_and_exit(128 + (int)si.ssi_signo);
  }
  reap_children();
}

/* ==== 14. main loop ================================================================================== */

enum slot_kind { SLOT_EXEC_OUT, SLOT_EXEC_ERR, SLOT_EXEC_IN, SLOT_CHAN_IN, SLOT_CHAN_OUT, SLOT_SIG };
struct slot {
  enum slot_kind kind;
  struct exec *x;
};

static struct pollfd *pfds;
static struct slot *slots;
static size_t nslots, slotcap;

static void add_slot(int fd, short events, enum slot_kind kind, struct exec *x) {
  if (nslots == slotcap) {
    slotcap = slotcap ? slotcap * 2 : 64;
    pfds = xrealloc(pfds, slotcap * sizeof *pfds);
    slots = xrealloc(slots, slotcap * sizeof *slots);
  }
  pfds[nslots] = (struct pollfd){.fd = fd, .events = events};
  slots[nslots++] = (struct slot){.kind = kind, .x = x};
}

/* Exec slots first and the signal slot last: only reaping frees an exec, so pointers stay valid. */
static void build_slots(int64_t now) {
  nslots = 0;
  for (struct exec *x = execs; x; x = x->next) {
    int produce = !quiesced && (x->detached || out.len < OUT_HIGH);
    if (produce && x->fd_out >= 0) add_slot(x->fd_out, POLLIN, SLOT_EXEC_OUT, x);
    if (produce && x->fd_err >= 0) add_slot(x->fd_err, POLLIN, SLOT_EXEC_ERR, x);
    if (x->fd_in >= 0 && x->stdin_q.len) add_slot(x->fd_in, POLLOUT, SLOT_EXEC_IN, x);
  }
  if (chan_in >= 0 && now >= in_paused_until) add_slot(chan_in, POLLIN, SLOT_CHAN_IN, NULL);
  if (chan_out >= 0 && out.len && !quiesced) add_slot(chan_out, POLLOUT, SLOT_CHAN_OUT, NULL);
  add_slot(sig_fd, POLLIN, SLOT_SIG, NULL);
}

static int poll_timeout(int64_t now) {
  int64_t t = -1;
  if (!quiesced && out.len < OUT_HIGH && (reads_can_progress() || lists)) return 0;
  for (struct exec *x = execs; x; x = x->next)
    if (x->deadline && (t < 0 || x->deadline - now < t)) t = x->deadline - now;
  int64_t wake = chan_in < 0 ? chan_retry_at : in_paused_until > now ? in_paused_until : 0;
  if (wake && (t < 0 || wake - now < t)) t = wake - now;
  if (t > INT_MAX) t = INT_MAX;
  return t < 0 ? -1 : (int)t;
}

static void handle_slot(size_t i) {
  short re = pfds[i].revents;
  struct exec *x = slots[i].x;
  if (!re) return;
  switch (slots[i].kind) {
  case SLOT_EXEC_OUT: exec_read(x, &x->fd_out, 'o'); break;
  case SLOT_EXEC_ERR: exec_read(x, &x->fd_err, 'e'); break;
  case SLOT_EXEC_IN: exec_stdin_flush(x); break;
  case SLOT_CHAN_OUT: flush_out(); break;
  case SLOT_CHAN_IN:
    /* A hang-up with nothing to read (a virtio port whose host left) counts as EOF. */
    if (chan_in >= 0 && !chan_read() && chan_in >= 0 && (re & (POLLHUP | POLLERR | POLLNVAL))) chan_lost(0, 0);
    break;
  case SLOT_SIG: handle_signals(); break;
  }
}

/* Every fd 0-2 open, so pipes and files we create never land on them (dup2 in children relies on it). */
static void ensure_std_fds(void) {
  for (int fd = 0; fd < 3; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    int n = open("/dev/null", O_RDWR);
    if (n >= 0 && n != fd) {
      dup2(n, fd);
      close(n);
    }
  }
}

/* Defaults, overridden by the environment we were started with. */
static void build_base_env(void) {
  size_t n = 0;
  while (environ[n]) n++;
  base_env = xcalloc(n + 3, sizeof *base_env);
  for (size_t i = 0; i < n; i++)
    if (strchr(environ[i], '=')) base_env[base_envc++] = xstrdup(environ[i]);
  if (!getenv("PATH")) base_env[base_envc++] = xstrdup(DEFAULT_PATH);
  if (!getenv("HOME")) base_env[base_envc++] = xstrdup(DEFAULT_HOME);
}

static void usage(void) {
  fprintf(stderr, "usage: berth-agent [--device PATH]\n"
                  "  Speaks the Berth agent protocol v%d on fd 0/1, or on the serial device PATH\n"
                  "  (reopened every %d ms while the host is away).\n",
          PROTOCOL_VERSION, RECONNECT_MS);
}

static void parse_args(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      device_path = argv[++i];
    } else if (!strcmp(argv[i], "--version")) {
      printf("berth-agent protocol %d\n", PROTOCOL_VERSION);
      exit(0);
    } else {
      usage();
      exit(!strcmp(argv[i], "--help") ? 0 : 2);
    }
  }
}

int main(int argc, char **argv) {
  parse_args(argc, argv);
  am_pid1 = getpid() == 1;
  ensure_std_fds();
  b64_init();
  setup_signals();
  if (!am_pid1) prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphans come to us, as they would to PID 1 */
  build_base_env();
  if (device_path) {
    chan_open_device();
  } else {
    int nb_in, nb_out;
    chan_in = private_fd(0, O_RDONLY, &nb_in);
    chan_out = private_fd(1, O_WRONLY, &nb_out);
    chan_in_nonblock = nb_in;
    if (chan_in < 0 || chan_out < 0) {
      logmsg("stdin/stdout are not usable: %s", strerror(errno));
      return 1;
    }
  }
  for (;;) {
    int64_t now = now_ms();
    if (device_path && chan_in < 0 && now >= chan_retry_at) chan_open_device();
    build_slots(now);
    int n = poll(pfds, nslots, poll_timeout(now));
    if (n < 0 && errno != EINTR) {
      logmsg("poll: %s", strerror(errno));
      return 1;
    }
    for (size_t i = 0; n > 0 && i < nslots; i++) handle_slot(i);
    check_timeouts(now_ms());
    if (!quiesced) {
      pump_reads();
      pump_lists();
    }
    flush_out();
  }
}
