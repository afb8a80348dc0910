/* Sections 4 and 5: lines to the host and parsing of the lines it sends. See agent.h. */
#include "agent.h"

/* ==== 4. output to the host ========================================================================== */

void out_raw(const char *s, size_t n) { buf_append(&out, s, n); }

void out_fmt(const char *fmt, ...) {
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

void out_b64(const void *d, size_t n) {
  if (!n) {
    out_raw("-", 1);
    return;
  }
  char *p = buf_reserve(&out, 4 * ((n + 2) / 3));
  out.len += b64_encode(p, d, n);
}

void out_data_line(char tag, uint64_t id, const void *d, size_t n) {
  out_fmt("%c %" PRIu64 " ", tag, id);
  out_b64(d, n);
  out_raw("\n", 1);
}

void reply_ok(uint64_t id, const char *value) { out_fmt("r %" PRIu64 " 0 %s\n", id, value); }

void reply_count(uint64_t id, uint64_t n) { out_fmt("r %" PRIu64 " 0 %" PRIu64 "\n", id, n); }

/* `r <id> <errno> <base64 "what path: strerror">` */
void reply_err(uint64_t id, int err, const char *what, const char *path) {
  char msg[PATH_MAX + 256];
  int n = snprintf(msg, sizeof msg, "%s%s%s: %s", what, path ? " " : "", path ? path : "", strerror(err));
  if (n < 0) n = 0;
  if (n >= (int)sizeof msg) n = (int)sizeof msg - 1;
  out_fmt("r %" PRIu64 " %d ", id, err > 0 ? err : EIO);
  out_b64(msg, (size_t)n);
  out_raw("\n", 1);
}

/* Drops queued lines that were not started yet (keeps the rest of a half-written line intact). */
void out_drop_unsent(void) {
  size_t keep = 0;
  if (!last_sent_nl) {
    char *nl = memchr(out.p + out.head, '\n', out.len);
    keep = nl ? (size_t)(nl - (out.p + out.head)) + 1 : out.len;
  }
  out.len = keep;
  if (!keep) out.head = 0;
}

/* ==== 5. line parsing ================================================================================ */

char **tok;
size_t ntok;
static size_t tokcap;

/* Splits line on single spaces, in place. */
void tokenize(char *line) {
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

int parse_u64(const char *s, uint64_t *v) {
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
int f_u64(size_t i, uint64_t *v) { return i < ntok && parse_u64(tok[i], v) == 0 ? 0 : EINVAL; }

int f_flag(size_t i, int *v) {
  uint64_t u;
  if (f_u64(i, &u) || u > 1) return EINVAL;
  *v = (int)u;
  return 0;
}

int f_oct(size_t i, mode_t *v) {
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

int f_bytes(size_t i, char **p, size_t *n) {
  if (i >= ntok || b64_decode_inplace(tok[i], n)) return EINVAL;
  *p = tok[i];
  return 0;
}

/* A text field: base64 without NUL bytes. */
int f_str(size_t i, char **p) {
  size_t n;
  if (f_bytes(i, p, &n) || strlen(*p) != n) return EINVAL;
  return 0;
}

/* An absolute path. */
int f_path(size_t i, char **p) {
  if (f_str(i, p) || (*p)[0] != '/') return EINVAL;
  if (strlen(*p) >= PATH_MAX) return ENAMETOOLONG;
  return 0;
}
