/*
 * The async core under stress: many sandboxes from many threads, cancel
 * storms, stop and free racing in-flight calls, futures freed early, callbacks
 * that free and chain, contexts torn down and rebuilt, fork, and poll-driven
 * completion. Mostly on the fake provider (its `sleep S` is a cancellable
 * timer); the local provider where real processes matter.
 *
 * Nothing here measures time: each test checks outcomes (every future
 * completes exactly once with an allowed code, nothing leaks: threads, fds,
 * processes, and under ASan memory). Hangs are caught by the harness alarm.
 * Run it under ASan (make check-asan) and TSan (make check-tsan) as well.
 */
#include "common.h"
#include "tap.h"
#include "lib/box.h"

#include "core/internal.h"
#include "fakes/fake.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

/* TSan's options and suppressions, for every test binary: tests/common.c. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SBX_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SBX_ASAN 1
#endif

/* --- helpers ------------------------------------------------------------- */

static int count_entries(const char *path)
{
    int n = count_dir_entries(path);
    if (n < 0)
        TAP_FAIL("opendir %s: %s", path, strerror(errno));
    return n;
}

static int thread_count(void)
{
    return tap_thread_count();
}
/* Minus the directory's own descriptor. */
static int fd_count(void)
{
    return count_entries("/proc/self/fd") - 1;
}

/*
 * A joined thread can stay listed in /proc/self/task for a moment after
 * pthread_join returns (the kernel clears the tid before it unlists the
 * task): wait for the count to come down, then compare exactly. A real leak
 * never comes down and the harness alarm fails the test.
 */
static void expect_threads(int want)
{
    while (thread_count() > want)
        usleep(1000);
    TAP_EQ_INT(thread_count(), want);
}

static sbx_future *exec_async(sbx_sandbox *sb, const char *cmd)
{
    sbx_future *f = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_exec_async(sb, cmd, NULL, &f, &e) != SBX_OK)
        TAP_FAIL("exec_async(%s): %s", cmd, sbx_error_message(e));
    return f;
}

static int wait_code(sbx_future *f)
{
    int rc = sbx_future_wait(f, -1, NULL);
    TAP_EQ_INT(sbx_future_done(f), 1);
    return rc;
}

static size_t count_str(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static unsigned seed_for(const char *test)
{
    unsigned s = (unsigned)getpid() * 2654435761u;
    printf("# %s: seed %u\n", test, s);
    return s;
}

/* A counter a test thread can wait on until callbacks bring it to zero. */
struct countdown {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    long left;
};

#define COUNTDOWN_INIT(n)                                                                          \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, (n)                                   \
    }

