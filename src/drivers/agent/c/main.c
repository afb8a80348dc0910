/* Section 14: the poll loop and main(). See agent.h. */
#include "agent.h"

/* ==== 14. main loop ================================================================================== */

enum slot_kind { SLOT_EXEC_OUT, SLOT_EXEC_ERR, SLOT_EXEC_IN, SLOT_WATCH, SLOT_CHAN_IN, SLOT_CHAN_OUT, SLOT_SIG, SLOT_SOCK, SLOT_LISTEN };
struct slot {
  enum slot_kind kind;
  struct exec *x;
  struct watch *w;
  void *p; /* SLOT_SOCK: struct sock; SLOT_LISTEN: struct listener */
};

static struct pollfd *pfds;
static struct slot *slots;
static size_t nslots, slotcap;

static void add_slot_w(int fd, short events, enum slot_kind kind, struct exec *x, struct watch *w) {
  if (nslots == slotcap) {
    slotcap = slotcap ? slotcap * 2 : 64;
    pfds = xrealloc(pfds, slotcap * sizeof *pfds);
    slots = xrealloc(slots, slotcap * sizeof *slots);
  }
  pfds[nslots] = (struct pollfd){.fd = fd, .events = events};
  slots[nslots++] = (struct slot){.kind = kind, .x = x, .w = w};
}

static void add_slot_p(int fd, short events, enum slot_kind kind, void *p) {
  add_slot_w(fd, events, kind, NULL, NULL);
  slots[nslots - 1].p = p;
}

static void add_slot(int fd, short events, enum slot_kind kind, struct exec *x) { add_slot_w(fd, events, kind, x, NULL); }

/* Exec slots first and the signal slot last: only reaping frees an exec, so pointers stay valid. Watch
 * slots come before the channel's: only a host line (A, or H with reset) frees a watch. */
static void build_slots(int64_t now) {
  nslots = 0;
  for (struct exec *x = execs; x; x = x->next) {
    int produce = !quiesced && (x->detached || x->bg || out.len < OUT_HIGH);
    if (produce && x->fd_out >= 0) add_slot(x->fd_out, POLLIN, SLOT_EXEC_OUT, x);
    if (produce && x->fd_err >= 0) add_slot(x->fd_err, POLLIN, SLOT_EXEC_ERR, x);
    if (x->fd_in >= 0 && x->stdin_q.len) add_slot(x->fd_in, POLLOUT, SLOT_EXEC_IN, x);
  }
  if (!quiesced && out.len < OUT_HIGH)
    for (struct watch *w = watches; w; w = w->next) add_slot_w(w->fd, POLLIN, SLOT_WATCH, NULL, w);
  /* Sockets before the channel too: a host line (rst, reset) only marks a sock dead; socks_sweep frees it. */
  for (struct sock *s = socks; s; s = s->next) {
    short ev = sock_events(s);
    if (ev) add_slot_p(s->fd, ev, SLOT_SOCK, s);
  }
  if (listener_can_accept())
    for (struct listener *l = listeners; l; l = l->next) add_slot_p(l->fd, POLLIN, SLOT_LISTEN, l);
  if (chan_in >= 0 && now >= in_paused_until) add_slot(chan_in, POLLIN, SLOT_CHAN_IN, NULL);
  if (chan_out >= 0 && out.len && !quiesced) add_slot(chan_out, POLLOUT, SLOT_CHAN_OUT, NULL);
  add_slot(sig_fd, POLLIN, SLOT_SIG, NULL);
}

/* gVisor's PTY master does not always wake poll() when output arrives: terminals are also read every
 * PTY_POLL_MS (a non-blocking read that finds nothing costs one syscall). */
#define PTY_POLL_MS 10
#define PTY_FAST_MS 1 /* for PTY_FAST_FOR ms after terminal input: its echo is awaited by a typist */
int64_t pty_fast_until;
static int ptys_running(void) {
  for (struct exec *x = execs; x; x = x->next)
    if (x->bg && x->bg->pty && x->fd_out >= 0) return 1;
  return 0;
}

