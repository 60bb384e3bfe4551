/*
 * The box-provider kit's bounded pool of agent connections (agentpool.h).
 *
 * The list is ordered by use, most recent first, and holds the slots that
 * have a connection. `count` also includes reconnects in flight (each holds
 * a socket). The lock is for sbx__kit_agent_drop() from a thread other
 * than the loop's; every other entry point runs on the loop thread.
 */
#include "kit/agentpool.h"

#include <stdlib.h>

struct sbx_kit_pool {
    pthread_mutex_t lock;
    int max;
    int count;
    sbx_kit_slot *head, *tail;
};

struct sbx_kit_wait {
    struct sbx_kit_wait *next;
    sbx_kit_agent_fn fn;
    void *arg;
};

sbx_kit_pool *sbx__kit_agent_pool_new(int max)
{
    sbx_kit_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->max = max > 0 ? max : 1;
    return p;
}

void sbx__kit_agent_pool_free(sbx_kit_pool *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->lock);
    free(p);
}

int sbx__kit_agent_pool_count(sbx_kit_pool *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->count;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void sbx__kit_agent_init(sbx_kit_slot *s, sbx_kit_pool *p, const char *socket)
{
    s->pool = p;
    s->socket = socket;
}

/* --- the list (callers hold the lock) ------------------------------------- */

static void unlink_slot(sbx_kit_pool *p, sbx_kit_slot *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        p->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        p->tail = s->prev;
    s->prev = s->next = NULL;
}

static void push_front(sbx_kit_pool *p, sbx_kit_slot *s)
{
    s->prev = NULL;
    s->next = p->head;
    if (p->head)
        p->head->prev = s;
    else
        p->tail = s;
    p->head = s;
}

/*
 * Closes least recently used idle connections until the pool is back at its
 * cap, sparing `keep`. Busy ones stay open: closing them would fail their ops.
 */
static void trim(sbx_kit_pool *p, sbx_kit_slot *keep)
{
    for (;;) {
        pthread_mutex_lock(&p->lock);
        sbx_kit_slot *victim = NULL;
        if (p->count > p->max) {
            for (sbx_kit_slot *s = p->tail; s; s = s->prev) {
                if (s != keep &&
                    (!sbx__agent_alive(s->conn) || (s->socket && sbx__agent_idle(s->conn)))) {
                    victim = s;
                    break;
                }
            }
        }
        sbx_agent_conn *conn = NULL;
        if (victim) {
            unlink_slot(p, victim);
            conn = victim->conn;
            victim->conn = NULL;
            /* A connection that died says the agent is gone: keep saying so. */
            if (!sbx__agent_alive(conn))
                victim->lost = true;
            p->count--;
        }
        pthread_mutex_unlock(&p->lock);
        if (!victim)
            return;
        sbx__agent_close(conn);
    }
}

void sbx__kit_agent_put(sbx_kit_slot *s, sbx_agent_conn *conn)
{
    sbx_kit_pool *p = s->pool;
    sbx_agent_conn *old;
    pthread_mutex_lock(&p->lock);
    old = s->conn;
    if (old)
        unlink_slot(p, s);
    else
        p->count++;
    s->conn = conn;
    s->lost = false;
    push_front(p, s);
    pthread_mutex_unlock(&p->lock);
    if (old)
        sbx__agent_close(old);
    trim(p, s);
}

/*
 * Takes the slot's connection out of the pool and closes it, marking the slot
 * closed (the box is being stopped) or lost (its agent is gone). Ops in
 * flight on it end as for a lost stream (an exec: rc 125, "sandbox").
 */
static void detach(sbx_kit_slot *s, bool closed)
{
    sbx_kit_pool *p = s->pool;
    if (!p)
        return; /* never initialised (a box that failed early) */
    pthread_mutex_lock(&p->lock);
    if (closed)
        s->closed = true;
    else
        s->lost = true;
    sbx_agent_conn *conn = s->conn;
    if (conn) {
        unlink_slot(p, s);
        s->conn = NULL;
        p->count--;
    }
    pthread_mutex_unlock(&p->lock);
    if (conn)
        sbx__agent_close(conn);
}

void sbx__kit_agent_drop(sbx_kit_slot *s)
{
    detach(s, true);
}

void sbx__kit_agent_lost(sbx_kit_slot *s)
{
    detach(s, false);
}

void sbx__kit_agent_release(sbx_kit_slot *s)
{
    if (s->pool)
        trim(s->pool, NULL);
}

bool sbx__kit_agent_gone(const sbx_kit_slot *s)
{
    return s->lost || (s->conn && !sbx__agent_alive(s->conn));
}

/* --- use and reconnect ------------------------------------------------------ */

static void on_reconnected(sbx_agent_conn *conn, int code, sbx_error *err, void *data)
{
    sbx_kit_slot *s = data;
    sbx_kit_pool *p = s->pool;
    struct sbx_kit_wait *w = s->waiters;
    s->waiters = NULL;
    s->reconnecting = false;
    if (conn && !s->closed) {
        pthread_mutex_lock(&p->lock);
        s->conn = conn; /* counted when the reconnect began */
        push_front(p, s);
        pthread_mutex_unlock(&p->lock);
    } else {
        pthread_mutex_lock(&p->lock);
        p->count--;
        pthread_mutex_unlock(&p->lock);
        if (conn) {
            sbx__agent_close(conn);
            conn = NULL;
            code = SBX_EPROVIDER;
        }
        /*
         * Nobody listening, the stream closed, no hello in time: the agent is
         * gone. A local failure (no descriptor or memory left: the client
         * keeps the errno then) says nothing about the box.
         */
        if (code != SBX_ENOMEM && !(err && sbx_error_errno(err)))
            s->lost = true;
    }
    const char *msg = err ? sbx_error_message(err) : "the box is being stopped";
    while (w) {
        struct sbx_kit_wait *next = w->next;
        w->fn(conn, code, msg, w->arg);
        free(w);
        w = next;
    }
    sbx_error_free(err);
    if (conn)
        trim(p, s);
}

void sbx__kit_agent_use(sbx_kit_slot *s, void *loop, sbx_kit_agent_fn fn, void *arg)
{
    sbx_kit_pool *p = s->pool;
    if (s->closed || sbx__kit_agent_gone(s)) {
        fn(NULL, SBX_EPROVIDER, "the agent is gone", arg);
        return;
    }
    if (s->conn) {
        pthread_mutex_lock(&p->lock);
        unlink_slot(p, s);
        push_front(p, s);
        pthread_mutex_unlock(&p->lock);
        fn(s->conn, SBX_OK, NULL, arg);
        return;
    }
    if (!s->socket) { /* a handed-in stream is never evicted: it closed */
        fn(NULL, SBX_EPROVIDER, "the agent is gone", arg);
        return;
    }
    /* No connection (evicted): queue behind one reconnect, shared by every op meanwhile. */
    struct sbx_kit_wait *w = calloc(1, sizeof(*w));
    if (!w) {
        fn(NULL, SBX_ENOMEM, "out of memory", arg);
        return;
    }
    w->fn = fn;
    w->arg = arg;
    struct sbx_kit_wait **pp = &s->waiters;
    while (*pp)
        pp = &(*pp)->next;
    *pp = w;
    if (s->reconnecting)
        return;
    s->reconnecting = true;
    pthread_mutex_lock(&p->lock);
    p->count++;
    pthread_mutex_unlock(&p->lock);
    /* Make room first, so the count never passes the cap by more than the busy boxes. */
    trim(p, s);
    /*
     * The hello bound is generous: a live agent answers in well under a
     * millisecond. Only the box's own agent is accepted at the other end.
     */
    int rc = s->peer_pid > 0 ? sbx__agent_connect_peer(loop, s->socket, s->peer_pid, true, 10.0,
                                                       on_reconnected, s)
                             : sbx__agent_reconnect(loop, s->socket, 10.0, on_reconnected, s);
    if (rc < 0)
        on_reconnected(NULL, rc,
                       sbx_error_new(rc, "cannot reconnect to the agent at %s", s->socket), s);
}
