/* comm_tcp.h — the TCP transport of a world started without an MPI launcher (engine/comm.h):
 * every rank is connected to rank 0, found through a rendezvous file. Internal to engine/comm.c.
 *
 * Bootstrap: rank 0 listens on a port (LH_RENDEZVOUS_PORT, default any free one) and writes
 * "HOST PORT NONCE" into the rendezvous file (by rename, so a reader never sees half of it; HOST
 * is LH_RENDEZVOUS_HOST, default the host name). The other ranks wait for the file, connect, and
 * say their rank, the world size, the nonce and their host name; rank 0 checks them, answers each
 * with its local rank and size (ranks grouped by host name), and removes the file once every rank
 * is in. A stale file of an earlier run has another nonce (or a closed port): its readers retry
 * until the run's own file appears or the timeout passes.
 *
 * Messages: a 16-byte header (magic, tag, length) before each payload, checked by the receiver
 * against the tag and length it expects, so ranks out of step fail with an error instead of
 * misreading each other. A peer that ends (EOF, reset) fails the call with a message naming it.
 */
#ifndef LH_ENGINE_COMM_TCP_H
#define LH_ENGINE_COMM_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct lh_tcp lh_tcp;

/* Join a world of `size` ranks as `rank` through the rendezvous file at path, waiting at most
 * timeout_s for the others (rank 0) or for rank 0 (the others). */
lh_status lh_tcp_join(int rank, int size, const char *path, double timeout_s, lh_tcp **out, int *local_rank,
                      int *local_size, lh_error *err);
/* Close the connections (and, on rank 0, remove a rendezvous file still there); accepts NULL. */
void lh_tcp_leave(lh_tcp *t);
/* Rank 0 talks to rank `peer` (1..size-1); the others only to rank 0 (peer 0). */
lh_status lh_tcp_send(lh_tcp *t, int peer, uint32_t tag, const void *buf, size_t n, lh_error *err);
lh_status lh_tcp_recv(lh_tcp *t, int peer, uint32_t tag, void *buf, size_t n, lh_error *err);

#endif
