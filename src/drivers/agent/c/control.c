/* Sections 9 to 11: identity (N), hello, quiesce and reset (H Q), and dispatch of host lines. See agent.h. */
#include "agent.h"

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
    if (x->bg) continue; /* background processes belong to the machine, not to a host */
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
  follows_reset();
  watches_reset();
  socks_reset(); /* connections belong to the host that opened or took them; listeners stay */
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

/* A guard (protocol 2): `P <id> <path> g` answers like P and makes the next line conditional on <path>
 * being canonical already (its realpath is itself). When it is not, or cannot be resolved, the next line is
 * not run: its id is answered ESTALE "not run: a guard path is not canonical" (and a guard refused that
 * way fails the line after it too, so a chain of guards guards one request). The host writes a guard and
 * its request back to back, so no other line comes between them. */
static int guard_armed, guard_failed;

static void handle_line(char *line, size_t len) {
  quiesced = quiesce_pending = 0; /* any line ends a quiesce (and cancels one not yet in effect) */
  int guarded = guard_armed, refused = guard_failed;
  guard_armed = guard_failed = 0; /* a guard covers exactly the next line */
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
  if (id >= next_id && id < AGENT_ID_BASE) next_id = id + 1; /* ids from AGENT_ID_BASE up are ours (E streams) */
  int is_guard = verb == 'P' && ntok == 4 && !strcmp(tok[3], "g");
  if (guarded && refused) {
    reply_err(id, ESTALE, "not run: a guard path is not canonical", NULL);
    if (is_guard) guard_armed = guard_failed = 1;
    return;
  }
  if (is_guard) {
    guard_armed = 1;
    guard_failed = realpath_guard(id);
    return;
  }
  switch (verb) {
  case 'X': cmd_exec(id, 0); break;
  case 'B': cmd_exec(id, 1); break;
  case 'J': cmd_jobs(id); break;
  case 'O': cmd_output(id); break;
  case 'Z': cmd_signal_bg(id); break;
  case 'Y': cmd_watch(id); break;
  case 'T': cmd_terminal(id); break;
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
  case 'V': cmd_rename(id); break;
  case 'N': cmd_identity(id); break;
  case 'Q': cmd_quiesce(id); break;
  case 'E': cmd_socket(id); break;
  default:
    /* An upper-case verb we do not know is a newer host: say so. Anything else is noise. */
    if (verb >= 'A' && verb <= 'Z') reply_err(id, ENOSYS, "unknown verb", NULL);
  }
}

/* Splits the input buffer into lines; discards lines over MAX_LINE whole. */
void process_input(void) {
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
