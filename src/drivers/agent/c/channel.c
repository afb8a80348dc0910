/* Sections 12 and 13: the host channel, signals and reaping. See agent.h. */
#include "agent.h"

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
int private_fd(int fd, int accmode, int *nonblock) {
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

void chan_open_device(void) {
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
void chan_lost(int err, int on_output) {
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
size_t chan_read(void) {
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

void flush_out(void) {
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

void setup_signals(void) {
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
void handle_signals(void) {
  struct signalfd_siginfo si;
  while (read(sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
    if (si.ssi_signo == SIGCHLD) continue;
    if (am_pid1) logmsg("ignoring signal %u from pid %u (PID 1)", si.ssi_signo, si.ssi_pid);
    else kill_all_and_exit(128 + (int)si.ssi_signo);
  }
  reap_children();
}
