/*
 * agent.h, berth-agent: the in-sandbox end of Berth's host channel. PROTOCOL.md one folder up is the spec;
 * these files implement it and nothing more.
 *
 * Shape: one thread, one poll() loop. Every fd we own is O_CLOEXEC, and every fd the loop reads or
 * writes (except regular files) is non-blocking, so nothing can stall the loop except short file
 * system calls. Lines for the host are queued in one output buffer; when it holds more than OUT_HIGH
 * bytes we stop reading child output and file data (back-pressure reaches the children through their
 * pipes), but host input is always read so a kill can never be stuck behind output.
 *
 * Safe as PID 1: SIGCHLD arrives through a signalfd and every child is reaped with
 * waitpid(-1, WNOHANG); only the pids we started produce `x` lines. When not PID 1 we make ourselves
 * a child subreaper so orphans behave the same way on a plain host (tests).
 *
 * Build: scripts/build-agent.mjs (gcc -O2 -static -Wall -Wextra -Werror -o berth-agent *.c), one static binary.
 *
 * Sections, one room each: 1 limits and state (this header; the state is defined in state.c),
 * 2 utilities and 3 base64 (util.c), 4 output and 5 line parsing (output.c), 6 commands (exec.c),
 * 7 file reads and writes (files.c), 8 file system queries (fs.c), 15 background processes (bg.c), 16 watches (watch.c),
 * 17 sockets (sock.c), 18 terminals (term.c), 19 the writable layer (disk.c), 9 identity, 10 hello/quiesce/reset and
 * 11 dispatch (control.c), 12 the host channel and 13 signals and reaping (channel.c), 14 main loop
 * (main.c). The agent is one thread: the state below is shared by the files, never by threads.
 */
#ifndef BERTH_AGENT_H
#define BERTH_AGENT_H
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/random.h>
#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ==== 1. limits and state ============================================================================ */

#define PROTOCOL_VERSION 2 /* 2: guards (P <id> <path> g) */
#define MAX_LINE (1u << 20)        /* bytes, without '\n'; a longer line is discarded whole */
#define CHUNK (48u * 1024)         /* raw bytes carried by one o/e/D line */
#define READ_CREDIT 16             /* D lines a read may send before the host grants more */
#define OUT_HIGH (4u << 20)        /* queued output bytes above which producers pause */
#define DRAIN_MAX (1u << 20)       /* bytes drained from each pipe of an exited command */
#define IN_READ (64u * 1024)       /* bytes per read() of host input */
#define RECONNECT_MS 100           /* retry period for a lost channel */
#define LIST_BATCH 256             /* directory entries emitted per loop turn and listing */
#define MAX_CREDIT (1u << 20)      /* cap on outstanding read grants (guards against overflow) */
#define RING_MAX (1u << 20)        /* bytes of each stream a background process keeps (the last ones) */
#define BG_MAX 32                  /* background process records kept (running + finished) */
#define WATCH_MAX_DIRS 8192        /* directories one recursive watch may cover */
#define BG_ARGV_MAX (256u * 1024)  /* bytes of argv a background process may have (it is echoed by J) */
#define AGENT_ID_BASE (UINT64_C(1) << 52) /* stream ids from here up are the agent's (accepted sockets) */
#define SOCK_MAX 1024              /* TCP streams open at once (connected and accepted) */

extern const char *DEFAULT_PATH;
extern const char *DEFAULT_HOME;

/* A byte queue: live data is p[head .. head+len). */
struct buf {
  char *p;
  size_t head, len, cap;
};

/* A running command. Lives from fork until its pid is reaped. */
struct exec {
  struct exec *next;
  uint64_t id;
  pid_t pid;                   /* also its process group id */
  int fd_out, fd_err, fd_in;   /* our pipe ends; -1 once closed */
  struct buf stdin_q;          /* bytes from `I` not yet taken by the child's stdin pipe */
  int stdin_close_pending;     /* `C` arrived while stdin_q was not empty */
  int64_t deadline;            /* monotonic ms at which to SIGKILL the group; 0 = none */
  int timed_out;
  int detached;                /* its host went away (H with reset): still serviced, reports nothing */
  struct bg *bg;               /* a background process: output goes to its rings, no o/e/x lines */
};

/* The last RING_MAX bytes of a stream: the byte at absolute offset k is p[k % cap]; total is every
 * byte ever appended. cap grows by doubling up to RING_MAX, and total > cap only once cap == RING_MAX. */
struct ring {
  char *p;
  size_t cap;
  uint64_t total;
};

