/* Section 19: the session's writable layer (gVisor's room, a QEMU guest's disk). See agent.h. */
#include "agent.h"
#include <mntent.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

/* ==== 19. writable layer ============================================================================= */

/*
 * `--disk-mb N`, done as PID 1 before the channel opens: the session's writes go to an overlay whose upper
 * layer is a tmpfs of N MiB, so a writer gets ENOSPC at N MiB instead of growing the sandbox's memory until
 * the host kernel kills it. runsc's own upper layer (--overlay2=all:memory) has no size option in the runsc
 * Debian ships, and a file-backed one would take the writes out of the checkpoints; a tmpfs of the
 * sentry lives in sandbox memory, so every checkpoint still carries every file.
 *
 * Layout, all under DISK_DIR of the root runsc made (an empty directory of every Debian image, so the new
 * root shows it as it was): the tmpfs, holding upper/ and work/; the overlay (lower: runsc's root mount)
 * at DISK_DIR/root; runsc's other mounts (/proc, /sys, /dev with its submounts, the agent's directory)
 * bound into it with their read-only flag; then pivot_root, and the old root is detached. /tmp is not bound:
 * it is a directory of the overlay, inside the limit (the spec gives it no tmpfs of its own).
 */
#define DISK_DIR "/mnt"
#define NEW_ROOT DISK_DIR "/root"

static int fail(const char *what, const char *path) {
  logmsg("writable layer: %s %s: %s", what, path, strerror(errno));
  return -1;
}

/* A top-level mount of runsc's to carry over: not the root, not /tmp, not under another one we carry. */
static int carried(const char *dir, char (*seen)[PATH_MAX], size_t nseen) {
  if (!strcmp(dir, "/") || !strcmp(dir, "/tmp") || !strncmp(dir, DISK_DIR, strlen(DISK_DIR))) return 0;
  for (size_t i = 0; i < nseen; i++) {
    size_t n = strlen(seen[i]);
    if (!strncmp(dir, seen[i], n) && dir[n] == '/') return 0;
  }
  return 1;
}

/* Binds runsc's top-level mounts into the new root, recursively, keeping a read-only one read-only. */
static int bind_mounts(void) {
  FILE *f = setmntent("/proc/self/mounts", "r");
  if (!f) return fail("cannot read", "/proc/self/mounts");
  static char seen[64][PATH_MAX];
  size_t nseen = 0;
  int rc = 0;
  struct mntent *m;
  while (rc == 0 && (m = getmntent(f)) && nseen < 64) {
    if (!carried(m->mnt_dir, seen, nseen)) continue;
    snprintf(seen[nseen++], PATH_MAX, "%s", m->mnt_dir);
    char to[PATH_MAX];
    snprintf(to, sizeof to, NEW_ROOT "%s", m->mnt_dir);
    if (mount(m->mnt_dir, to, NULL, MS_BIND | MS_REC, NULL) < 0) rc = fail("cannot bind", m->mnt_dir);
    else if (hasmntopt(m, "ro") && mount(NULL, to, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0) rc = fail("cannot make read-only", to);
  }
  endmntent(f);
  return rc;
}

int setup_disk(long mb) {
  struct stat root;
  char opts[64];
  snprintf(opts, sizeof opts, "size=%ldm,mode=0700", mb);
  if (stat("/", &root) < 0) return fail("cannot stat", "/");
  if (mount("berth-disk", DISK_DIR, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0) return fail("cannot mount a tmpfs on", DISK_DIR);
  if (mkdir(DISK_DIR "/upper", root.st_mode & 07777) < 0 || mkdir(DISK_DIR "/work", 0700) < 0 || mkdir(NEW_ROOT, 0755) < 0) return fail("cannot make the layer's directories in", DISK_DIR);
  /* The overlay's root takes its upper directory's owner and mode: those of the image's root. */
  if (chown(DISK_DIR "/upper", root.st_uid, root.st_gid) < 0 || chmod(DISK_DIR "/upper", root.st_mode & 07777) < 0) return fail("cannot set the owner of", DISK_DIR "/upper");
  if (mount("berth-root", NEW_ROOT, "overlay", 0, "lowerdir=/,upperdir=" DISK_DIR "/upper,workdir=" DISK_DIR "/work") < 0) return fail("cannot mount the overlay on", NEW_ROOT);
  if (bind_mounts() < 0) return -1;
  if (chdir(NEW_ROOT) < 0) return fail("cannot enter", NEW_ROOT);
  /* The old root goes to the new root's DISK_DIR (a plain directory there) and is detached at once. */
  if (syscall(SYS_pivot_root, ".", "." DISK_DIR) < 0) return fail("cannot pivot_root to", NEW_ROOT);
  if (umount2(DISK_DIR, MNT_DETACH) < 0) return fail("cannot detach the old root from", DISK_DIR);
  if (chdir("/") < 0) return fail("cannot enter", "/");
  return 0;
}

/*
 * The QEMU guest: a session's disk layer is larger than the image's filesystem when its diskMb asked for more
 * room than the image has free (drivers/qemu). Grow the mounted ext4 root to its device, as resize2fs does
 * online. statfs's block count leaves out ext4's own overhead, so this runs at every boot; the kernel returns at
 * once when the sizes already match, and never shrinks. A failure is logged and the guest runs on with the
 * image's room.
 */
#define EXT4_SUPER_MAGIC_ 0xEF53
#define EXT4_IOC_RESIZE_FS_ _IOW('f', 16, uint64_t)

void grow_root(void) {
  struct stat st;
  struct statfs sf;
  if (stat("/", &st) < 0 || statfs("/", &sf) < 0 || sf.f_type != EXT4_SUPER_MAGIC_ || sf.f_bsize <= 0) return;
  char path[64];
  snprintf(path, sizeof path, "/sys/dev/block/%u:%u/size", major(st.st_dev), minor(st.st_dev));
  FILE *f = fopen(path, "re");
  unsigned long long sectors = 0;
  int got = f && fscanf(f, "%llu", &sectors) == 1;
  if (f) fclose(f);
  if (!got) return;
  uint64_t blocks = sectors * 512 / (uint64_t)sf.f_bsize;
  if (blocks <= (uint64_t)sf.f_blocks) return;
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int64_t t0 = now_ms();
  if (fd < 0 || ioctl(fd, EXT4_IOC_RESIZE_FS_, &blocks) < 0) logmsg("cannot grow the root filesystem to %" PRIu64 " blocks: %s", blocks, strerror(errno));
  else logmsg("root filesystem sized to its disk, %" PRIu64 " blocks of %ld bytes, in %" PRId64 " ms", blocks, (long)sf.f_bsize, now_ms() - t0);
  if (fd >= 0) close(fd);
}
