/* Section 16: file system watches (Y), one inotify instance per watch. See agent.h and PROTOCOL.md,
 * "Watches". */
#include "agent.h"
#include <sys/inotify.h>

struct watch *watches;

#define WATCH_MASK (IN_CREATE | IN_DELETE | IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB)

static void watch_free(struct watch **pp) {
  struct watch *w = *pp;
  close(w->fd);
  for (size_t i = 0; i < w->cap; i++) free(w->paths[i]);
  free(w->paths);
  *pp = w->next;
  free(w);
}

/* Watches one directory (or the file named); records its path under the watch descriptor. */
static int watch_add(struct watch *w, const char *path) {
  if (w->count >= WATCH_MAX_DIRS) return ENOSPC;
  int wd = inotify_add_watch(w->fd, path, WATCH_MASK | IN_DONT_FOLLOW);
  if (wd < 0) return errno;
  if ((size_t)wd >= w->cap) {
    size_t nc = w->cap ? w->cap : 64;
    while (nc <= (size_t)wd) nc *= 2;
    w->paths = xrealloc(w->paths, nc * sizeof *w->paths);
    memset(w->paths + w->cap, 0, (nc - w->cap) * sizeof *w->paths);
    w->cap = nc;
  }
  if (!w->paths[wd]) w->count++;
  free(w->paths[wd]);
  w->paths[wd] = xstrdup(path);
  return 0;
}

static struct watch *walking; /* nftw has no user pointer */
static int walk_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)f;
  if (flag == FTW_D) watch_add(walking, path); /* best effort below the root: a vanished dir is fine */
  return walking->count >= WATCH_MAX_DIRS;
}

static void watch_tree(struct watch *w, const char *root) {
  walking = w;
  nftw(root, walk_one, 16, FTW_PHYS);
  walking = NULL;
}

static void watch_line(struct watch *w, const char *event, int is_dir, const char *path) {
  out_fmt("w %" PRIu64 " %s %d ", w->id, event, is_dir);
  out_b64(path, strlen(path));
  out_raw("\n", 1);
}

/* Y <id> <path> <recursive> → w <id> ready 0 <path>, then w <id> <event> <isDir> <path> lines until A */
void cmd_watch(uint64_t id) {
  char *path;
  int recursive;
  int bad = ntok != 4 ? EINVAL : f_path(2, &path);
  if (!bad && f_flag(3, &recursive)) bad = EINVAL;
  if (bad) {
    reply_err(id, bad, "watch", NULL);
    return;
  }
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    reply_err(id, errno, "inotify_init1", NULL);
    return;
  }
  struct watch *w = xcalloc(1, sizeof *w);
  w->id = id;
  w->fd = fd;
  w->recursive = recursive;
  int err = watch_add(w, path);
  if (err) {
    struct watch *tmp = w;
    tmp->next = NULL;
    watch_free(&tmp);
    reply_err(id, err, "watch", path);
    return;
  }
  struct stat st;
  if (recursive && lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) watch_tree(w, path);
  w->next = watches;
  watches = w;
  watch_line(w, "ready", 0, path);
}

static const char *event_name(uint32_t m) {
  if (m & IN_CREATE) return "create";
  if (m & IN_DELETE) return "delete";
  if (m & IN_MOVED_FROM) return "move_from";
  if (m & IN_MOVED_TO) return "move_to";
  if (m & IN_MODIFY) return "modify";
  if (m & IN_ATTRIB) return "attrib";
  return NULL;
}

/* Reads the events of one watch (called when its fd is readable and the output has room). */
void watch_read(struct watch *w) {
  char b[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (int k = 0; k < 4 && out.len < OUT_HIGH; k++) {
    ssize_t n = read(w->fd, b, sizeof b);
    if (n <= 0) return;
    for (char *p = b; p < b + n;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        watch_line(w, "overflow", 0, "");
        continue;
      }
      if (ev->wd < 0 || (size_t)ev->wd >= w->cap || !w->paths[ev->wd]) continue;
      if (ev->mask & IN_IGNORED) {
        free(w->paths[ev->wd]);
        w->paths[ev->wd] = NULL;
        w->count--;
        continue;
      }
      const char *name = event_name(ev->mask);
      if (!name) continue;
      char full[PATH_MAX];
      const char *dir = w->paths[ev->wd];
      if (ev->len && ev->name[0]) snprintf(full, sizeof full, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", ev->name);
      else snprintf(full, sizeof full, "%s", dir);
      int is_dir = !!(ev->mask & IN_ISDIR);
      watch_line(w, name, is_dir, full);
      /* a directory that appears below a recursive watch is watched too (and what is already in it) */
      if (w->recursive && is_dir && (ev->mask & (IN_CREATE | IN_MOVED_TO))) watch_tree(w, full);
    }
  }
}

int watch_abort(uint64_t id) {
  for (struct watch **pp = &watches; *pp; pp = &(*pp)->next) {
    if ((*pp)->id == id) {
      watch_free(pp);
      return 1;
    }
  }
  return 0;
}

void watches_reset(void) {
  while (watches) watch_free(&watches);
}