static void countdown_hit(struct countdown *c)
{
    pthread_mutex_lock(&c->lock);
    if (--c->left == 0)
        pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static void countdown_wait(struct countdown *c)
{
    pthread_mutex_lock(&c->lock);
    while (c->left > 0)
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

/* --- 1000 sandboxes from several threads -------------------------------- */

enum { BOX_THREADS = 4, BOXES_PER_THREAD = 250 };

struct box_worker {
    sbx_provider *p;
    unsigned seed;
};

static void *box_worker_main(void *arg)
{
    struct box_worker *w = arg;
    enum { N = BOXES_PER_THREAD };
    static _Thread_local sbx_sandbox *sbs[N];
    static _Thread_local sbx_future *start[N], *stop[N], *ex[N];
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_image(spec, "img");
    if (w->seed & 1)
        sbx_spec_add_file(spec, "/etc/motd", "hi", 2); /* a startup upload step */
    for (int i = 0; i < N; i++) {
        TAP_EQ_INT(sbx_sandbox_new(w->p, spec, &sbs[i], NULL), SBX_OK);
        TAP_EQ_INT(sbx_sandbox_start_async(sbs[i], NULL, &start[i], NULL), SBX_OK);
        stop[i] = ex[i] = NULL;
        /* A third are stopped at once, racing their start. */
        if (rand_r(&w->seed) % 3 == 0)
            TAP_EQ_INT(sbx_sandbox_stop_async(sbs[i], &stop[i], NULL), SBX_OK);
    }
    for (int i = 0; i < N; i++) {
        int rc = wait_code(start[i]);
        if (stop[i]) {
            TAP_TRUE(rc == SBX_OK || rc == SBX_ECANCELED);
            continue;
        }
        TAP_EQ_INT(rc, SBX_OK);
        TAP_EQ_INT(sbx_sandbox_exec_async(sbs[i], "exit 7", NULL, &ex[i], NULL), SBX_OK);
        /* Half are stopped while their exec may be in flight, half freed without a stop. */
        if (i % 2)
            TAP_EQ_INT(sbx_sandbox_stop_async(sbs[i], &stop[i], NULL), SBX_OK);
    }
    for (int i = 0; i < N; i++) {
        if (ex[i]) {
            int rc = wait_code(ex[i]);
            /* The stop may have closed the box before the exec reached the loop. */
            if (rc == SBX_OK) {
                sbx_exec_result *r = NULL;
                TAP_EQ_INT(sbx_future_take_exec_result(ex[i], &r, NULL), SBX_OK);
                TAP_EQ_INT(sbx_exec_result_return_code(r), 7);
                sbx_exec_result_free(r);
            } else {
                TAP_TRUE(stop[i] != NULL);
                TAP_EQ_INT(rc, SBX_ESTATE);
            }
        }
        if (stop[i])
            TAP_EQ_INT(wait_code(stop[i]), SBX_OK);
        sbx_future_free(start[i]);
        sbx_future_free(stop[i]);
        sbx_future_free(ex[i]);
        sbx_sandbox_free(sbs[i]);
    }
    sbx_spec_free(spec);
    return NULL;
}

static void test_thousand_sandboxes_from_threads(void)
{
    int threads0 = thread_count(), fds0 = fd_count();
    sbx_fake_log_reset();
    sbx_provider *p = fake_provider(NULL);
    pthread_t t[BOX_THREADS];
    struct box_worker w[BOX_THREADS];
    unsigned seed = seed_for("thousand");
    for (int i = 0; i < BOX_THREADS; i++) {
        w[i] = (struct box_worker){p, seed + (unsigned)i};
        TAP_EQ_INT(pthread_create(&t[i], NULL, box_worker_main, &w[i]), 0);
    }
    for (int i = 0; i < BOX_THREADS; i++)
        pthread_join(t[i], NULL);
    sbx_provider_free(p);
    /* Every box that was created was closed, exactly once; the provider released once. */
    char *log = sbx_fake_log();
    size_t created = count_str(log, "create:"), closed = count_str(log, "close:owned");
    TAP_TRUE(created > 0);
    TAP_EQ_INT(closed, created);
    TAP_EQ_INT(count_str(log, "release;"), 1);
    free(log);
    expect_threads(threads0);
    TAP_EQ_INT(fd_count(), fds0);
}

/* --- cancel storm --------------------------------------------------------- */

enum { STORM_THREADS = 4, STORM_PER_THREAD = 400 };

struct storm_item {
    const char *cmd;
    int mode;
    atomic_int calls; /* then-callback runs: must end at exactly 1 */
    atomic_int code;
    atomic_int rc; /* the exec's return code when it completed OK, else -1 */
};

static struct countdown storm_left;

static void storm_cb(sbx_future *f, void *data)
{
    struct storm_item *it = data;
    int code = sbx_future_code(f, NULL);
    atomic_store(&it->code, code);
    if (code == SBX_OK) {
        sbx_exec_result *r = NULL;
        if (sbx_future_take_exec_result(f, &r, NULL) == SBX_OK) {
            atomic_store(&it->rc, sbx_exec_result_return_code(r));
            sbx_exec_result_free(r);
        }
    }
    atomic_fetch_add(&it->calls, 1);
    countdown_hit(&storm_left);
}

struct storm_worker {
    sbx_sandbox **sbs;
    int n_sbs;
    struct storm_item *items;
    unsigned seed;
};

static const char *const storm_cmds[] = {"sleep 100", "sleep 0.001", "exit 3", "echo x"};

static void *storm_main(void *arg)
{
    struct storm_worker *w = arg;
    for (int i = 0; i < STORM_PER_THREAD; i++) {
        struct storm_item *it = &w->items[i];
        it->cmd = storm_cmds[rand_r(&w->seed) % 4];
        bool forever = !strcmp(it->cmd, "sleep 100");
        /* The modes are the cases of the switch below. */
        it->mode = (int)(rand_r(&w->seed) % 5);
        if (forever && it->mode >= 3)
            it->mode = (int)(rand_r(&w->seed) % 3); /* a sleep 100 must be cancelled */
        atomic_init(&it->calls, 0);
        atomic_init(&it->code, 1);
        atomic_init(&it->rc, -1);
        sbx_sandbox *sb = w->sbs[rand_r(&w->seed) % (unsigned)w->n_sbs];
        sbx_future *f = exec_async(sb, it->cmd);
        int efd = (i % 4 == 0) ? sbx_future_fd(f) : -1;
        /* Half register the callback before cancelling, half after. */
        bool early = rand_r(&w->seed) % 2;
        if (early)
            TAP_EQ_INT(sbx_future_then(f, storm_cb, it), SBX_OK);
        switch (it->mode) {
        case 0: /* before it reaches the loop, most likely */
            sbx_future_cancel(f);
            break;
        case 1: /* at some random point while it runs */
            for (unsigned k = rand_r(&w->seed) % 50; k; k--)
                sched_yield();
            sbx_future_cancel(f);
            sbx_future_cancel(f); /* twice is harmless */
            break;
        case 2: /* cancel, and let go of the future before the op completes */
            sbx_future_cancel(f);
            break;
        case 3: /* after completion: no effect */
            sbx_future_wait(f, -1, NULL);
            sbx_future_cancel(f);
            break;
        default: /* never cancelled */
            break;
        }
        if (!early)
            TAP_EQ_INT(sbx_future_then(f, storm_cb, it), SBX_OK);
        if (efd >= 0 && it->mode != 2) {
            /* The eventfd counts completions: exactly one write. */
            sbx_future_wait(f, -1, NULL);
            uint64_t v = 0;
            TAP_EQ_INT(read(efd, &v, sizeof(v)), sizeof(v));
            TAP_EQ_INT(v, 1);
        }
        if (it->mode == 3)
            TAP_EQ_INT(sbx_future_code(f, NULL), SBX_OK);
        sbx_future_free(f); /* mode 2: before completion, usually */
    }
    return NULL;
}

static void test_cancel_storm(void)
{
    int threads0 = thread_count(), fds0 = fd_count();
    sbx_provider *p = fake_provider(NULL);
    enum { NSB = 4 };
    sbx_sandbox *sbs[NSB];
    for (int i = 0; i < NSB; i++)
        sbs[i] = fake_box(p);
    static struct storm_item items[STORM_THREADS][STORM_PER_THREAD];
    storm_left = (struct countdown)COUNTDOWN_INIT(STORM_THREADS * STORM_PER_THREAD);
    pthread_t t[STORM_THREADS];
    struct storm_worker w[STORM_THREADS];
    unsigned seed = seed_for("storm");
    for (int i = 0; i < STORM_THREADS; i++) {
        w[i] = (struct storm_worker){sbs, NSB, items[i], seed + (unsigned)i};
        TAP_EQ_INT(pthread_create(&t[i], NULL, storm_main, &w[i]), 0);
    }
    for (int i = 0; i < STORM_THREADS; i++)
        pthread_join(t[i], NULL);
    countdown_wait(&storm_left);
    int cancelled = 0, ok = 0;
    for (int i = 0; i < STORM_THREADS; i++) {
        for (int j = 0; j < STORM_PER_THREAD; j++) {
            struct storm_item *it = &items[i][j];
            TAP_EQ_INT(atomic_load(&it->calls), 1);
            int code = atomic_load(&it->code);
            TAP_TRUE(code == SBX_OK || code == SBX_ECANCELED);
            if (!strcmp(it->cmd, "sleep 100"))
                TAP_EQ_INT(code, SBX_ECANCELED);
            if (it->mode >= 3)
                TAP_EQ_INT(code, SBX_OK);
            if (code == SBX_OK && !strcmp(it->cmd, "exit 3"))
                TAP_EQ_INT(atomic_load(&it->rc), 3);
            cancelled += code == SBX_ECANCELED;
            ok += code == SBX_OK;
        }
    }
    printf("# storm: %d completed, %d cancelled\n", ok, cancelled);
    for (int i = 0; i < NSB; i++)
        sbx_sandbox_free(sbs[i]);
    sbx_provider_free(p);
    expect_threads(threads0);
    TAP_EQ_INT(fd_count(), fds0);
}

/* --- stop racing in-flight calls ----------------------------------------- */

struct racer {
    sbx_sandbox *sb;
    const char *local_file;
    sbx_future *f[40];
    int submit_rc[40];
    unsigned seed;
};

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    for (int i = 0; i < 40; i++) {
        r->f[i] = NULL;
        switch (i % 4) {
        case 0:
            r->submit_rc[i] = sbx_sandbox_exec_async(r->sb, "exit 0", NULL, &r->f[i], NULL);
            break;
        case 1:
            r->submit_rc[i] = sbx_sandbox_exec_async(r->sb, "sleep 0.001", NULL, &r->f[i], NULL);
            break;
        case 2:
            r->submit_rc[i] = sbx_sandbox_upload_async(r->sb, r->local_file, "/up", &r->f[i], NULL);
            break;
        default:
            r->submit_rc[i] = sbx_sandbox_status_async(r->sb, &r->f[i], NULL);
            break;
        }
        if (rand_r(&r->seed) % 8 == 0)
            sched_yield();
    }
    return NULL;
}

static void test_stop_races_inflight_calls(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/payload", tap_tmpdir());
    TAP_EQ_INT(write_text(path, "payload"), 0);
    sbx_provider *p = fake_provider(NULL);
    unsigned seed = seed_for("stop-race");
    for (int round = 0; round < 40; round++) {
        sbx_sandbox *sb = fake_box(p);
        sbx_fake_log_reset();
        enum { R = 3 };
        struct racer r[R];
        pthread_t t[R];
        for (int i = 0; i < R; i++) {
            r[i] = (struct racer){
                .sb = sb, .local_file = path, .seed = seed + (unsigned)(round * R + i)};
            TAP_EQ_INT(pthread_create(&t[i], NULL, racer_main, &r[i]), 0);
        }
        for (unsigned k = rand_r(&seed) % 200; k; k--)
            sched_yield();
        sbx_future *stop = NULL, *stop2 = NULL;
        TAP_EQ_INT(sbx_sandbox_stop_async(sb, &stop, NULL), SBX_OK);
        TAP_EQ_INT(sbx_sandbox_stop_async(sb, &stop2, NULL), SBX_OK); /* idempotent */
        for (int i = 0; i < R; i++)
            pthread_join(t[i], NULL);
        TAP_EQ_INT(wait_code(stop), SBX_OK);
        TAP_EQ_INT(wait_code(stop2), SBX_OK);
        for (int i = 0; i < R; i++) {
            for (int j = 0; j < 40; j++) {
                if (j % 4 == 3) {
                    /* status never fails: RUNNING before the stop, STOPPED after. */
                    TAP_EQ_INT(r[i].submit_rc[j], SBX_OK);
                    TAP_EQ_INT(wait_code(r[i].f[j]), SBX_OK);
                    sbx_status st;
                    TAP_EQ_INT(sbx_future_take_status(r[i].f[j], &st, NULL), SBX_OK);
                    TAP_TRUE(st == SBX_STATUS_RUNNING || st == SBX_STATUS_STOPPED);
                } else if (r[i].submit_rc[j] == SBX_OK) {
                    int rc = wait_code(r[i].f[j]);
                    TAP_TRUE(rc == SBX_OK || rc == SBX_ESTATE);
                } else {
                    TAP_EQ_INT(r[i].submit_rc[j], SBX_ESTATE);
                    TAP_NULL(r[i].f[j]);
                }
                sbx_future_free(r[i].f[j]);
            }
        }
        /* Closed once, and the provider saw no call on the box after it closed it. */
        char *log = sbx_fake_log();
        TAP_EQ_INT(count_str(log, "close:owned"), 1);
        const char *after = strstr(log, "close:owned");
        TAP_TRUE(!strstr(after, "exec:") && !strstr(after, "upload:") && !strstr(after, "status"));
        free(log);
        sbx_future_free(stop);
        sbx_future_free(stop2);
        sbx_sandbox_free(sb);
    }
    sbx_provider_free(p);
}

/* --- free while calls are in flight -------------------------------------- */

static void test_free_sandbox_with_inflight_calls(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/payload", tap_tmpdir());
    TAP_EQ_INT(write_text(path, "payload"), 0);
    sbx_fake_log_reset();
    sbx_provider *p = fake_provider(NULL);
    for (int round = 0; round < 20; round++) {
        sbx_sandbox *sb = fake_box(p);
        enum { N = 60 };
        sbx_future *f[N];
        for (int i = 0; i < N; i++) {
            if (i % 3 == 2)
                TAP_EQ_INT(sbx_sandbox_upload_async(sb, path, "/p", &f[i], NULL), SBX_OK);
            else
                f[i] = exec_async(sb, i % 3 ? "sleep 0.001" : "sleep 100");
        }
        sbx_sandbox_free(sb); /* stops the box; the calls hold what they use */
        for (int i = 0; i < N; i += 3)
            sbx_future_cancel(f[i]);
        for (int i = 0; i < N; i++) {
            /* Submitted before the stop, so they reached the provider before its close. */
            TAP_EQ_INT(wait_code(f[i]), (i % 3 ? SBX_OK : SBX_ECANCELED));
            sbx_future_free(f[i]);
        }
    }
    sbx_provider_free(p);
    char *log = sbx_fake_log();
    TAP_EQ_INT(count_str(log, "close:owned"), 20);
    free(log);
}

/* --- futures freed early, callbacks that free and chain ------------------ */

static struct countdown early_left;
static atomic_int early_calls;

static void early_cb(sbx_future *f, void *data)
{
    (void)data;
    /* Runs after the caller let go: the future is still valid here. */
    TAP_EQ_INT(sbx_future_done(f), 1);
    int code = sbx_future_code(f, NULL);
    TAP_TRUE(code == SBX_OK || code == SBX_ECANCELED);
    atomic_fetch_add(&early_calls, 1);
    countdown_hit(&early_left);
}

static void test_future_freed_before_completion(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_sandbox *sb = fake_box(p);
    enum { N = 600 };
    early_left = (struct countdown)COUNTDOWN_INIT(N);
    atomic_store(&early_calls, 0);
    for (int i = 0; i < N; i++) {
        sbx_future *f = exec_async(sb, i % 2 ? "sleep 0.002" : "exit 1");
        TAP_EQ_INT(sbx_future_then(f, early_cb, NULL), SBX_OK);
        if (i % 5 == 0)
            sbx_future_cancel(f);
        sbx_future_free(f);
    }
    /* Dropped without a callback: these complete into the void. */
    for (int i = 0; i < 200; i++)
        sbx_future_free(exec_async(sb, "exit 2"));
    countdown_wait(&early_left);
    /* The loop runs in order: this exec completes after the dropped ones did. */
    sbx_future *last = exec_async(sb, "exit 0");
    TAP_EQ_INT(wait_code(last), SBX_OK);
    sbx_future_free(last);
    TAP_EQ_INT(atomic_load(&early_calls), N);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

struct chain {
    sbx_sandbox *sb;
    int left;
    int refused; /* blocking calls refused on the loop, as they must be */
    struct countdown done;
};

static void chain_cb(sbx_future *f, void *data)
{
    struct chain *c = data;
    TAP_EQ_INT(sbx_future_code(f, NULL), SBX_OK);
    /* Free the future from inside its own callback. */
    sbx_future_free(f);
    if (c->left % 50 == 0) {
        /* Blocking calls on the loop thread are refused with SBX_ESTATE. */
        sbx_exec_result *r = NULL;
        sbx_error *e = NULL;
        if (sbx_sandbox_exec(c->sb, "x", NULL, &r, &e) == SBX_ESTATE)
            c->refused++;
        sbx_error_free(e);
        e = NULL;
        if (sbx_sandbox_stop(c->sb, &e) == SBX_ESTATE)
            c->refused++;
        sbx_error_free(e);
        e = NULL;
        sbx_future *pending = exec_async(c->sb, "sleep 100");
        if (sbx_future_wait(pending, -1, &e) == SBX_ESTATE)
            c->refused++;
        TAP_CONTAINS(sbx_error_message(e), "sbx_future_then");
        sbx_error_free(e);
        sbx_future_cancel(pending);
        sbx_future_free(pending);
    }
    if (--c->left == 0) {
        countdown_hit(&c->done);
        return;
    }
    /* Start the next step from inside the callback. */
    sbx_future *next = exec_async(c->sb, c->left % 2 ? "exit 0" : "sleep 0.001");
    TAP_EQ_INT(sbx_future_then(next, chain_cb, c), SBX_OK);
}

static void test_callbacks_free_and_chain(void)
{
    sbx_provider *p = fake_provider(NULL);
    enum { CHAINS = 8, STEPS = 200 };
    struct chain c[CHAINS];
    for (int i = 0; i < CHAINS; i++) {
        c[i] = (struct chain){.sb = fake_box(p), .left = STEPS, .done = COUNTDOWN_INIT(1)};
        sbx_future *f = exec_async(c[i].sb, "exit 0");
        TAP_EQ_INT(sbx_future_then(f, chain_cb, &c[i]), SBX_OK);
    }
    for (int i = 0; i < CHAINS; i++) {
        countdown_wait(&c[i].done);
        TAP_EQ_INT(c[i].refused, 3 * (STEPS / 50));
        sbx_sandbox_free(c[i].sb);
    }
    sbx_provider_free(p);
}

/* --- provider freed while its sandboxes live ----------------------------- */

struct exec_loop {
    sbx_sandbox *sb;
    int n;
};

static void *exec_loop_main(void *arg)
{
    struct exec_loop *l = arg;
    for (int i = 0; i < l->n; i++) {
        sbx_exec_result *r = NULL;
        TAP_EQ_INT(sbx_sandbox_exec(l->sb, "exit 4", NULL, &r, NULL), SBX_OK);
        TAP_EQ_INT(sbx_exec_result_return_code(r), 4);
        sbx_exec_result_free(r);
    }
    return NULL;
}

static void test_provider_free_with_live_sandboxes(void)
{
    int threads0 = thread_count(), fds0 = fd_count();
    for (int round = 0; round < 30; round++) {
        sbx_fake_log_reset();
        sbx_provider *p = fake_provider(NULL);
        enum { N = 6 };
        sbx_sandbox *sbs[N];
        pthread_t t[N];
        struct exec_loop l[N];
        for (int i = 0; i < N; i++) {
            sbs[i] = fake_box(p);
            l[i] = (struct exec_loop){sbs[i], 20};
            TAP_EQ_INT(pthread_create(&t[i], NULL, exec_loop_main, &l[i]), 0);
        }
        sbx_provider_free(p); /* while the threads run execs on its sandboxes */
        for (int i = 0; i < N; i++)
            pthread_join(t[i], NULL);
        char *log = sbx_fake_log();
        TAP_EQ_INT(count_str(log, "release;"), 0);
        free(log);
        for (int i = 0; i < N; i++) {
            sbx_sandbox_free(sbs[i]);
            log = sbx_fake_log();
            /* Released exactly once, by the last sandbox's free, before it returns. */
            TAP_EQ_INT(count_str(log, "release;"), (i == N - 1 ? 1 : 0));
            free(log);
        }
        /* No loop thread or descriptor outlives the last free. */
        expect_threads(threads0);
        TAP_EQ_INT(fd_count(), fds0);
    }
}

/* --- contexts -------------------------------------------------------------- */

struct cross {
    sbx_sandbox *other; /* in another context */
    struct countdown done;
    int code;
};

static void cross_inner_cb(sbx_future *f, void *data)
{
    struct cross *x = data;
    x->code = sbx_future_code(f, NULL);
    sbx_future_free(f);
    countdown_hit(&x->done);
}

static void cross_cb(sbx_future *f, void *data)
{
    struct cross *x = data;
    sbx_future_free(f);
    /* From one context's loop, start work in another context. */
    sbx_future *g = exec_async(x->other, "exit 0");
    TAP_EQ_INT(sbx_future_then(g, cross_inner_cb, x), SBX_OK);
}

static void test_explicit_contexts(void)
{
    int threads0 = thread_count(), fds0 = fd_count();
    for (int round = 0; round < 10; round++) {
        enum { C = 4 };
        sbx_context *ctx[C];
        sbx_provider *p[C];
        sbx_sandbox *sb[C];
        for (int i = 0; i < C; i++) {
            TAP_OK(sbx_context_new(&ctx[i], &e_));
            TAP_OK(sbx_provider_new_in(ctx[i], "{\"fake\": {}}", &p[i], &e_));
            sb[i] = fake_box(p[i]);
        }
        /* One loop thread per context. */
        TAP_EQ_INT(thread_count(), threads0 + C);
        struct cross x[C];
        for (int i = 0; i < C; i++) {
            x[i] = (struct cross){.other = sb[(i + 1) % C], .done = COUNTDOWN_INIT(1), .code = 1};
            sbx_future *f = exec_async(sb[i], "sleep 0.001");
            TAP_EQ_INT(sbx_future_then(f, cross_cb, &x[i]), SBX_OK);
        }
        for (int i = 0; i < C; i++) {
            countdown_wait(&x[i].done);
            TAP_EQ_INT(x[i].code, SBX_OK);
        }
        /* Teardown in every order: the context first (its users keep it), or last. */
        for (int i = 0; i < C; i++) {
            if ((i + round) % 2)
                sbx_context_free(ctx[i]);
            sbx_sandbox_free(sb[i]);
            sbx_provider_free(p[i]);
            if (!((i + round) % 2))
                sbx_context_free(ctx[i]);
        }
        expect_threads(threads0);
        TAP_EQ_INT(fd_count(), fds0);
    }
}

static void *churn_once(void *arg)
{
    (void)arg;
    sbx_provider *a = fake_provider(NULL);
    sbx_provider *b = fake_provider("{\"fake_basic\": null}");
    sbx_sandbox *sb = fake_box(a);
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "exit 9", NULL, &r, NULL), SBX_OK);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 9);
    sbx_exec_result_free(r);
    sbx_future *f = exec_async(sb, "sleep 100");
    sbx_future_cancel(f);
    TAP_EQ_INT(wait_code(f), SBX_ECANCELED);
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    sbx_provider_free(a);
    sbx_provider_free(b);
    return NULL;
}

