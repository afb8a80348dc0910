/* Section 17: TCP sockets inside the sandbox (E; c and n to the host). See agent.h and PROTOCOL.md,
 * "Sockets". A stream is one TCP connection on loopback, relayed as lines: `connect` opens one from the
 * host's side, a listener announces each connection it accepts with `n`. Listeners belong to the machine
 * (a host reset leaves them); connections belong to the host that has them. */
#include "agent.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

struct sock *socks;
struct listener *listeners;
static uint64_t next_agent_id = AGENT_ID_BASE;
static size_t nsocks;

static void sock_flush(struct sock *s);

static struct sock *find_sock(uint64_t id) {
  for (struct sock *s = socks; s; s = s->next)
    if (s->id == id && !s->dead) return s;
  return NULL;
}

/* The stream is over: the fd is closed now, the record freed by socks_sweep (a poll slot may still point
 * at it this turn). With rst, the peer sees a reset rather than an orderly close. */
static void sock_close(struct sock *s, int rst) {
  if (s->dead) return;
  if (rst && s->fd >= 0) {
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  close_fd(&s->fd);
  buf_free(&s->wq);
  s->dead = 1;
  nsocks--;
}

static void sock_fail(struct sock *s, int err, const char *what) {
  char where[32];
  snprintf(where, sizeof where, "127.0.0.1:%u", (unsigned)s->port);
  reply_err(s->id, err, what, where);
  sock_close(s, 1);
}

/* Both directions are finished (the peer's EOF was sent, our write side is shut): the clean end. */
static void sock_maybe_done(struct sock *s) {
  if (!s->dead && s->rd_eof && s->wr_shut) {
    reply_ok(s->id, "-");
    sock_close(s, 0);
  }
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* a request/response relay: no Nagle */
}

static struct sock *sock_new(uint64_t id, int fd, unsigned port) {
  struct sock *s = xcalloc(1, sizeof *s);
  s->id = id;
  s->fd = fd;
  s->port = (uint16_t)port;
  s->credit = READ_CREDIT;
  s->next = socks;
  socks = s;
  nsocks++;
  return s;
}

/* Starts a non-blocking connect to loopback (IPv4 first, then ::1); 0, or an errno. */
static int start_connect(struct sock *s) {
  for (;;) {
    int v6 = s->tried_v6;
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    int r;
    if (v6) {
      struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(s->port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
      r = connect(fd, (struct sockaddr *)&a, sizeof a);
    } else {
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(s->port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      r = connect(fd, (struct sockaddr *)&a, sizeof a);
    }
    if (r == 0 || errno == EINPROGRESS) {
      s->fd = fd;
      s->connecting = r != 0;
      set_nodelay(fd);
      if (r == 0) out_fmt("c %" PRIu64 " open\n", s->id);
      return 0;
    }
    int e = errno;
    close(fd);
    if (e != ECONNREFUSED || v6) return v6 ? ECONNREFUSED : e; /* ::1 failing in any way: IPv4's answer stands */
    s->tried_v6 = 1;
  }
}

/* E <id> connect <port> */
static void sock_connect(uint64_t id) {
  uint64_t port;
  if (ntok != 4 || f_u64(3, &port) || port < 1 || port > 65535 || id >= AGENT_ID_BASE) {
    reply_err(id, EINVAL, "connect: malformed E line", NULL);
    return;
  }
  if (nsocks >= SOCK_MAX) {
    reply_err(id, EMFILE, "connect: too many connections", NULL);
    return;
  }
  struct sock *s = sock_new(id, -1, (unsigned)port);
  int err = start_connect(s);
  if (err) sock_fail(s, err, "connect");
}

/* The connect in progress finished (its fd became writable): open, the next address, or the error. */
static void sock_connected(struct sock *s) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
  if (!err) {
    s->connecting = 0;
    out_fmt("c %" PRIu64 " open\n", s->id);
    sock_flush(s); /* bytes or an eof the host sent while we were connecting */
    return;
  }
  close_fd(&s->fd);
  if (err == ECONNREFUSED && !s->tried_v6) {
    s->tried_v6 = 1;
    err = start_connect(s);
    if (!err) return;
  }
  sock_fail(s, err, "connect");
}

static struct listener *find_listener(unsigned port) {
  for (struct listener *l = listeners; l; l = l->next)
    if (l->port == port) return l;
  return NULL;
}

/* E <id> listen <port> → r <id> 0 <port> (the port bound, for 0). Listening again on a port we already
 * hold is success: a new host claims the machine's listeners that way. */
static void sock_listen(uint64_t id) {
  uint64_t port;
  if (ntok != 4 || f_u64(3, &port) || port > 65535) {
    reply_err(id, EINVAL, "listen: malformed E line", NULL);
    return;
  }
  if (port && find_listener((unsigned)port)) {
    reply_count(id, port);
    return;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    reply_err(id, errno, "listen", NULL);
    return;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0 || getsockname(fd, (struct sockaddr *)&a, &alen) < 0) {
    int e = errno;
    close(fd);
    char where[32];
    snprintf(where, sizeof where, "127.0.0.1:%u", (unsigned)port);
    reply_err(id, e, "listen", where);
    return;
  }
  struct listener *l = xcalloc(1, sizeof *l);
  l->fd = fd;
  l->port = ntohs(a.sin_port);
  l->next = listeners;
  listeners = l;
  reply_count(id, l->port);
}

/* E <id> unlisten <port> → r <id> 0 -; ENOENT when nothing of ours listens there. Accepted connections
 * stay. */
static void sock_unlisten(uint64_t id) {
  uint64_t port;
  if (ntok != 4 || f_u64(3, &port) || port < 1 || port > 65535) {
    reply_err(id, EINVAL, "unlisten: malformed E line", NULL);
    return;
  }
  for (struct listener **pp = &listeners; *pp; pp = &(*pp)->next) {
    if ((*pp)->port == port) {
      struct listener *l = *pp;
      *pp = l->next;
      close(l->fd);
      free(l);
      reply_ok(id, "-");
      return;
    }
  }
  reply_err(id, ENOENT, "unlisten: not listening", NULL);
}

/* E <id> listeners → c <id> listener <port> lines, then r <id> 0 <count> */
static void sock_listeners(uint64_t id) {
  uint64_t n = 0;
  for (struct listener *l = listeners; l; l = l->next, n++) out_fmt("c %" PRIu64 " listener %u\n", id, (unsigned)l->port);
  reply_count(id, n);
}

/* Writes queued host bytes to the socket; acknowledges what it took with `c <id> a <n>`. */
static void sock_flush(struct sock *s) {
  size_t acked = 0;
  while (s->fd >= 0 && !s->connecting && s->wq.len) {
    ssize_t n = send(s->fd, s->wq.p + s->wq.head, s->wq.len, MSG_NOSIGNAL);
    if (n > 0) {
      buf_consume(&s->wq, (size_t)n);
      acked += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      break;
    } else {
      if (acked) out_fmt("c %" PRIu64 " a %zu\n", s->id, acked);
      sock_fail(s, n < 0 ? errno : EIO, "send");
      return;
    }
  }
  if (acked) out_fmt("c %" PRIu64 " a %zu\n", s->id, acked);
  if (!s->wq.len) {
    buf_free(&s->wq);
    if (s->eof_pending && !s->connecting && s->fd >= 0 && !s->wr_shut) {
      shutdown(s->fd, SHUT_WR); /* ENOTCONN when the peer is already gone: the end is the same */
      s->wr_shut = 1;
      sock_maybe_done(s);
    }
  }
}

/* Reads what the socket has, a chunk per credit, while the output buffer has room. */
static void sock_read(struct sock *s) {
  for (int k = 0; k < 4 && s->fd >= 0 && s->credit && !s->rd_eof && out.len < OUT_HIGH; k++) {
    ssize_t n = recv(s->fd, iobuf, sizeof iobuf, 0);
    if (n > 0) {
      out_fmt("c %" PRIu64 " d ", s->id);
      out_b64(iobuf, (size_t)n);
      out_raw("\n", 1);
      s->credit--;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0) {
      sock_fail(s, errno, "recv");
      return;
    }
    s->rd_eof = 1;
    out_fmt("c %" PRIu64 " eof\n", s->id);
    sock_maybe_done(s);
    return;
  }
}

/* E <id> d <data> */
static void sock_data(struct sock *s) {
  char *d;
  size_t n;
  if (ntok != 4 || f_bytes(3, &d, &n) || !n || s->eof_pending) return;
  buf_append(&s->wq, d, n);
  sock_flush(s); /* at once: saves a poll round for the common small write */
}

void cmd_socket(uint64_t id) {
  if (ntok < 3) {
    reply_err(id, EINVAL, "malformed E line", NULL);
    return;
  }
  const char *sub = tok[2];
  if (!strcmp(sub, "connect")) return sock_connect(id);
  if (!strcmp(sub, "listen")) return sock_listen(id);
  if (!strcmp(sub, "unlisten")) return sock_unlisten(id);
  if (!strcmp(sub, "listeners")) return sock_listeners(id);
  struct sock *s = find_sock(id);
  if (!strcmp(sub, "d") || !strcmp(sub, "g") || !strcmp(sub, "eof") || !strcmp(sub, "rst")) {
    if (!s) return; /* a stream already ended (or never ours): its lines are late, not wrong */
    if (sub[0] == 'd') {
      sock_data(s);
    } else if (sub[0] == 'g') {
      uint64_t n;
      if (ntok == 4 && !f_u64(3, &n)) s->credit = s->credit + n > MAX_CREDIT ? MAX_CREDIT : s->credit + n;
    } else if (sub[0] == 'e') {
      s->eof_pending = 1;
      sock_flush(s);
    } else {
      sock_close(s, 1); /* the host is done with it: nothing is answered */
    }
    return;
  }
  reply_err(id, ENOSYS, "unknown E operation", NULL);
}

/* ---- the poll loop's side ---- */

short sock_events(struct sock *s) {
  if (s->dead || s->fd < 0) return 0;
  if (s->connecting) return POLLOUT;
  short ev = 0;
  if (!quiesced && s->credit && !s->rd_eof && out.len < OUT_HIGH) ev |= POLLIN;
  if (s->wq.len) ev |= POLLOUT;
  return ev;
}

void sock_ready(struct sock *s, short revents) {
  if (s->dead) return;
  if (s->connecting) {
    if (revents & (POLLOUT | POLLERR | POLLHUP)) sock_connected(s);
    return;
  }
  if (revents & POLLOUT) sock_flush(s);
  if (!s->dead && (revents & (POLLIN | POLLHUP | POLLERR))) sock_read(s);
}

int listener_can_accept(void) { return !quiesced && out.len < OUT_HIGH && nsocks < SOCK_MAX; }

/* Accepts what is waiting and announces each connection: `n <id> <port> <peerPort>`. */
void listener_ready(struct listener *l) {
  for (int k = 0; k < 16 && listener_can_accept(); k++) {
    struct sockaddr_in peer;
    socklen_t plen = sizeof peer;
    int fd = accept4(l->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return; /* EAGAIN, or a connection that died in the queue */
    set_nodelay(fd);
    struct sock *s = sock_new(next_agent_id++, fd, l->port);
    unsigned pport = plen >= sizeof peer && peer.sin_family == AF_INET ? ntohs(peer.sin_port) : 0;
    out_fmt("n %" PRIu64 " %u %u\n", s->id, (unsigned)l->port, pport);
  }
}

/* Frees the records of streams that ended this turn. */
void socks_sweep(void) {
  for (struct sock **pp = &socks; *pp;) {
    struct sock *s = *pp;
    if (s->dead) {
      *pp = s->next;
      free(s);
    } else {
      pp = &s->next;
    }
  }
}

/* A new host (H with reset): every connection is reset (its host end is gone); listeners stay. */
void socks_reset(void) {
  for (struct sock *s = socks; s; s = s->next) sock_close(s, 1); /* freed by the loop's sweep */
}
