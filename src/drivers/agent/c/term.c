/* Section 18: terminals (T). A terminal is a background process (bg.c) whose stdout is a PTY: its output
 * goes to the record's stdout ring (so `O` replays and follows it, `Z` signals it, and it survives a host
 * reset, hibernate, wake and fork like any background process), its input is queued to the PTY master.
 * See PROTOCOL.md, "Terminals". */
#include "agent.h"

/* ==== 18. terminals (T) ============================================================================== */

static struct exec *term_exec(struct bg *b) {
  for (struct exec *x = execs; x; x = x->next)
    if (x->bg == b) return x;
  return NULL;
}

static int valid_size(uint64_t cols, uint64_t rows) { return cols >= 1 && cols <= 1000 && rows >= 1 && rows <= 1000; }

/* The login shell of our uid from /etc/passwd (its 7th field), else /bin/sh. Written into buf. */
static const char *login_shell(char *buf, size_t cap) {
  snprintf(buf, cap, "/bin/sh");
  FILE *f = fopen("/etc/passwd", "re");
  if (!f) return buf;
  char line[1024];
  unsigned uid = (unsigned)getuid();
  while (fgets(line, sizeof line, f)) {
    char *fields[7];
    size_t n = 0;
    char *p = line;
    fields[n++] = p;
    while (n < 7 && (p = strchr(p, ':'))) *p++ = 0, fields[n++] = p;
    if (n < 7) continue;
    fields[6][strcspn(fields[6], "\r\n")] = 0;
    char *end;
    unsigned long u = strtoul(fields[2], &end, 10);
    if (*end || u != uid || fields[6][0] != '/') continue;
    if (access(fields[6], X_OK) == 0) snprintf(buf, cap, "%s", fields[6]);
    break;
  }
  fclose(f);
  return buf;
}

/* Opens a PTY pair: the master (CLOEXEC) and the slave's path. */
static int open_pty(char *slave, size_t cap) {
  int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0) m = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0) return -1;
  int unlock = 0, n = -1;
  if (ioctl(m, TIOCSPTLCK, &unlock) < 0 || ioctl(m, TIOCGPTN, &n) < 0) {
    int e = errno;
    close(m);
    errno = e;
    return -1;
  }
  snprintf(slave, cap, "/dev/pts/%d", n);
  return m;
}

/* In the forked child: a new session with the slave as its controlling terminal and fds 0-2. */
static void __attribute__((noreturn)) child_pty(const char *path, char **argv, char **envp, const char *cwd, const char *slave) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  setsid(); /* also a new process group whose id is our pid, as for X and B */
  int s = open(slave, O_RDWR);
  if (s < 0) _exit(126);
  ioctl(s, TIOCSCTTY, 0);
  dup2(s, 0);
  dup2(s, 1);
  dup2(s, 2);
  if (s > 2) close(s);
#ifdef SYS_close_range
  syscall(SYS_close_range, 3U, ~0U, 0U);
#endif
  const char *what = "chdir", *arg = cwd;
  if (!cwd[0] || chdir(cwd) == 0) {
    environ = envp;
    if (path) execv(path, argv); /* the login shell: argv[0] is "-name" */
    else execvp(argv[0], argv);
    what = "exec";
    arg = path ? path : argv[0];
  }
  int e = errno;
  dprintf(2, "berth-agent: %s %s: %s\r\n", what, arg, strerror(e));
  _exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

/* T <id> open <tag> <cols> <rows> <cwd> <argc> <arg>... <envc> <env>... → r <id> 0 <pid> */
static void term_open(uint64_t id) {
  uint64_t cols, rows, argc, envc;
  char *tag, *cwd;
  if (f_str(3, &tag) || !valid_tag(tag) || f_u64(4, &cols) || f_u64(5, &rows) || !valid_size(cols, rows) ||
      f_str(6, &cwd) || f_u64(7, &argc) || argc > ntok || f_u64(8 + argc, &envc) || envc > ntok ||
      ntok != 9 + argc + envc) {
    reply_err(id, EINVAL, "malformed T open line", NULL);
    return;
  }
  if (find_bg(tag)) {
    reply_err(id, EEXIST, "terminal: tag in use", NULL);
    return;
  }
  char **argv = xcalloc(argc + 2, sizeof *argv);
  char **items = xcalloc(envc + 1, sizeof *items);
  int bad = 0;
  size_t argbytes = 0;
  for (size_t i = 0; i < argc; i++) bad |= f_str(8 + i, &argv[i]);
  for (size_t i = 0; i < envc; i++) {
    bad |= f_str(9 + argc + i, &items[i]);
    if (!bad && (items[i][0] == '=' || !strchr(items[i], '='))) bad = 1;
  }
  for (size_t i = 0; !bad && i < argc; i++) argbytes += strlen(argv[i]) + 1;
  char shell[PATH_MAX], dash[PATH_MAX + 1];
  const char *path = NULL;
  char *shown[1];
  char **rec = argv;
  size_t recc = argc;
  if (!argc) { /* the user's login shell, started as a login shell ("-bash") */
    path = login_shell(shell, sizeof shell);
    const char *base = strrchr(path, '/');
    snprintf(dash, sizeof dash, "-%s", base ? base + 1 : path);
    argv[0] = dash;
    shown[0] = shell;
    rec = shown;
    recc = 1;
  }
  int room = 0, m = -1;
  char slave[64];
  if (bad) {
    reply_err(id, EINVAL, "malformed T open argument or environment item", NULL);
  } else if (argbytes > BG_ARGV_MAX) {
    reply_err(id, E2BIG, "terminal argv", NULL);
  } else if ((room = bg_make_room())) {
    reply_err(id, room, "terminal: all records hold running processes", NULL);
  } else if ((m = open_pty(slave, sizeof slave)) < 0) {
    reply_err(id, errno, "terminal: open /dev/ptmx", NULL);
  } else {
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    ioctl(m, TIOCSWINSZ, &ws);
    char **envp = merge_env(items, envc);
    int in = fcntl(m, F_DUPFD_CLOEXEC, 3), sync[2] = {-1, -1};
    pid_t pid = in < 0 || pipe2(sync, O_CLOEXEC) < 0 ? -1 : fork();
    if (pid == 0) child_pty(path, argv, envp, cwd, slave);
    int err = errno;
    free(envp);
    /* Wait until the child holds the slave (its end of `sync` closes then): input written to a master
     * before its slave was ever opened was lost under gVisor, and the shell never started reading. */
    close_fd(&sync[1]);
    char c;
    while (pid > 0 && sync[0] >= 0 && (read(sync[0], &c, 1) < 0 && errno == EINTR)) {}
    close_fd(&sync[0]);
    if (pid < 0) {
      close(m);
      if (in >= 0) close(in);
      reply_err(id, err, "fork", NULL);
    } else {
      spawn_exec_fds(id, tag, rec, recc, pid, m, -1, in);
      execs->bg->pty = 1;
      execs->bg->cols = (unsigned)cols;
      execs->bg->rows = (unsigned)rows;
      out_fmt("r %" PRIu64 " 0 %d\n", id, (int)pid);
    }
  }
  free(argv);
  free(items);
}