static void test_default_context_churn(void)
{
    int threads0 = thread_count(), fds0 = fd_count();
    for (int i = 0; i < 200; i++) {
        if (i % 10 == 0) {
            /* Two providers share the one default context: one loop thread. */
            sbx_provider *a = fake_provider(NULL), *b = fake_provider(NULL);
            TAP_EQ_INT(thread_count(), threads0 + 1);
            sbx_provider_free(a);
            sbx_provider_free(b);
        }
        if (i % 3 == 0) {
            /* From a short-lived thread of its own. */
            pthread_t t;
            TAP_EQ_INT(pthread_create(&t, NULL, churn_once, NULL), 0);
            pthread_join(t, NULL);
        } else {
            churn_once(NULL);
        }
        expect_threads(threads0);
        TAP_EQ_INT(fd_count(), fds0);
    }
}

/* --- fork ------------------------------------------------------------------ */

static atomic_bool streaming;

static void *stream_main(void *arg)
{
    sbx_sandbox *sb = arg;
    while (atomic_load(&streaming)) {
        sbx_exec_result *r = NULL;
        TAP_EQ_INT(sbx_sandbox_exec(sb, "echo", NULL, &r, NULL), SBX_OK);
        sbx_exec_result_free(r);
    }
    return NULL;
}

