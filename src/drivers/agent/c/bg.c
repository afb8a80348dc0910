/* Section 15: background processes (B J O Z) and their output rings. See agent.h and PROTOCOL.md,
 * "Background processes". */
#include "agent.h"

struct bg *bgs;
struct bgfollow *follows;

/* ==== 15. background processes ======================================================================= */

/* Appends to a ring that keeps the last RING_MAX bytes: the byte at absolute offset k lives at
 * p[k % cap]. Memory grows by doubling while everything still fits, so a quiet process costs little;
 * once total exceeds cap, cap is RING_MAX (the invariant the modulo indexing relies on). */
static void ring_append(struct ring *r, const unsigned char *d, size_t n) {
  if (n > RING_MAX) {
    r->total += n - RING_MAX;
    d += n - RING_MAX;
    n = RING_MAX;
  }
  while (r->cap < RING_MAX && r->total + n > r->cap) {
    size_t nc = r->cap ? r->cap * 2 : 4096;
    if (nc > RING_MAX) nc = RING_MAX;
    r->p = xrealloc(r->p, nc);
    r->cap = nc;
  }
  size_t at = (size_t)(r->total % r->cap);
  size_t first = r->cap - at < n ? r->cap - at : n;
  memcpy(r->p + at, d, first);
  memcpy(r->p, d + first, n - first);
  r->total += n;
}

static uint64_t ring_start(const struct ring *r) { return r->total > r->cap ? r->total - r->cap : 0; }

void bg_output(struct bg *b, char tag, const unsigned char *d, size_t n) {
  ring_append(tag == 'o' ? &b->out : &b->err, d, n);
}

void bg_exited(struct bg *b, int code, int sig, int timed_out) {
  b->running = 0;
  b->code = code;
  b->sig = sig;
  b->timed_out = timed_out;
  b->ended_ms = wall_ms();
}

struct bg *find_bg(const char *tag) {
  for (struct bg *b = bgs; b; b = b->next)
    if (!strcmp(b->tag, tag)) return b;
  return NULL;
}

static void follow_free(struct bgfollow **pp) {
  struct bgfollow *f = *pp;
  *pp = f->next;
  free(f);
}

static void bg_free(struct bg **pp) {
  struct bg *b = *pp;
  for (struct bgfollow **fp = &follows; *fp;) {
    if ((*fp)->bg == b) follow_free(fp);
    else fp = &(*fp)->next;
  }
  for (size_t i = 0; i < b->argc; i++) free(b->argv[i]);
  free(b->argv);
  free(b->tag);
  free(b->out.p);
  free(b->err.p);
  *pp = b->next;
  free(b);
}

/* Room for one more record: the oldest finished one goes; EAGAIN when all BG_MAX are running. */
int bg_make_room(void) {
  size_t n = 0;
  struct bg **oldest = NULL;
  for (struct bg **pp = &bgs; *pp; pp = &(*pp)->next) {
    n++;
    if (!(*pp)->running) oldest = pp; /* the list is newest first, so the last finished is the oldest */
  }
  if (n < BG_MAX) return 0;
  if (!oldest) return EAGAIN;
  bg_free(oldest);
  return 0;
}

struct bg *bg_new(uint64_t id, const char *tag, pid_t pid, char **argv, size_t argc) {
  struct bg *b = xcalloc(1, sizeof *b);
  b->id = id;
  b->tag = xstrdup(tag);
  b->pid = pid;
  b->running = 1;
  b->started_ms = wall_ms();
  b->argv = xcalloc(argc, sizeof *b->argv);
  b->argc = argc;
  for (size_t i = 0; i < argc; i++) b->argv[i] = xstrdup(argv[i]);
  b->next = bgs;
  bgs = b;
  return b;
}

void job_line(uint64_t id, struct bg *b) {
  out_fmt("j %" PRIu64 " ", id);
  out_b64(b->tag, strlen(b->tag));
  out_fmt(" %d %s %d %d %d %" PRId64 " %" PRId64 " %" PRIu64 " %" PRIu64 " %zu", (int)b->pid, b->running ? "running" : "exited", b->code, b->sig, b->timed_out, b->started_ms, b->ended_ms,
          b->out.total, b->err.total, b->argc);
  for (size_t i = 0; i < b->argc; i++) {
    out_raw(" ", 1);
    out_b64(b->argv[i], strlen(b->argv[i]));
  }
  out_raw("\n", 1);
}

/* J <id> → j lines, then r <id> 0 <count> */
void cmd_jobs(uint64_t id) {
  uint64_t count = 0;
  for (struct bg *b = bgs; b; b = b->next)
    if (!b->pty) job_line(id, b), count++; /* terminals are listed by `T list` */
  reply_count(id, count);
}

