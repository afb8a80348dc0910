/* Section 7: file reads and writes streamed with the host (R G W D F A). See agent.h. */
#include "agent.h"

/* ==== 7. file reads and writes (R G W D F A) ========================================================= */

void fread_free(struct fread **pp) {
  struct fread *r = *pp;
  close(r->fd);
  *pp = r->next;
  free(r);
}

void fwrite_free(struct fwrite **pp, int remove_tmp) {
  struct fwrite *w = *pp;
  if (w->fd >= 0) close(w->fd);
  if (remove_tmp) unlink(w->tmp);
  free(w->path);
  free(w->tmp);
  *pp = w->next;
  free(w);
}

/* R <id> <path>: only regular files (a FIFO or device could block the loop or never end). */
void cmd_read(uint64_t id) {
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
void pump_reads(void) {
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

int reads_can_progress(void) {
  for (struct fread *r = reads; r; r = r->next)
    if (r->credit) return 1;
  return 0;
}

/* G <id> <n> */
void cmd_grant(uint64_t id) {
  uint64_t n;
  if (f_u64(2, &n) || follow_grant(id, n)) return;
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
void cmd_write(uint64_t id) {
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
void cmd_data(uint64_t id) {
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
void cmd_finish(uint64_t id) {
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
void cmd_abort(uint64_t id) {
  if (follow_abort(id) || watch_abort(id)) {
    reply_ok(id, "-");
    return;
  }
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
