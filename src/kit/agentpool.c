/*
 * The linux provider's bounded pool of agent connections (agentpool.h).
 *
 * The list is ordered by use, most recent first, and holds the slots that
 * have a connection. `count` also includes reconnects in flight (each holds
 * a socket). The lock is for sbx__linux_agent_drop() from a thread other
 * than the loop's; every other entry point runs on the loop thread.
 */
#include "kit/agentpool.h"

#include <stdlib.h>

struct linux_agent_pool {
    pthread_mutex_t lock;
    int max;
    int count;
    linux_agent_slot *head, *tail;
};

struct linux_agent_wait {
    struct linux_agent_wait *next;
    linux_agent_fn fn;
    void *arg;
};

linux_agent_pool *sbx__linux_agent_pool_new(int max)
{
    linux_agent_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->max = max > 0 ? max : 1;
    return p;
}

void sbx__linux_agent_pool_free(linux_agent_pool *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->lock);
    free(p);
}

int sbx__linux_agent_pool_count(linux_agent_pool *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->count;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void sbx__linux_agent_init(linux_agent_slot *s, linux_agent_pool *p, const char *socket)
{
    s->pool = p;
    s->socket = socket;
}

/* --- the list (callers hold the lock) ------------------------------------- */

static void unlink_slot(linux_agent_pool *p, linux_agent_slot *s)
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

static void push_front(linux_agent_pool *p, linux_agent_slot *s)
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
static void trim(linux_agent_pool *p, linux_agent_slot *keep)
{
    for (;;) {
        pthread_mutex_lock(&p->lock);
        linux_agent_slot *victim = NULL;
        if (p->count > p->max) {
            for (linux_agent_slot *s = p->tail; s; s = s->prev) {
                if (s != keep && (!sbx__agent_alive(s->conn) || sbx__agent_idle(s->conn))) {
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

void sbx__linux_agent_put(linux_agent_slot *s, sbx_agent_conn *conn)
{
    linux_agent_pool *p = s->pool;
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
static void detach(linux_agent_slot *s, bool closed)
{
    linux_agent_pool *p = s->pool;
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

void sbx__linux_agent_drop(linux_agent_slot *s) { detach(s, true); }

void sbx__linux_agent_lost(linux_agent_slot *s) { detach(s, false); }

void sbx__linux_agent_release(linux_agent_slot *s)
{
    if (s->pool)
        trim(s->pool, NULL);
}

bool sbx__linux_agent_gone(const linux_agent_slot *s)
{
    return s->lost || (s->conn && !sbx__agent_alive(s->conn));
}

/* --- use and reconnect ------------------------------------------------------ */

static void on_reconnected(sbx_agent_conn *conn, int code, sbx_error *err, void *data)
{
    linux_agent_slot *s = data;
    linux_agent_pool *p = s->pool;
    struct linux_agent_wait *w = s->waiters;
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
        struct linux_agent_wait *next = w->next;
        w->fn(conn, code, msg, w->arg);
        free(w);
        w = next;
    }
    sbx_error_free(err);
    if (conn)
        trim(p, s);
}

void sbx__linux_agent_use(linux_agent_slot *s, void *loop, linux_agent_fn fn, void *arg)
{
    linux_agent_pool *p = s->pool;
    if (s->closed || sbx__linux_agent_gone(s)) {
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
    /* No connection (evicted): queue behind one reconnect, shared by every op meanwhile. */
    struct linux_agent_wait *w = calloc(1, sizeof(*w));
    if (!w) {
        fn(NULL, SBX_ENOMEM, "out of memory", arg);
        return;
    }
    w->fn = fn;
    w->arg = arg;
    struct linux_agent_wait **pp = &s->waiters;
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
    int rc = sbx__agent_connect_peer(loop, s->socket, s->peer_pid, true, 10.0, on_reconnected, s);
    if (rc < 0)
        on_reconnected(NULL, rc,
                       sbx_error_new(rc, "cannot reconnect to the agent at %s", s->socket), s);
}
