/* comm_tcp.c — the TCP transport of a world started without MPI (see comm_tcp.h).
 *
 * Blocking sockets with TCP_NODELAY (the engine's commands and statuses are small messages), sent
 * with MSG_NOSIGNAL so that a peer that ended makes an error, not a SIGPIPE. The bootstrap polls
 * (the file, connect, accept) every 50 ms up to the deadline.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "engine/comm_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "util/fs.h"

#define TCP_MAGIC 0x4c48524bu /* "LHRK" */
#define HOST_MAX 256

struct lh_tcp {
  int rank, size;
  int *fd;         /* rank 0: fd[r] for r = 1..size-1; the others: fd[0], the link to rank 0 */
  char path[4096]; /* rank 0: the rendezvous file while it exists ("" once removed) */
};

typedef struct hello {
  uint32_t magic, rank, size, pad;
  uint64_t nonce;
  char host[HOST_MAX];
} hello;
typedef struct welcome {
  uint32_t magic, local_rank, local_size, ok;
} welcome;
typedef struct header {
  uint32_t magic, tag;
  uint64_t bytes;
} header;

static void nap(void) {
  struct timespec t = {0, 50 * 1000 * 1000};
  nanosleep(&t, NULL);
}

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}
/* 0, or -1 with errno (0 for an orderly end of the peer) */
static int read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) errno = 0;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

static int link_fd(lh_tcp *t, int peer, lh_error *err) {
  if (t->rank == 0 ? peer < 1 || peer >= t->size : peer != 0) {
    lh_error_set(err, LH_EINVAL, "ranks: rank %d cannot talk to rank %d over the star", t->rank, peer);
    return -1;
  }
  return t->fd[t->rank == 0 ? peer : 0];
}

static lh_status peer_gone(lh_tcp *t, int peer, const char *what, lh_error *err) {
  if (errno)
    return lh_error_set(err, LH_EBACKEND, "ranks: rank %d: %s rank %d failed: %s", t->rank, what, peer,
                        strerror(errno));
  return lh_error_set(err, LH_EBACKEND, "ranks: rank %d: rank %d ended the connection (it exited or was killed)",
                      t->rank, peer);
}

lh_status lh_tcp_send(lh_tcp *t, int peer, uint32_t tag, const void *buf, size_t n, lh_error *err) {
  int fd = link_fd(t, peer, err);
  if (fd < 0) return err->code;
  header h = {TCP_MAGIC, tag, n};
  if (write_all(fd, &h, sizeof h) || (n && write_all(fd, buf, n))) return peer_gone(t, peer, "sending to", err);
  return LH_OK;
}

lh_status lh_tcp_recv(lh_tcp *t, int peer, uint32_t tag, void *buf, size_t n, lh_error *err) {
  int fd = link_fd(t, peer, err);
  if (fd < 0) return err->code;
  header h;
  if (read_all(fd, &h, sizeof h)) return peer_gone(t, peer, "receiving from", err);
  if (h.magic != TCP_MAGIC || h.tag != tag || h.bytes != n)
    return lh_error_set(err, LH_EBACKEND,
                        "ranks: rank %d expected message %u of %zu bytes from rank %d and got %u of %llu bytes: the "
                        "ranks are out of step",
                        t->rank, tag, n, peer, h.tag, (unsigned long long)h.bytes);
  if (n && read_all(fd, buf, n)) return peer_gone(t, peer, "receiving from", err);
  return LH_OK;
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void lh_tcp_leave(lh_tcp *t) {
  if (!t) return;
  for (int i = 0; i < t->size; i++)
    if (t->fd[i] >= 0) close(t->fd[i]);
  if (t->path[0]) unlink(t->path);
  free(t->fd);
  free(t);
}

static void my_host(char *host) {
  if (gethostname(host, HOST_MAX - 1)) snprintf(host, HOST_MAX, "localhost");
  host[HOST_MAX - 1] = 0;
}

/* rank 0: listen, publish the address, take the others in, tell each its local rank */
static lh_status serve_rendezvous(lh_tcp *t, const char *path, double deadline, int *local_rank, int *local_size,
                                  lh_error *err) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) return lh_error_set(err, LH_EIO, "ranks: socket: %s", strerror(errno));
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  const char *port_env = getenv("LH_RENDEZVOUS_PORT");
  a.sin_port = htons(port_env ? (uint16_t)atoi(port_env) : 0);
  socklen_t al = sizeof a;
  if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, t->size) || getsockname(ls, (struct sockaddr *)&a, &al)) {
    lh_status st = lh_error_set(err, LH_EIO, "ranks: rank 0 cannot listen (port %s): %s",
                                port_env ? port_env : "any", strerror(errno));
    close(ls);
    return st;
  }
  char host[HOST_MAX], tmp[4200];
  const char *h = getenv("LH_RENDEZVOUS_HOST");
  if (h && *h) snprintf(host, sizeof host, "%s", h);
  else my_host(host);
  uint64_t nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)(lh_now() * 1e6);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%s %u %llu\n", host, (unsigned)ntohs(a.sin_port), (unsigned long long)nonce) < 0 ||
      fclose(f) || rename(tmp, path)) {
    lh_status st = lh_error_set(err, LH_EIO, "ranks: rank 0 cannot write the rendezvous file %s: %s", path,
                                strerror(errno));
    if (f) unlink(tmp);
    close(ls);
    return st;
  }
  snprintf(t->path, sizeof t->path, "%s", path);
  char(*hosts)[HOST_MAX] = calloc((size_t)t->size, HOST_MAX);
  if (!hosts) {
    close(ls);
    return lh_error_set(err, LH_ENOMEM, "ranks: out of memory");
  }
  my_host(hosts[0]);
  lh_status st = LH_OK;
  for (int joined = 1; joined < t->size && !st;) {
    struct pollfd p = {ls, POLLIN, 0};
    int left_ms = (int)((deadline - lh_now()) * 1e3);
    if (left_ms <= 0) {
      st = lh_error_set(err, LH_EBACKEND, "ranks: rank 0: %d of %d ranks joined through %s before the timeout",
                        joined, t->size, path);
      break;
    }
    if (poll(&p, 1, left_ms < 200 ? left_ms : 200) <= 0) continue;
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) continue;
    set_nodelay(fd);
    hello hi;
    struct timeval tv = {5, 0}; /* a connection that says nothing is not a rank */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (read_all(fd, &hi, sizeof hi) || hi.magic != TCP_MAGIC || hi.nonce != nonce) {
      close(fd); /* a stray connection, or a rank that read a stale file: it retries */
      continue;
    }
    struct timeval none = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    if ((int)hi.size != t->size || hi.rank < 1 || (int)hi.rank >= t->size || t->fd[hi.rank] >= 0) {
      st = lh_error_set(err, LH_EINVAL,
                        "ranks: a process joined as rank %u of %u, but this world has %d ranks%s (check LH_RANK "
                        "and LH_WORLD_SIZE)",
                        hi.rank, hi.size, t->size,
                        hi.rank >= 1 && (int)hi.rank < t->size && t->fd[hi.rank] >= 0 ? " and that rank is taken" : "");
      close(fd);
      break;
    }
    hi.host[HOST_MAX - 1] = 0;
    memcpy(hosts[hi.rank], hi.host, HOST_MAX);
    t->fd[hi.rank] = fd;
    joined++;
  }
  close(ls);
  unlink(path);
  t->path[0] = 0;
  for (int r = 0; r < t->size && !st; r++) {
    welcome w = {TCP_MAGIC, 0, 0, 1};
    for (int q = 0; q < t->size; q++)
      if (!strcmp(hosts[q], hosts[r])) w.local_rank += q < r, w.local_size++;
    if (r == 0) *local_rank = (int)w.local_rank, *local_size = (int)w.local_size;
    else if (write_all(t->fd[r], &w, sizeof w)) st = peer_gone(t, r, "welcoming", err);
  }
  free(hosts);
  return st;
}