/* Finds the terminal named by field 3; answers ESRCH itself when there is none. */
static struct bg *term_find(uint64_t id) {
  char *tag;
  if (f_str(3, &tag)) {
    reply_err(id, EINVAL, "malformed T line", NULL);
    return NULL;
  }
  struct bg *b = find_bg(tag);
  if (!b || !b->pty) {
    reply_err(id, ESRCH, "terminal: no such terminal", NULL);
    return NULL;
  }
  return b;
}

/* T <id> input <tag> <data> → r <id> 0 <bytes queued>; EPIPE once the terminal has ended. */
static void term_input(uint64_t id) {
  char *d;
  size_t n;
  if (ntok != 5 || f_bytes(4, &d, &n)) {
    reply_err(id, EINVAL, "malformed T input line", NULL);
    return;
  }
  struct bg *b = term_find(id);
  if (!b) return;
  struct exec *x = term_exec(b);
  if (!b->running || !x || x->fd_in < 0) {
    reply_err(id, EPIPE, "terminal: it has ended", NULL);
    return;
  }
  if (x->stdin_q.len + n > TERM_INPUT_MAX) {
    reply_err(id, EAGAIN, "terminal: input queue full", NULL);
    return;
  }
  buf_append(&x->stdin_q, d, n);
  exec_stdin_flush(x);
  pty_fast_until = now_ms() + PTY_FAST_FOR;
  reply_count(id, x->stdin_q.len);
}

/* T <id> resize <tag> <cols> <rows> → r <id> 0 -. The kernel signals SIGWINCH to the foreground group on
 * a change; we send it too, since not every kernel (gVisor) does. */
static void term_resize(uint64_t id) {
  uint64_t cols, rows;
  if (ntok != 6 || f_u64(4, &cols) || f_u64(5, &rows) || !valid_size(cols, rows)) {
    reply_err(id, EINVAL, "malformed T resize line", NULL);
    return;
  }
  struct bg *b = term_find(id);
  if (!b) return;
  struct exec *x = term_exec(b);
  b->cols = (unsigned)cols;
  b->rows = (unsigned)rows;
  if (b->running && x && x->fd_in >= 0) {
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    if (ioctl(x->fd_in, TIOCSWINSZ, &ws) < 0) {
      reply_err(id, errno, "terminal: resize", NULL);
      return;
    }
    pid_t fg = tcgetpgrp(x->fd_in);
    kill(fg > 0 ? -fg : -x->pid, SIGWINCH);
  }
  reply_ok(id, "-");
}

/* T <id> list → for each terminal, newest first: its `j` record then `t <id> <cols> <rows>`; r <id> 0 <count> */
static void term_list(uint64_t id) {
  if (ntok != 3) {
    reply_err(id, EINVAL, "malformed T list line", NULL);
    return;
  }
  uint64_t count = 0;
  for (struct bg *b = bgs; b; b = b->next) {
    if (!b->pty) continue;
    job_line(id, b);
    out_fmt("t %" PRIu64 " %u %u\n", id, b->cols, b->rows);
    count++;
  }
  reply_count(id, count);
}

/* T <id> <word> ...: one verb, sub-words for the operations. */
void cmd_terminal(uint64_t id) {
  const char *w = ntok > 2 ? tok[2] : "";
  if (!strcmp(w, "open")) term_open(id);
  else if (!strcmp(w, "input")) term_input(id);
  else if (!strcmp(w, "resize")) term_resize(id);
  else if (!strcmp(w, "list")) term_list(id);
  else reply_err(id, ENOSYS, "terminal: unknown operation", NULL);
}
