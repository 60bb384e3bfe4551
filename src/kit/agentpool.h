/*
 * The box-provider kit's agent connections, kept in a bounded pool per
 * provider instance (agentpool.c); the linux provider and every kit user
 * (include/sbx/box.h) share this code.
 *
 * A box needs its agent connection only while an op runs on it. The pool
 * keeps at most `max` open, most recently used first; past that it closes
 * the least recently used idle one, and that box reconnects (one connect
 * attempt and the hello: ~0.1 ms over a unix socket) on its next op. A box
 * with an op in flight keeps its connection, so the cap is soft: the count
 * can exceed it by the number of boxes busy at that moment. A slot with no
 * socket path (its connection is a stream the provider handed in, such as a
 * pipe to `sbx-agent serve --stdio`) cannot reconnect, so it is never
 * evicted: it counts, and only the others make room.
 *
 * Everything runs on the loop thread except sbx__kit_agent_drop(), which
 * box_free may call from the thread that freed the sandbox.
 */
#ifndef SBX_KIT_AGENTPOOL_H
#define SBX_KIT_AGENTPOOL_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "core/internal.h"
#include "kit/client.h"

#define SBX_KIT_DEFAULT_MAX_AGENT_CONNECTIONS 256

typedef struct sbx_kit_pool sbx_kit_pool;
struct sbx_kit_wait;

/* One box's place in the pool; embedded in the box, zeroed, then _init. */
typedef struct sbx_kit_slot {
    sbx_kit_pool *pool;
    const char *socket;   /* the agent's socket path (the box's string); NULL: no reconnect */
    pid_t peer_pid;       /* > 0: the agent's pid, the only listener accepted (set before use) */
    sbx_agent_conn *conn; /* NULL: never connected, evicted, or dropped */
    bool lost;            /* a reconnect found nobody listening: the agent is gone */
    bool closed;          /* the box is being stopped: no more reconnects */
    bool reconnecting;
    struct sbx_kit_wait *waiters;     /* ops waiting for the reconnect, in order */
    void *loop;                       /* where the reconnect runs (set by use) */
    struct sbx_kit_slot *parked_next; /* in the pool's queue for a descriptor */
    struct sbx_kit_slot *prev, *next; /* in the pool's list while conn is set */
} sbx_kit_slot;

SBX_INTERNAL sbx_kit_pool *sbx__kit_agent_pool_new(int max);
/* Every slot must have been dropped. */
SBX_INTERNAL void sbx__kit_agent_pool_free(sbx_kit_pool *p);

SBX_INTERNAL void sbx__kit_agent_init(sbx_kit_slot *s, sbx_kit_pool *p, const char *socket);
/* Hands a fresh connection (create, connect) to the slot. */
SBX_INTERNAL void sbx__kit_agent_put(sbx_kit_slot *s, sbx_agent_conn *conn);
/* Closes the slot's connection for good (stop, free); later uses get no connection. */
SBX_INTERNAL void sbx__kit_agent_drop(sbx_kit_slot *s);
/*
 * True when the box's agent is known to be gone: a connection that died, or
 * a reconnect nobody answered. An evicted connection is not a sign of trouble.
 */
SBX_INTERNAL bool sbx__kit_agent_gone(const sbx_kit_slot *s);
/*
 * The box's agent is known to be gone by other means (its record says so):
 * closes the slot's connection, which may not have seen the end of its stream
 * yet, and makes later uses fail as for a connection that died.
 */
SBX_INTERNAL void sbx__kit_agent_lost(sbx_kit_slot *s);

/*
 * Calls fn(conn, code, msg, arg) with a live connection to the box's agent:
 * at once when the slot holds one, else after one reconnect on `loop`. On
 * failure conn is NULL, with the client's code and message: the agent is
 * gone when sbx__kit_agent_gone() says so afterwards (or the slot was
 * closed), otherwise the reconnect failed for a local reason (no fd left).
 */
typedef void (*sbx_kit_agent_fn)(sbx_agent_conn *conn, int code, const char *msg, void *arg);
SBX_INTERNAL void sbx__kit_agent_use(sbx_kit_slot *s, void *loop, sbx_kit_agent_fn fn, void *arg);

/* An op on the slot's connection ended: closes idle connections over the cap. */
SBX_INTERNAL void sbx__kit_agent_release(sbx_kit_slot *s);

/* Connections open (or opening) now; for tests and benchmarks. */
SBX_INTERNAL int sbx__kit_agent_pool_count(sbx_kit_pool *p);

#endif /* SBX_KIT_AGENTPOOL_H */