/* the others: wait for the file, connect, introduce ourselves */
static lh_status join_rendezvous(lh_tcp *t, const char *path, double deadline, int *local_rank, int *local_size,
                                 lh_error *err) {
  char why[512] = "the file did not appear";
  for (; lh_now() < deadline; nap()) {
    FILE *f = fopen(path, "r");
    if (!f) continue;
    char host[HOST_MAX] = "";
    unsigned port = 0;
    unsigned long long nonce = 0;
    int got = fscanf(f, "%255s %u %llu", host, &port, &nonce);
    fclose(f);
    if (got != 3) continue; /* not fully there yet (rank 0 writes it by rename, but be lenient) */
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof ps, "%u", port);
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai) {
      snprintf(why, sizeof why, "cannot resolve %s: %s", host, gai_strerror(gai));
      continue;
    }
    int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen)) {
      snprintf(why, sizeof why, "connecting to %s:%u: %s", host, port, strerror(errno));
      close(fd);
      fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) continue;
    set_nodelay(fd);
    hello hi = {TCP_MAGIC, (uint32_t)t->rank, (uint32_t)t->size, 0, nonce, {0}};
    my_host(hi.host);
    welcome w;
    /* rank 0 answers once every rank is in, so wait up to the deadline, and no longer: whatever
     * listens at a stale file's port may never answer */
    const double left = deadline - lh_now() + 1;
    struct timeval tv = {(time_t)left, (suseconds_t)((left - (double)(time_t)left) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (write_all(fd, &hi, sizeof hi) || read_all(fd, &w, sizeof w) || w.magic != TCP_MAGIC || !w.ok) {
      snprintf(why, sizeof why, "%s:%u did not take rank %d in (a stale rendezvous file?)", host, port, t->rank);
      close(fd);
      continue;
    }
    struct timeval none = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    t->fd[0] = fd;
    *local_rank = (int)w.local_rank, *local_size = (int)w.local_size;
    return LH_OK;
  }
  return lh_error_set(err, LH_EBACKEND, "ranks: rank %d could not join through %s before the timeout: %s", t->rank,
                      path, why);
}

lh_status lh_tcp_join(int rank, int size, const char *path, double timeout_s, lh_tcp **out, int *local_rank,
                      int *local_size, lh_error *err) {
  *out = NULL;
  lh_tcp *t = calloc(1, sizeof *t);
  int *fd = t ? malloc((size_t)size * sizeof *fd) : NULL;
  if (!fd) {
    free(t);
    return lh_error_set(err, LH_ENOMEM, "ranks: out of memory");
  }
  for (int i = 0; i < size; i++) fd[i] = -1;
  t->rank = rank, t->size = size, t->fd = fd;
  const double deadline = lh_now() + timeout_s;
  lh_status st = rank == 0 ? serve_rendezvous(t, path, deadline, local_rank, local_size, err)
                           : join_rendezvous(t, path, deadline, local_rank, local_size, err);
  if (st) {
    lh_tcp_leave(t);
    return st;
  }
  *out = t;
  return LH_OK;
}