/* A background process (`B`): lives in memory (so in every snapshot) until BG_MAX newer ones push it out. */
struct bg {
  struct bg *next;             /* newest first */
  uint64_t id;
  char *tag;                   /* the host's name for it (its execId), unique among the records */
  pid_t pid;
  char **argv;
  size_t argc;
  int running, code, sig, timed_out;
  int64_t started_ms, ended_ms; /* wall clock, ms since the epoch; ended 0 while running */
  struct ring out, err;
  int pty;                     /* a terminal (`T open`): out is the PTY's output, err stays empty */
  unsigned cols, rows;         /* a terminal's window size, as last set */
};

/* A reader of a background process's rings (`O`), with read credit like `R`. */
struct bgfollow {
  struct bgfollow *next;
  uint64_t id;
  struct bg *bg;
  uint64_t off[2];             /* next absolute offset to send: stdout, stderr */
  int follow, turn;
  uint64_t credit;
};

/* A file being streamed to the host (`R`). */
struct fread {
  struct fread *next;
  uint64_t id;
  int fd;
  uint64_t credit;             /* D lines we may still send */
  uint64_t bytes;
};

/* A file being received from the host (`W`): data goes to tmp, renamed over path on `F`. */
struct fwrite {
  struct fwrite *next;
  uint64_t id;
  int fd;
  char *path, *tmp;
  uint64_t bytes;
};

/* A directory being listed (`L`), a batch of entries per loop turn. */
struct flist {
  struct flist *next;
  uint64_t id;
  DIR *dir;
  uint64_t count;
};

/* A forked helper doing slow work off the loop (recursive removal). */
struct helper {
  struct helper *next;
  uint64_t id;
  pid_t pid;
  char *path;
  int detached;
};

extern struct exec *execs;
extern struct fread *reads;
extern struct fwrite *writes;
extern struct flist *lists;
extern struct helper *helpers;
/* A file system watch (`Y`): its own inotify instance; paths[wd] is the watched path of each descriptor. */
struct watch {
  struct watch *next;
  uint64_t id;
  int fd, recursive;
  char **paths;
  size_t cap, count;
};

extern struct watch *watches;

/* A TCP stream relayed to the host (`E`): connected for the host, or accepted by a listener. */
struct sock {
  struct sock *next;
  uint64_t id;                 /* the host's request id, or >= AGENT_ID_BASE for an accepted one */
  int fd;                      /* -1 once closed */
  uint16_t port;               /* the loopback port it was connected to or accepted on */
  int connecting, tried_v6;
  struct buf wq;               /* host bytes not yet taken by the socket */
  uint64_t credit;             /* `c <id> d` lines we may still send */
  int rd_eof;                  /* the peer's EOF was sent to the host */
  int eof_pending, wr_shut;    /* the host sent eof / our write side is shut down */
  int dead;                    /* ended: freed by socks_sweep at the end of the loop turn */
};

/* A listening socket on 127.0.0.1 (`E listen`): belongs to the machine, not to a host. */
struct listener {
  struct listener *next;
  uint16_t port;
  int fd;
};

extern struct sock *socks;
extern struct listener *listeners;
extern struct bg *bgs;
extern struct bgfollow *follows;

extern struct buf out;             /* lines for the host, not yet written */
extern struct buf inb;             /* host bytes not yet parsed into lines */
extern int in_discarding;          /* inside an over-long line: drop bytes up to the next '\n' */
extern int last_sent_nl;       /* the last byte written to the host ended a line */

extern const char *device_path;    /* --device PATH, else NULL: the channel is fd 0/1 */
extern int chan_in, chan_out;
extern int chan_in_nonblock;
extern int chan_heard;             /* device mode: bytes arrived since the device was (re)opened */
extern int64_t chan_retry_at;      /* device mode: when to reopen a lost device */
extern int64_t in_paused_until;    /* stdio mode as PID 1: host input hit EOF, look again then */

extern int am_pid1;
extern int sig_fd;
extern int quiesce_pending, quiesced;
extern uint64_t next_id;       /* one more than the highest request id seen */
extern unsigned tmp_counter;

extern char **base_env;            /* K=V strings given to every command, request env merged over */
extern size_t base_envc;

extern unsigned char iobuf[CHUNK]; /* scratch for one chunk of child output or file data */

/* ==== functions shared between the files ============================================================= */

/* util.c: utilities: logging, allocation, byte queues, atomic file writes; base64 */
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xrealloc(void *p, size_t n);
void *xcalloc(size_t n, size_t size);
char *xstrdup(const char *s);
int64_t now_ms(void);
int64_t wall_ms(void);
void set_nonblock(int fd);
void close_fd(int *fd);
char *buf_reserve(struct buf *b, size_t n);
void buf_append(struct buf *b, const void *d, size_t n);
void buf_consume(struct buf *b, size_t n);
void buf_free(struct buf *b);
int write_all(int fd, const void *d, size_t n);
int create_tmp_beside(const char *path, mode_t mode, char **tmp);
void fsync_parent(const char *path);
int write_file_atomic(const char *path, const void *data, size_t n, mode_t mode, int durable);
void b64_init(void);
size_t b64_encode(char *dst, const unsigned char *s, size_t n);
int b64_decode_inplace(char *s, size_t *outlen);