static void read_ptys(void) {
  if (quiesced) return;
  for (struct exec *x = execs; x; x = x->next)
    if (x->bg && x->bg->pty && x->fd_out >= 0) exec_read(x, &x->fd_out, 'o');
}

static int poll_timeout(int64_t now) {
  int64_t t = !ptys_running() ? -1 : now < pty_fast_until ? PTY_FAST_MS : PTY_POLL_MS;
  if (!quiesced && out.len < OUT_HIGH && (reads_can_progress() || lists || follows_can_progress())) return 0;
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
  case SLOT_WATCH: watch_read(slots[i].w); break;
  case SLOT_CHAN_OUT: flush_out(); break;
  case SLOT_CHAN_IN:
    /* A hang-up with nothing to read (a virtio port whose host left) counts as EOF. */
    if (chan_in >= 0 && !chan_read() && chan_in >= 0 && (re & (POLLHUP | POLLERR | POLLNVAL))) chan_lost(0, 0);
    break;
  case SLOT_SIG: handle_signals(); break;
  case SLOT_SOCK: sock_ready(slots[i].p, re); break;
  case SLOT_LISTEN: listener_ready(slots[i].p); break;
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
  fprintf(stderr, "usage: berth-agent [--device PATH] [--disk-mb N]\n"
                  "       berth-agent --pipe-size BYTES FIFO...\n"
                  "  Speaks the Berth agent protocol v%d on fd 0/1, or on the serial device PATH\n"
                  "  (reopened every %d ms while the host is away).\n"
                  "  --disk-mb N (as PID 1): the session's writes go to an overlay of N MiB.\n"
                  "  --pipe-size (run on the host): sets the buffer of each FIFO's open pipe.\n",
          PROTOCOL_VERSION, RECONNECT_MS);
}

/*
 * Run on the host, not in a sandbox (the binary is static): Node cannot fcntl, and a FIFO's pipe holds
 * 64 KiB by default, about one line of the channel, so the agent waits for the host after every line.
 * A 1 MiB pipe doubled a port-forward's throughput under gVisor here. The size lasts while anyone holds
 * the FIFO open (the sandbox does, for its whole life), so it is set once, after the server opened it.
 */
static int set_pipe_sizes(int argc, char **argv) {
  long bytes = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
  if (bytes <= 0 || argc < 4) {
    usage();
    return 2;
  }
  int rc = 0;
  for (int i = 3; i < argc; i++) {
    int fd = open(argv[i], O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fcntl(fd, F_SETPIPE_SZ, (int)bytes) < 0) {
      fprintf(stderr, "berth-agent: %s: %s\n", argv[i], strerror(errno));
      rc = 1;
    }
    if (fd >= 0) close(fd);
  }
  return rc;
}

static long disk_mb; /* --disk-mb N, else 0 */

static void parse_args(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      device_path = argv[++i];
    } else if (!strcmp(argv[i], "--disk-mb") && i + 1 < argc) {
      char *end;
      disk_mb = strtol(argv[++i], &end, 10);
      if (*end || disk_mb <= 0) {
        usage();
        exit(2);
      }
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
  if (argc > 1 && !strcmp(argv[1], "--pipe-size")) return set_pipe_sizes(argc, argv);
  parse_args(argc, argv);
  am_pid1 = getpid() == 1;
  ensure_std_fds();
  if (disk_mb && (!am_pid1 || setup_disk(disk_mb) < 0)) {
    if (!am_pid1) logmsg("--disk-mb needs PID 1");
    return 1;
  }
  b64_init();
  setup_signals();
  if (!am_pid1) prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphans come to us, as they would to PID 1 */
  build_base_env();
  if (device_path) {
    if (am_pid1) grow_root();
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
    read_ptys();
    check_timeouts(now_ms());
    if (!quiesced) {
      pump_reads();
      pump_lists();
      pump_follows();
    }
    socks_sweep();
    flush_out();
  }
}