/* O <id> <tag> <outOffset> <errOffset> <follow> → j line (the record as it is now), o/e lines, [x], r */
void cmd_output(uint64_t id) {
  uint64_t oo, eo;
  char *tag;
  int follow;
  if (ntok != 6 || f_str(2, &tag) || f_u64(3, &oo) || f_u64(4, &eo) || f_flag(5, &follow)) {
    reply_err(id, EINVAL, "malformed O line", NULL);
    return;
  }
  struct bg *b = find_bg(tag);
  if (!b) {
    reply_err(id, ESRCH, "output: no such background process", NULL);
    return;
  }
  job_line(id, b);
  struct bgfollow *f = xcalloc(1, sizeof *f);
  f->id = id;
  f->bg = b;
  f->off[0] = oo;
  f->off[1] = eo;
  f->follow = follow;
  f->credit = READ_CREDIT;
  f->next = follows;
  follows = f;
}

/* Z <id> <tag> <signal> → r <id> 0 1 (sent) or r <id> 0 0 (it had already ended) */
void cmd_signal_bg(uint64_t id) {
  uint64_t sig;
  char *tag;
  if (ntok != 4 || f_str(2, &tag) || f_u64(3, &sig) || sig > 64) {
    reply_err(id, EINVAL, "malformed Z line", NULL);
    return;
  }
  struct bg *b = find_bg(tag);
  if (!b) {
    reply_err(id, ESRCH, "kill: no such background process", NULL);
    return;
  }
  if (!b->running) {
    reply_ok(id, "0");
    return;
  }
  /* A terminal's child makes its own group with setsid() after fork: until then, signal it by pid. */
  if (kill(-b->pid, (int)sig) < 0 && (errno != ESRCH || (kill(b->pid, (int)sig) < 0 && errno != ESRCH))) {
    reply_err(id, errno, "kill", NULL);
    return;
  }
  reply_ok(id, "1");
}

/* Bytes a follower may send now from one stream: clamped to what the ring still holds (a follower
 * behind the ring skips ahead; the offset on each line shows the jump), and to the ring's wrap point. */
static size_t follow_pending(struct bgfollow *f, int s, const char **data) {
  const struct ring *r = s ? &f->bg->err : &f->bg->out;
  if (f->off[s] < ring_start(r)) f->off[s] = ring_start(r);
  if (f->off[s] >= r->total) return 0;
  size_t at = (size_t)(f->off[s] % r->cap);
  uint64_t n = r->total - f->off[s];
  if (n > CHUNK) n = CHUNK;
  if (n > r->cap - at) n = r->cap - at;
  *data = r->p + at;
  return (size_t)n;
}

/* Sends ring data to every follower with credit while the output buffer has room; ends a follower
 * (x if the process ended, then r) once it has everything and either does not follow or the process
 * is over (exec_finish drained the pipes before bg_exited, so nothing more can come). */
void pump_follows(void) {
  for (struct bgfollow **pp = &follows; *pp;) {
    struct bgfollow *f = *pp;
    int idle = 0;
    for (int k = 0; k < 8 && f->credit && out.len < OUT_HIGH; k++) {
      const char *d = NULL;
      int s = f->turn;
      size_t n = follow_pending(f, s, &d);
      if (!n) n = follow_pending(f, s = !s, &d);
      if (!n) {
        idle = 1;
        break;
      }
      f->turn = !s; /* alternate, so a chatty stdout cannot starve stderr */
      out_fmt("%c %" PRIu64 " %" PRIu64 " ", s ? 'e' : 'o', f->id, f->off[s]);
      out_b64(d, n);
      out_raw("\n", 1);
      f->off[s] += n;
      f->credit--;
    }
    if (idle && (!f->follow || !f->bg->running)) {
      struct bg *b = f->bg;
      if (!b->running) out_fmt("x %" PRIu64 " %d %d %d\n", f->id, b->code, b->sig, b->timed_out);
      reply_ok(f->id, "-");
      follow_free(pp);
    } else {
      pp = &f->next;
    }
  }
}

/* A follower with credit and something to send (or to finish) needs a loop turn now. */
int follows_can_progress(void) {
  for (struct bgfollow *f = follows; f; f = f->next) {
    if (!f->credit) continue;
    const char *d;
    if (follow_pending(f, 0, &d) || follow_pending(f, 1, &d) || !f->follow || !f->bg->running) return 1;
  }
  return 0;
}

int follow_grant(uint64_t id, uint64_t n) {
  for (struct bgfollow *f = follows; f; f = f->next) {
    if (f->id == id) {
      f->credit = f->credit + n > MAX_CREDIT ? MAX_CREDIT : f->credit + n;
      return 1;
    }
  }
  return 0;
}

int follow_abort(uint64_t id) {
  for (struct bgfollow **pp = &follows; *pp; pp = &(*pp)->next) {
    if ((*pp)->id == id) {
      follow_free(pp);
      return 1;
    }
  }
  return 0;
}

void follows_reset(void) {
  while (follows) follow_free(&follows);
}
