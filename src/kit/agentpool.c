/*
 * The box-provider kit's bounded pool of agent connections (agentpool.h).
 *
 * The list is ordered by use, most recent first, and holds the slots that
 * have a connection. `count` also includes reconnects in flight (each holds
 * a socket). The lock is for sbx__kit_agent_drop() from a thread other
 * than the loop's; every other entry point runs on the loop thread.
 */
#include "kit/agentpool.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>

struct sbx_kit_pool {
    pthread_mutex_t lock;
    int max;
    int count;
    sbx_kit_slot *head, *tail;
    /*
     * Descriptors are back-pressure, not errors: a reconnect that would pass
     * the process's descriptor budget (or that the kernel refused with
     * EMFILE while other connections are busy) parks its slot here, in
     * order, until an op ends and frees one (loop thread only).
     */
    sbx_kit_slot *parked_head, *parked_tail;
};

/*
 * Open connections at most, however busy: the soft descriptor limit less a
 * reserve for everything else the process opens (a quarter, at least 64).
 */
static int fd_budget(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (1u << 30))
        return 1 << 30;
    long soft = (long)rl.rlim_cur, reserve = soft / 4 > 64 ? soft / 4 : 64;
    return soft - reserve > 8 ? (int)(soft - reserve) : 8;
}

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
        /* With slots parked for a descriptor, every idle connection makes room. */
        int limit = p->parked_head ? 0 : p->max;
        if (p->count > limit) {
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

static void wake_parked(sbx_kit_pool *p);

void sbx__kit_agent_release(sbx_kit_slot *s)
{
    if (s->pool) {
        trim(s->pool, NULL);
        wake_parked(s->pool);
    }
}

bool sbx__kit_agent_gone(const sbx_kit_slot *s)
{
    return s->lost || (s->conn && !sbx__agent_alive(s->conn));
}

/* --- use and reconnect ------------------------------------------------------ */

static void park(sbx_kit_pool *p, sbx_kit_slot *s)
{
    s->parked_next = NULL;
    if (p->parked_tail)
        p->parked_tail->parked_next = s;
    else
        p->parked_head = s;
    p->parked_tail = s;
}

static void start_reconnect(sbx_kit_slot *s);

/*
 * Starts parked reconnects while the budget has room, oldest first; at most
 * those parked on entry (one refused again parks at the end, for the next op's end).
 */
static void wake_parked(sbx_kit_pool *p)
{
    /* Every op's end passes here: nothing parked, nothing to ask the kernel (no getrlimit). */
    if (!p->parked_head)
        return;
    int budget = fd_budget();
    sbx_kit_slot *last = p->parked_tail;
    while (p->parked_head) {
        pthread_mutex_lock(&p->lock);
        bool room = p->count < budget;
        pthread_mutex_unlock(&p->lock);
        if (!room)
            return;
        sbx_kit_slot *s = p->parked_head;
        p->parked_head = s->parked_next;
        if (!p->parked_head)
            p->parked_tail = NULL;
        s->parked_next = NULL;
        start_reconnect(s);
        if (s == last)
            return;
    }
}

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
        int others = p->count;
        pthread_mutex_unlock(&p->lock);
        int en = err ? sbx_error_errno(err) : 0;
        /*
         * No descriptor left, while other connections are open: one of them
         * frees one when its op ends. Wait for that instead of failing.
         */
        if (!conn && !s->closed && (en == EMFILE || en == ENFILE) && others > 0) {
            s->waiters = w;
            s->reconnecting = true; /* parked: later uses queue behind it */
            park(p, s);
            sbx_error_free(err);
            /* Idle connections go first; each one closed is a descriptor for a parked slot. */
            trim(p, NULL);
            pthread_mutex_lock(&p->lock);
            bool freed = p->count < others;
            pthread_mutex_unlock(&p->lock);
            if (freed)
                wake_parked(p);
            return;
        }
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
    else
        wake_parked(p); /* a failed reconnect holds no descriptor now */
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
    s->loop = loop;
    s->reconnecting = true;
    /* Make room first, so the count never passes the cap by more than the busy boxes. */
    trim(p, s);
    pthread_mutex_lock(&p->lock);
    bool room = p->count < fd_budget();
    pthread_mutex_unlock(&p->lock);
    if (!room || p->parked_head) {
        /* Every descriptor the budget allows is busy: wait for an op to end, in order. */
        park(p, s);
        return;
    }
    start_reconnect(s);
}

static void start_reconnect(sbx_kit_slot *s)
{
    sbx_kit_pool *p = s->pool;
    pthread_mutex_lock(&p->lock);
    p->count++;
    pthread_mutex_unlock(&p->lock);
    /*
     * The hello bound is generous: a live agent answers in well under a
     * millisecond. Only the box's own agent is accepted at the other end.
     */
    int rc = s->peer_pid > 0 ? sbx__agent_connect_peer(s->loop, s->socket, s->peer_pid, true, 10.0,
                                                       on_reconnected, s)
                             : sbx__agent_reconnect(s->loop, s->socket, 10.0, on_reconnected, s);
    if (rc < 0)
        on_reconnected(NULL, rc,
                       sbx_error_new(rc, "cannot reconnect to the agent at %s", s->socket), s);
}