/* In the child: a provider of its own on a fresh default context. */
static int child_work(void)
{
    sbx_provider *p = NULL;
    if (sbx_provider_new("{\"fake\": {}}", &p, NULL) != SBX_OK)
        return 2;
    sbx_sandbox *sb = fake_box(p);
    sbx_exec_result *r = NULL;
    if (sbx_sandbox_exec(sb, "exit 5", NULL, &r, NULL) != SBX_OK ||
        sbx_exec_result_return_code(r) != 5)
        return 3;
    sbx_exec_result_free(r);
    sbx_future *f = exec_async(sb, "sleep 100");
    sbx_future_cancel(f);
    if (sbx_future_wait(f, -1, NULL) != SBX_ECANCELED)
        return 4;
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    return 0;
}

/*
 * ASan's allocator (gcc 12) is not fork-safe: a child forked while another
 * thread holds its lock deadlocks on its first malloc. Under ASan the fork
 * test therefore forks only once every other thread is idle in epoll_wait
 * (the loop between events, holding nothing); glibc's malloc needs no such care.
 * Under valgrind (SBX_VALGRIND) the same: blocks a busy thread held only on its
 * stack at the fork are reported lost in the child, which is fork, not sbx.
 */
static bool quiet_fork(void)
{
#ifdef SBX_ASAN
    return true;
#else
    return getenv("SBX_VALGRIND") != NULL;
#endif
}

