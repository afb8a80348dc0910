/* Sections 2 and 3: utilities (logging, allocation, byte queues, atomic file writes) and base64. See agent.h. */
#include "agent.h"

/* ==== 2. utilities =================================================================================== */

void logmsg(const char *fmt, ...) {
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

void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) {
    logmsg("out of memory");
    abort();
  }
  return p;
}

void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    logmsg("out of memory");
    abort();
  }
  return p;
}

char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xrealloc(NULL, n), s, n);
}

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Returns a pointer to n writable bytes at the end of b (commit them by adding to b->len). */
char *buf_reserve(struct buf *b, size_t n) {
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

void buf_append(struct buf *b, const void *d, size_t n) {
  memcpy(buf_reserve(b, n), d, n);
  b->len += n;
}

void buf_consume(struct buf *b, size_t n) {
  b->head += n;
  b->len -= n;
  if (!b->len) b->head = 0;
}

void buf_free(struct buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

int write_all(int fd, const void *d, size_t n) {
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
int create_tmp_beside(const char *path, mode_t mode, char **tmp) {
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
void fsync_parent(const char *path) {
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
int write_file_atomic(const char *path, const void *data, size_t n, mode_t mode, int durable) {
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

void b64_init(void) {
  memset(b64_rev, -1, sizeof b64_rev);
  for (int i = 0; i < 64; i++) b64_rev[(unsigned char)B64[i]] = (signed char)i;
}

size_t b64_encode(char *dst, const unsigned char *s, size_t n) {
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
int b64_decode_inplace(char *s, size_t *outlen) {
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