/* output.c: lines to the host and parsing of lines from it */
void out_raw(const char *s, size_t n);
void out_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void out_b64(const void *d, size_t n);
void out_data_line(char tag, uint64_t id, const void *d, size_t n);
void reply_ok(uint64_t id, const char *value);
void reply_count(uint64_t id, uint64_t n);
void reply_err(uint64_t id, int err, const char *what, const char *path);
void out_drop_unsent(void);
void tokenize(char *line);
int parse_u64(const char *s, uint64_t *v);
int f_u64(size_t i, uint64_t *v);
int f_flag(size_t i, int *v);
int f_oct(size_t i, mode_t *v);
int f_bytes(size_t i, char **p, size_t *n);
int f_str(size_t i, char **p);
int f_path(size_t i, char **p);
int realpath_guard(uint64_t id);
extern char **tok;   /* the fields of the line being handled */
extern size_t ntok;

/* exec.c: running commands (X I C K) */
void cmd_exec(uint64_t id, int background);
void exec_stdin_flush(struct exec *x);
void cmd_stdin(uint64_t id);
void cmd_close_stdin(uint64_t id);
void cmd_kill(uint64_t id);
ssize_t exec_read(struct exec *x, int *fd, char tag);
void exec_finish(struct exec **pp, int status);
void check_timeouts(int64_t now);

/* files.c: streaming file reads and writes (R G W D F A) */
void fread_free(struct fread **pp);
void fwrite_free(struct fwrite **pp, int remove_tmp);
void cmd_read(uint64_t id);
void pump_reads(void);
int reads_can_progress(void);
void cmd_grant(uint64_t id);
void cmd_write(uint64_t id);
void cmd_data(uint64_t id);
void cmd_finish(uint64_t id);
void cmd_abort(uint64_t id);

/* fs.c: file system queries and changes (L S P M U) */
void cmd_list(uint64_t id);
void pump_lists(void);
void cmd_stat(uint64_t id);
void cmd_realpath(uint64_t id);
int make_dirs(char *path, int parents, mode_t mode);
void cmd_mkdir(uint64_t id);
void cmd_remove(uint64_t id);
void cmd_rename(uint64_t id);
void helper_finish(struct helper **pp, int status);

/* bg.c: background processes (B J O Z) */
void bg_output(struct bg *b, char tag, const unsigned char *d, size_t n);
void bg_exited(struct bg *b, int code, int sig, int timed_out);
int bg_make_room(void);
struct bg *bg_new(uint64_t id, const char *tag, pid_t pid, char **argv, size_t argc);
struct bg *find_bg(const char *tag);
void cmd_jobs(uint64_t id);
void job_line(uint64_t id, struct bg *b);
void cmd_output(uint64_t id);
void cmd_signal_bg(uint64_t id);
void pump_follows(void);
int follows_can_progress(void);
int follow_grant(uint64_t id, uint64_t n);
int follow_abort(uint64_t id);
void follows_reset(void);

/* term.c: terminals (T): background processes on a PTY */
void cmd_terminal(uint64_t id);
void spawn_exec_fds(uint64_t id, const char *tag, char **argv, size_t argc, pid_t pid, int fd_out, int fd_err, int fd_in);
char **merge_env(char **items, size_t n);
int valid_tag(const char *s);
extern int64_t pty_fast_until; /* main.c: read PTYs every ms until then */
#define PTY_FAST_FOR 200
#define TERM_INPUT_MAX (1u << 20) /* bytes of terminal input queued in the agent before `T input` gets EAGAIN */

/* watch.c: file system watches (Y) */
void cmd_watch(uint64_t id);
void watch_read(struct watch *w);
int watch_abort(uint64_t id);
void watches_reset(void);

/* sock.c: TCP streams and listeners (E) */
void cmd_socket(uint64_t id);
short sock_events(struct sock *s);
void sock_ready(struct sock *s, short revents);
int listener_can_accept(void);
void listener_ready(struct listener *l);
void socks_sweep(void);
void socks_reset(void);

/* disk.c: the writable layer (--disk-mb): 0, or -1 with the cause logged; a QEMU guest's root grown to its disk */
int setup_disk(long mb);
void grow_root(void);

/* control.c: identity (N), hello/quiesce/reset (H Q) and dispatch of host lines */
void process_input(void);

/* channel.c: the host channel, signals and reaping */
int private_fd(int fd, int accmode, int *nonblock);
void chan_open_device(void);
void chan_lost(int err, int on_output);
size_t chan_read(void);
void flush_out(void);
void setup_signals(void);
void handle_signals(void);

#endif
