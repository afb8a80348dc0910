/* Section 6: running commands (X I C K). See agent.h. */
#include "agent.h"

/* ==== 6. commands (X I C K) ========================================================================== */

/* The base environment with the request's K=V items merged over it (pointers are borrowed). */
char **merge_env(char **items, size_t n) {
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
    if (x->id == id && !x->detached && !x->bg) return x;
  return NULL;
}

/* A tag names a background process: 1-64 printable ASCII characters, no space. */
int valid_tag(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 64) return 0;
  for (; *s; s++)
    if (*s <= ' ' || *s > '~') return 0;
  return 1;
}

/* Forks and starts a command (a background one when tag is set); answers `r <id> 0 <pid>` or an error. */
static void spawn_exec(uint64_t id, const char *tag, char **argv, size_t argc, char **envp, const char *cwd,
                       int want_stdin, uint64_t timeout) {
  int room = tag ? bg_make_room() : 0;
  if (room) {
    reply_err(id, room, "background: all records hold running processes", NULL);
    return;
  }
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
  spawn_exec_fds(id, tag, argv, argc, pid, o[0], e[0], in[1]);
  if (timeout) execs->deadline = now_ms() + (int64_t)timeout;
  out_fmt("r %" PRIu64 " 0 %d\n", id, (int)pid);
}

/* Records a forked command (a background one, its record made, when tag is set) with our ends of its fds. */
void spawn_exec_fds(uint64_t id, const char *tag, char **argv, size_t argc, pid_t pid, int fd_out, int fd_err, int fd_in) {
  struct exec *x = xcalloc(1, sizeof *x);
  x->id = id;
  x->pid = pid;
  x->fd_out = fd_out;
  x->fd_err = fd_err;
  x->fd_in = fd_in;
  if (x->fd_out >= 0) set_nonblock(x->fd_out);
  if (x->fd_err >= 0) set_nonblock(x->fd_err);
  if (x->fd_in >= 0) set_nonblock(x->fd_in);
  if (tag) x->bg = bg_new(id, tag, pid, argv, argc);
  x->next = execs;
  execs = x;
}

/* X (or B, background) <id> <flags> <timeoutMs> <cwd> <argc> <arg>... <envc> <env>... */
void cmd_exec(uint64_t id, int background) {
  uint64_t flags, timeout, argc, envc;
  char *cwd, *tag = NULL;
  size_t k = background ? 3 : 2; /* B has its tag before the X fields */
  if ((background && (f_str(2, &tag) || !valid_tag(tag))) || f_u64(k, &flags) || f_u64(k + 1, &timeout) ||
      f_str(k + 2, &cwd) || f_u64(k + 3, &argc) || argc == 0 || argc > ntok || f_u64(k + 4 + argc, &envc) ||
      envc > ntok || ntok != k + 5 + argc + envc) {
    reply_err(id, EINVAL, background ? "malformed B line" : "malformed X line", NULL);
    return;
  }
  if (background && find_bg(tag)) {
    reply_err(id, EEXIST, "background: tag in use", NULL);
    return;
  }
  if (timeout > (uint64_t)INT64_MAX / 4) timeout = (uint64_t)INT64_MAX / 4;
  char **argv = xcalloc(argc + 1, sizeof *argv);
  char **items = xcalloc(envc + 1, sizeof *items);
  int bad = 0;
  for (size_t i = 0; i < argc; i++) bad |= f_str(k + 4 + i, &argv[i]);
  for (size_t i = 0; i < envc; i++) {
    bad |= f_str(k + 5 + argc + i, &items[i]);
    if (!bad && (items[i][0] == '=' || !strchr(items[i], '='))) bad = 1;
  }
  size_t argbytes = 0;
  for (size_t i = 0; !bad && i < argc; i++) argbytes += strlen(argv[i]) + 1;
  if (bad) {
    reply_err(id, EINVAL, "malformed X argument or environment item", NULL);
  } else if (background && argbytes > BG_ARGV_MAX) {
    reply_err(id, E2BIG, "background argv", NULL);
  } else {
    char **envp = merge_env(items, envc);
    /* a background process has no stdin: nobody stays on the channel to feed it */
    spawn_exec(id, tag, argv, argc, envp, cwd, background ? 0 : (int)(flags & 1), timeout);
    free(envp);
  }
  free(argv);
  free(items);
}

/* Moves queued stdin into the child's pipe; acknowledges taken (or dropped) bytes with `i`. */
void exec_stdin_flush(struct exec *x) {
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
  if (acked && !x->detached && !x->bg) out_fmt("i %" PRIu64 " %zu\n", x->id, acked);
  if (!x->stdin_q.len) {
    buf_free(&x->stdin_q);
    if (x->stdin_close_pending) close_fd(&x->fd_in);
  }
}

/* I <id> <data> */
void cmd_stdin(uint64_t id) {
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
void cmd_close_stdin(uint64_t id) {
  struct exec *x = find_exec(id);
  if (!x) return;
  if (x->stdin_q.len) x->stdin_close_pending = 1;
  else close_fd(&x->fd_in);
}

/* K <id> <signal> */
void cmd_kill(uint64_t id) {
  struct exec *x = find_exec(id);
  uint64_t sig;
  if (!x || f_u64(2, &sig) || sig > 64) return;
  kill(-x->pid, (int)sig);
}

/* Reads one chunk of child output; returns bytes read, 0 at EOF/closed, -1 when nothing is there. */
ssize_t exec_read(struct exec *x, int *fd, char tag) {
  if (*fd < 0) return 0;
  ssize_t n = read(*fd, iobuf, sizeof iobuf);
  if (n > 0) {
    if (x->bg) bg_output(x->bg, tag, iobuf, (size_t)n);
    else if (!x->detached) out_data_line(tag, x->id, iobuf, (size_t)n);
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
void exec_finish(struct exec **pp, int status) {
  struct exec *x = *pp;
  exec_drain(x, &x->fd_out, 'o');
  exec_drain(x, &x->fd_err, 'e');
  int code = 255, sig = 0;
  if (WIFEXITED(status)) code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) sig = WTERMSIG(status), code = 128 + sig;
  if (x->bg) bg_exited(x->bg, code, sig, x->timed_out);
  else if (!x->detached) out_fmt("x %" PRIu64 " %d %d %d\n", x->id, code, sig, x->timed_out);
  close_fd(&x->fd_out);
  close_fd(&x->fd_err);
  close_fd(&x->fd_in);
  buf_free(&x->stdin_q);
  *pp = x->next;
  free(x);
}

void check_timeouts(int64_t now) {
  for (struct exec *x = execs; x; x = x->next) {
    if (x->deadline && now >= x->deadline) {
      kill(-x->pid, SIGKILL);
      x->timed_out = 1;
      x->deadline = 0;
    }
  }
}
