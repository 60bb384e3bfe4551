/*
 * The linux provider's agent connections, kept in a bounded pool per
 * provider instance (agentpool.c).
 *
 * A box needs its agent connection only while an op runs on it. The pool
 * keeps at most `max` open, most recently used first; past that it closes
 * the least recently used idle one, and that box reconnects (one connect
 * attempt and the hello: ~0.1 ms over a unix socket) on its next op. A box
 * with an op in flight keeps its connection, so the cap is soft: the count
 * can exceed it by the number of boxes busy at that moment.
 *
 * Everything runs on the loop thread except sbx__linux_agent_drop(), which
 * box_free may call from the thread that freed the sandbox.
 */
#ifndef SBX_LINUX_AGENTPOOL_H
#define SBX_LINUX_AGENTPOOL_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "core/internal.h"
#include "kit/client.h"

#define SBX_LINUX_DEFAULT_MAX_AGENT_CONNECTIONS 256

typedef struct linux_agent_pool linux_agent_pool;
struct linux_agent_wait;

/* One box's place in the pool; embedded in the box, zeroed, then _init. */
typedef struct linux_agent_slot {
    linux_agent_pool *pool;
    const char *socket;   /* the agent's socket path (the box's string) */
    pid_t peer_pid;       /* the agent's pid, the only listener accepted (set before use) */
    sbx_agent_conn *conn; /* NULL: never connected, evicted, or dropped */
    bool lost;            /* a reconnect found nobody listening: the agent is gone */
    bool closed;          /* the box is being stopped: no more reconnects */
    bool reconnecting;
    struct linux_agent_wait *waiters;     /* ops waiting for the reconnect, in order */
    struct linux_agent_slot *prev, *next; /* in the pool's list while conn is set */
} linux_agent_slot;

SBX_INTERNAL linux_agent_pool *sbx__linux_agent_pool_new(int max);
/* Every slot must have been dropped. */
SBX_INTERNAL void sbx__linux_agent_pool_free(linux_agent_pool *p);

SBX_INTERNAL void sbx__linux_agent_init(linux_agent_slot *s, linux_agent_pool *p,
                                        const char *socket);
/* Hands a fresh connection (create, connect) to the slot. */
SBX_INTERNAL void sbx__linux_agent_put(linux_agent_slot *s, sbx_agent_conn *conn);
/* Closes the slot's connection for good (stop, free); later uses get no connection. */
SBX_INTERNAL void sbx__linux_agent_drop(linux_agent_slot *s);
/*
 * True when the box's agent is known to be gone: a connection that died, or
 * a reconnect nobody answered. An evicted connection is not a sign of trouble.
 */
SBX_INTERNAL bool sbx__linux_agent_gone(const linux_agent_slot *s);
/*
 * The box's agent is known to be gone by other means (its record says so):
 * closes the slot's connection, which may not have seen the end of its stream
 * yet, and makes later uses fail as for a connection that died.
 */
SBX_INTERNAL void sbx__linux_agent_lost(linux_agent_slot *s);

/*
 * Calls fn(conn, code, msg, arg) with a live connection to the box's agent:
 * at once when the slot holds one, else after one reconnect on `loop`. On
 * failure conn is NULL, with the client's code and message: the agent is
 * gone when sbx__linux_agent_gone() says so afterwards (or the slot was
 * closed), otherwise the reconnect failed for a local reason (no fd left).
 */
typedef void (*linux_agent_fn)(sbx_agent_conn *conn, int code, const char *msg, void *arg);
SBX_INTERNAL void sbx__linux_agent_use(linux_agent_slot *s, void *loop, linux_agent_fn fn,
                                       void *arg);

/* An op on the slot's connection ended: closes idle connections over the cap. */
SBX_INTERNAL void sbx__linux_agent_release(linux_agent_slot *s);

/* Connections open (or opening) now; for tests and benchmarks. */
SBX_INTERNAL int sbx__linux_agent_pool_count(linux_agent_pool *p);

#endif /* SBX_LINUX_AGENTPOOL_H */