static void wait_others_idle(void)
{
    char self[32];
    snprintf(self, sizeof(self), "%ld", (long)gettid());
    for (;;) {
        bool idle = true;
        DIR *d = opendir("/proc/self/task");
        TAP_TRUE(d != NULL);
        struct dirent *de;
        while (idle && (de = readdir(d))) {
            if (de->d_name[0] == '.' || !strcmp(de->d_name, self))
                continue;
            char path[300], wchan[64] = "";
            snprintf(path, sizeof(path), "/proc/self/task/%s/wchan", de->d_name);
            FILE *f = fopen(path, "re");
            if (f) {
                size_t n = fread(wchan, 1, sizeof(wchan) - 1, f);
                wchan[n] = 0;
                fclose(f);
            }
            idle = strstr(wchan, "epoll") != NULL;
        }
        closedir(d);
        if (idle)
            return;
        usleep(1000);
    }
}

static void test_fork_while_running(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_sandbox *sb = fake_box(p);
    enum { SLEEPERS = 30 };
    sbx_future *sleeping[SLEEPERS];
    for (int i = 0; i < SLEEPERS; i++)
        sleeping[i] = exec_async(sb, "sleep 100");
    /* Threads keeping the loop busy while we fork (none where the fork must be quiet). */
    const int STREAMS = quiet_fork() ? 0 : 2;
    atomic_store(&streaming, true);
    pthread_t t[2];
    for (int i = 0; i < STREAMS; i++)
        TAP_EQ_INT(pthread_create(&t[i], NULL, stream_main, sb), 0);
    for (int i = 0; i < 30; i++) {
        if (quiet_fork())
            wait_others_idle();
        fflush(stdout);
        pid_t pid = fork();
        TAP_TRUE(pid >= 0);
        if (pid == 0)
            _exit(child_work());
        int st = 0;
        TAP_EQ_INT(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            TAP_FAIL("child %d: status 0x%x", i, st);
    }
    atomic_store(&streaming, false);
    for (int i = 0; i < STREAMS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < SLEEPERS; i++) {
        sbx_future_cancel(sleeping[i]);
        TAP_EQ_INT(wait_code(sleeping[i]), SBX_ECANCELED);
        sbx_future_free(sleeping[i]);
    }
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* --- poll-driven completion ------------------------------------------------ */

static void test_future_fd_epoll(void)
{
    sbx_provider *p = fake_provider(NULL);
    enum { NSB = 5, N = 500 };
    sbx_sandbox *sbs[NSB];
    for (int i = 0; i < NSB; i++)
        sbs[i] = fake_box(p);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    TAP_TRUE(ep >= 0);
    static sbx_future *f[N];
    static bool seen[N];
    unsigned seed = seed_for("epoll");
    for (int i = 0; i < N; i++) {
        char cmd[32];
        if (i % 4 == 0)
            snprintf(cmd, sizeof(cmd), "exit %d", i % 100);
        else
            snprintf(cmd, sizeof(cmd), "sleep 0.0%02u", rand_r(&seed) % 50);
        f[i] = exec_async(sbs[i % NSB], cmd);
        seen[i] = false;
        if (i % 10 == 0)
            sbx_future_wait(f[i], -1, NULL); /* the fd is made after completion */
        int fd = sbx_future_fd(f[i]);
        TAP_TRUE(fd >= 0);
        TAP_EQ_INT(sbx_future_fd(f[i]), fd); /* one fd per future */
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        TAP_EQ_INT(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
    }
    int left = N, checks = 0;
    while (left > 0) {
        struct epoll_event evs[64];
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0 && errno == EINTR)
            continue;
        TAP_TRUE(n > 0);
        for (int k = 0; k < n; k++) {
            int i = (int)evs[k].data.u32;
            TAP_TRUE(!seen[i]);
            seen[i] = true;
            /* Readable means done, with exactly one completion. */
            TAP_EQ_INT(sbx_future_done(f[i]), 1);
            uint64_t v = 0;
            TAP_EQ_INT(read(sbx_future_fd(f[i]), &v, sizeof(v)), sizeof(v));
            TAP_EQ_INT(v, 1);
            TAP_EQ_INT(epoll_ctl(ep, EPOLL_CTL_DEL, sbx_future_fd(f[i]), NULL), 0);
            sbx_exec_result *r = NULL;
            TAP_EQ_INT(sbx_future_take_exec_result(f[i], &r, NULL), SBX_OK);
            TAP_EQ_INT(sbx_exec_result_return_code(r), i % 4 == 0 ? i % 100 : 0);
            sbx_exec_result_free(r);
            left--;
        }
        /* Done means readable: check a pending one (done first, then the fd). */
        for (int i = 0; i < N && checks < 2000; i += 7) {
            if (seen[i])
                continue;
            checks++;
            bool done = sbx_future_done(f[i]);
            struct pollfd pfd = {sbx_future_fd(f[i]), POLLIN, 0};
            TAP_TRUE(poll(&pfd, 1, 0) >= 0);
            if (done)
                TAP_TRUE(pfd.revents & POLLIN);
        }
    }
    close(ep);
    for (int i = 0; i < N; i++)
        sbx_future_free(f[i]);
    for (int i = 0; i < NSB; i++)
        sbx_sandbox_free(sbs[i]);
    sbx_provider_free(p);
}

/* --- the local provider: real processes ---------------------------------- */

static sbx_provider *local_provider(void)
{
    char cfg[600];
    snprintf(cfg, sizeof(cfg), "{\"local\": {\"workspace_root\": \"%s\", \"concurrency\": 64}}",
             tap_tmpdir());
    return provider_of(cfg);
}

/* Processes whose parent is this one (execs not yet reaped). */
static int child_processes(void)
{
    DIR *d = opendir("/proc");
    TAP_TRUE(d != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = 0;
        /* pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'. */
        const char *rp = strrchr(buf, ')');
        char state;
        int ppid;
        /* Not a sanitizer's symbolizer, which it starts to print a report. */
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == getpid() &&
            !strstr(buf, "symboliz"))
            n++;
    }
    closedir(d);
    return n;
}

static void test_local_cancel_and_free_inflight(void)
{
    sbx_provider *p = local_provider();
    unsigned seed = seed_for("local");
    for (int round = 0; round < 4; round++) {
        sbx_sandbox *sb = fake_box(p);
        enum { N = 48 };
        sbx_future *f[N];
        bool forever[N];
        for (int i = 0; i < N; i++) {
            forever[i] = i % 3 == 0;
            f[i] = exec_async(sb, forever[i] ? "sleep 100" : (i % 3 == 1 ? "exit 3" : "echo hi"));
            unsigned mode = rand_r(&seed) % 3;
            if (mode == 0 || (forever[i] && round % 2 == 0))
                sbx_future_cancel(f[i]);
            else if (mode == 1) {
                for (unsigned k = rand_r(&seed) % 100; k; k--)
                    sched_yield();
                sbx_future_cancel(f[i]);
            }
        }
        /* Odd rounds: the uncancelled sleeps die with the box when it is freed. */
        sbx_sandbox_free(sb);
        for (int i = 0; i < N; i++) {
            int rc = wait_code(f[i]);
            TAP_TRUE(rc == SBX_OK || rc == SBX_ECANCELED);
            if (rc == SBX_OK) {
                sbx_exec_result *r = NULL;
                TAP_EQ_INT(sbx_future_take_exec_result(f[i], &r, NULL), SBX_OK);
                /* Killed by the box's close, or ran to its end. */
                const char *type = sbx_exec_result_error_type(r);
                if (forever[i] || type)
                    TAP_EQ_STR(type, "sandbox");
                else if (i % 3 == 1)
                    TAP_EQ_INT(sbx_exec_result_return_code(r), 3);
                else
                    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
                sbx_exec_result_free(r);
            }
            sbx_future_free(f[i]);
        }
        /* Every process was killed and reaped before its future completed. */
        TAP_EQ_INT(child_processes(), 0);
    }
    sbx_provider_free(p);
}

TAP_MAIN(TAP_T(test_thousand_sandboxes_from_threads, 240), TAP_T(test_cancel_storm, 240),
         TAP_T(test_stop_races_inflight_calls, 240),
         TAP_T(test_free_sandbox_with_inflight_calls, 120),
         TAP_T(test_future_freed_before_completion, 120), TAP_T(test_callbacks_free_and_chain, 120),
         TAP_T(test_provider_free_with_live_sandboxes, 120), TAP_T(test_explicit_contexts, 120),
         TAP_T(test_default_context_churn, 240), TAP_T(test_fork_while_running, 120),
         TAP_T(test_future_fd_epoll, 120), TAP_T(test_local_cancel_and_free_inflight, 120))
