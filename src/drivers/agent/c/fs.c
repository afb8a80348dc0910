/* Section 8: file system queries and changes (L S P M U). See agent.h. */
#include "agent.h"

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
void cmd_list(uint64_t id) {
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
void pump_lists(void) {
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
void cmd_stat(uint64_t id) {
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
void cmd_realpath(uint64_t id) {
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

/* P <id> <path> g: answers like P; returns 1 unless <path> resolved to itself (the guard fails). */
int realpath_guard(uint64_t id) {
  char *path, res[PATH_MAX];
  int bad = f_path(2, &path);
  if (!bad) bad = resolve_path(path, res);
  if (bad) {
    reply_err(id, bad, "realpath", bad != EINVAL ? path : NULL);
    return 1;
  }
  out_fmt("p %" PRIu64 " ", id);
  out_b64(res, strlen(res));
  out_raw("\n", 1);
  return strcmp(res, path) != 0;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Like mkdir(1): -p creates missing parents (0755 before umask) and accepts an existing directory. The
 * leaf gets exactly `mode`. Returns 0 or an errno, with the failing prefix left in path. */
int make_dirs(char *path, int parents, mode_t mode) {
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
void cmd_mkdir(uint64_t id) {
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
void cmd_remove(uint64_t id) {
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

void helper_finish(struct helper **pp, int status) {
  struct helper *h = *pp;
  if (!h->detached) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) reply_ok(h->id, "-");
    else reply_err(h->id, WIFEXITED(status) ? WEXITSTATUS(status) : EINTR, "remove", h->path);
  }
  *pp = h->next;
  free(h->path);
  free(h);
}

/* V <id> <from> <to>: rename(2), so within one file system, atomic, replacing a file at `to` (a directory
 * only when `to` is an empty one). `/` is refused like U. */
void cmd_rename(uint64_t id) {
  char *from, *to;
  int bad = ntok != 4 ? EINVAL : f_path(2, &from);
  if (!bad) bad = f_path(3, &to);
  if (bad) {
    reply_err(id, bad, "rename", NULL);
    return;
  }
  if (!strcmp(from, "/") || !strcmp(to, "/")) {
    reply_err(id, EPERM, "rename", "/");
    return;
  }
  if (rename(from, to) < 0) {
    reply_err(id, errno, "rename", from);
    return;
  }
  fsync_parent(to);
  reply_ok(id, "-");
}
