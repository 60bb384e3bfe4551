/*
 * The `local` provider: commands run as plain host processes in a per-sandbox
 * work directory. There is NO isolation: a command sees and can change
 * everything the calling user can. For development and trusted code only
 * (the reference's LocalProvider says the same). See docs/providers/local.md.
 *
 * Config (all optional):
 *   workspace_root     where allocated workspaces go (default $TMPDIR or /tmp)
 *   shell              "/bin/bash"; commands run as `shell -c COMMAND`
 *   default_timeout_s  180; used when an exec passes no timeout (null: none)
 *   concurrency        8; execs running at once per provider, the rest queue FIFO
 *   max_output_bytes   16 MiB; bytes kept per stream unless the exec sets a cap
 *   state_dir          where box records go (sbx__local_state_dir: $SBX_STATE_DIR/local,
 *                      /run/sbx/local for root, ...), so list, stop by id and gc see
 *                      boxes other processes made (local_boxes.c)
 *
 * Everything runs on the loop thread: uv_spawn with UV_PROCESS_DETACHED
 * (setsid, so each exec is its own process group), pipes for the standard
 * streams, and one timer for the timeout and then the reap bound. File work
 * (create, transfer, status, removal) goes to the worker pool.
 */
#include "core/internal.h"
#include "providers/local.h"
#include "kit/kit.h"
#include "providers/local_agent.h"

#include <sbx/schema.h>

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>

#include <uv.h>

extern char **environ;

/* A sandbox-runtime failure, not the command's exit code (the reference's value). */
#define LOCAL_RUNTIME_RC 125
/* How long a killed command may take to exit and close its pipes before we give up. */
#define REAP_TIMEOUT_S 5.0
#define READ_CHUNK ((size_t)64 << 10)

struct lexec;

struct local_state {
    char *workspace_root; /* NULL: $TMPDIR or /tmp */
    char *shell;
    double default_timeout_s; /* < 0: none */
    int concurrency;
    size_t max_output;
    char *state_dir; /* box records (never NULL once made) */
    /*
     * The state directory checked (sbx__local_state_open) by the first create
     * or connect, then used as is: the checks walk every component and name
     * its owner, too dear to repeat per box. Under `lock` (worker threads).
     */
    pthread_mutex_t lock;
    char *state_canon;
    /* Loop thread only: */
    int running;
    struct lexec *qhead, *qtail;
};

struct local_box {
    char *id;
    char *workspace;     /* absolute */
    char *workdir_arg;   /* spec.workdir as given: an exec cwd equal to it means the workspace */
    bool owned_ws;       /* we allocated the workspace, so closing removes it */
    char *scope;         /* a connected handle's scope ("owner", "operate", ...) or NULL */
    sbx_kv env;          /* spec.env */
    struct lexec *execs; /* running execs (loop thread only) */
    sbx_op *closing;     /* a close waiting for its killed execs to be reaped */
    bool closing_remove; /* ...and then removing the workspace */
    char *state_dir;     /* where its record is (local_boxes.c) */
    bool closing_forget; /* ...and its record: the box ends */
};

/* --- config -------------------------------------------------------------- */

/*
 * The config as the remote kit's schema (include/sbx/schema.h) fills it;
 * local_init moves it into local_state. The table keeps the words, codes
 * and order of checks the hand-written parser had, so no message changed:
 * each field's `what` and `code` are those messages' words and codes.
 */
struct local_config {
    char *workspace_root;
    char *shell;
    double default_timeout_s; /* SBX_SCHEMA_NONE (< 0): none */
    int64_t concurrency;
    int64_t max_output_bytes;
    char *state_dir;
};

#define LOCAL_STR(x) #x
#define LOCAL_JSON(x) LOCAL_STR(x)
/* The table's JSON defaults spell out the core's: they must stay equal. */
_Static_assert(SBX_DEFAULT_OUTPUT_LIMIT == 16777216, "max_output_bytes' default_json below");

static const sbx_schema_field config_fields[] = {
    {.key = "workspace_root",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct local_config, workspace_root),
     .flags = SBX_SCHEMA_NULLABLE | SBX_SCHEMA_NONEMPTY,
     .what = "a non-empty path string",
     .code = SBX_ETYPE,
     .help = "Where allocated workspaces go (null: $TMPDIR, else /tmp)."},
    {.key = "shell",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct local_config, shell),
     .flags = SBX_SCHEMA_NULLABLE | SBX_SCHEMA_NONEMPTY,
     .default_json = "\"/bin/bash\"",
     .what = "a non-empty path string, like \"/bin/sh\"",
     .code = SBX_ETYPE,
     .help = "Commands run as `shell -c COMMAND`."},
    {.key = "default_timeout_s",
     .type = SBX_SCHEMA_DURATION,
     .offset = offsetof(struct local_config, default_timeout_s),
     .default_json = LOCAL_JSON(SBX_DEFAULT_EXEC_TIMEOUT_S),
     .what = "a number of seconds >= 0, or null for no timeout",
     .code = SBX_ETYPE,
     .help = "The timeout of an exec that passes none (null: none)."},
    {.key = "concurrency",
     .type = SBX_SCHEMA_INT,
     .offset = offsetof(struct local_config, concurrency),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
     .int_min = 1,
     .int_max = 1000000,
     .default_json = "8",
     .what = "a positive integer (execs running at once)",
     .code = SBX_EINVAL,
     .help = "Execs running at once per provider; the rest queue in order."},
    {.key = "max_output_bytes",
     .type = SBX_SCHEMA_INT,
     .offset = offsetof(struct local_config, max_output_bytes),
     .flags = SBX_SCHEMA_HAS_MIN,
     .int_min = 1,
     .default_json = "16777216",
     .what = "a positive integer (bytes kept per stream)",
     .code = SBX_EINVAL,
     .help = "Bytes kept per stream unless the exec sets a cap."},
    {.key = "state_dir",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct local_config, state_dir),
     .flags = SBX_SCHEMA_NULLABLE | SBX_SCHEMA_ABSOLUTE_PATH,
     .what = "an absolute path (where box records go), or null for the default",
     .code = SBX_ETYPE,
     .help = "Where box records go (null: $SBX_STATE_DIR/local, /run/sbx/local for root, ...)."},
    {.key = NULL},
};

static const sbx_schema config_schema = {
    SBX_SCHEMA_HEADER,
    .name = "local provider config",
    .fields = config_fields,
    .config_size = sizeof(struct local_config),
    /* The known keys in table order, as local has always listed them (not sorted). */
    .unknown_message = "{name}: unknown key '{key}'; known keys: workspace_root, shell, "
                       "default_timeout_s, concurrency, max_output_bytes, state_dir",
};

static void state_free(struct local_state *st)
{
    if (!st)
        return;
    free(st->workspace_root);
    free(st->shell);
    free(st->state_dir);
    free(st->state_canon);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* The core hands init a mapping (it refuses anything else first), so the schema sees one. */
static int local_init(const char *config_json, void **state, sbx_error **err)
{
    struct local_config cfg;
    int rc = sbx_schema_parse(&config_schema, config_json, &cfg, err);
    if (rc < 0)
        return rc;
    struct local_state *st = calloc(1, sizeof(*st));
    if (!st) {
        sbx_schema_free(&config_schema, &cfg);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    st->workspace_root = steal_pointer(&cfg.workspace_root);
    st->shell = steal_pointer(&cfg.shell);
    st->default_timeout_s = cfg.default_timeout_s;
    st->concurrency = (int)cfg.concurrency;
    st->max_output = (size_t)cfg.max_output_bytes;
    st->state_dir = sbx__local_state_dir(cfg.state_dir);
    pthread_mutex_init(&st->lock, NULL);
    sbx_schema_free(&config_schema, &cfg);
    if (!st->state_dir) {
        state_free(st);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    *state = st;
    return SBX_OK;
}

static void local_release(void *state)
{
    state_free(state);
}

/* --- boxes --------------------------------------------------------------- */

static void box_free(void *p)
{
    struct local_box *b = p;
    if (!b)
        return;
    free(b->id);
    free(b->workspace);
    free(b->workdir_arg);
    free(b->scope);
    free(b->state_dir);
    sbx__kv_free(&b->env);
    free(b);
}

static const char *local_box_id(const void *box)
{
    return ((const struct local_box *)box)->id;
}

/* Where allocated workspaces live. */
static char *root_dir(const struct local_state *st)
{
    if (st->workspace_root)
        return strdup(st->workspace_root);
    const char *t = getenv("TMPDIR");
    return strdup(t && *t ? t : "/tmp");
}

/* An absolute form of `path` (relative paths resolve against the process cwd). */
static char *absolute(const char *path)
{
    char *r = realpath(path, NULL);
    if (r)
        return r;
    if (path[0] == '/')
        return strdup(path);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return NULL;
    return sbx__printf("%s/%s", cwd, path);
}

/* A path under the workspace for a relative `p`, `p` itself when absolute. */
static char *in_workspace(const struct local_box *b, const char *p)
{
    if (p[0] == '/')
        return strdup(p);
    return sbx__printf("%s/%s", b->workspace, p);
}

/* The checked state directory (a copy), checking it on first use. Worker threads. */
static char *state_canon(struct local_state *st, sbx_error **err)
{
    pthread_mutex_lock(&st->lock);
    char *canon = NULL;
    if (st->state_canon || sbx__local_state_open(st->state_dir, &st->state_canon, err) == SBX_OK)
        if (!(canon = strdup(st->state_canon)))
            sbx__set_error(err, SBX_ENOMEM, "out of memory");
    pthread_mutex_unlock(&st->lock);
    return canon;
}

struct create_job {
    struct local_state *st;
    sbx_spec *spec;
};

static void warn_ignored(const sbx_spec *spec)
{
    sbx_buf b = {0};
    double d;
    long long n;
    if (sbx_spec_image(spec))
        sbx__buf_printf(&b, ", image");
    if (sbx_spec_get_ready_timeout(spec, &d))
        sbx__buf_printf(&b, ", ready_timeout_s");
    if (sbx_spec_port_count(spec))
        sbx__buf_printf(&b, ", ports");
    if (sbx_spec_get_cpu(spec, &d) || sbx_spec_get_memory_mib(spec, &n) ||
        sbx_spec_get_disk_gib(spec, &n) || sbx_spec_get_gpu(spec, &n) || sbx_spec_gpu_type(spec))
        sbx__buf_printf(&b, ", resources");
    if (sbx_spec_entrypoint(spec))
        sbx__buf_printf(&b, ", entrypoint");
    if (b.data)
        sbx_log(SBX_LOG_WARNING,
                "local provider ignores %s: commands run as host processes with no image, "
                "limits or lifetime; use a container provider for those",
                b.data + 2);
    sbx__buf_free(&b);
}

static void create_work(sbx_op *op, void *data)
{
    struct create_job *j = data;
    const sbx_spec *spec = j->spec;
    sbx_error *e = NULL;
    struct local_box *b = calloc(1, sizeof(*b));
    if (!b)
        goto oom;
    char hex[32];
    const char *workdir = sbx_spec_workdir(spec);
    for (size_t i = 0; i < spec->env.len; i++)
        if (sbx__kv_set(&b->env, spec->env.keys[i], spec->env.values[i]) < 0)
            goto oom;
    if (workdir) {
        /*
         * A workdir is the host's own path (there is no box around a host
         * process): the caller's, used as is, created if missing, never removed,
         * as the reference's LocalProvider does. (A relative workdir never gets
         * here: the spec refuses it.)
         */
        sbx__random_hex(hex, 6);
        b->id = sbx__printf("local-%s", hex);
        if (!b->id || !(b->workdir_arg = strdup(workdir)))
            goto oom;
        struct stat wst;
        bool made = stat(workdir, &wst) < 0;
        if (sbx__mkdir_p(workdir, 0755) < 0) {
            e = sbx_error_new_errno(SBX_ECREATE, errno,
                                    "local provider cannot create the workdir '%s' (a host "
                                    "path: the local provider has no box around it); pick a "
                                    "writable directory, or none for the box's own scratch "
                                    "directory",
                                    workdir);
            goto fail;
        }
        if (!(b->workspace = absolute(workdir)))
            goto oom;
        if (made)
            sbx_log(SBX_LOG_WARNING,
                    "local provider made the host directory '%s' for the workdir of %s; it "
                    "stays after the box (an absolute workdir is a host path); set no workdir "
                    "for a scratch directory that stop removes",
                    b->workspace, b->id);
    } else {
        /* One we allocate is ours to delete. 0700: other users must not look in. */
        _cleanup_free_ char *root = root_dir(j->st);
        if (!root)
            goto oom;
        if (sbx__mkdir_p(root, 0755) < 0) {
            e = sbx_error_new_errno(SBX_ECREATE, errno,
                                    "local provider cannot create workspace_root '%s'; set "
                                    "workspace_root to a writable directory",
                                    root);
            goto fail;
        }
        _cleanup_free_ char *aroot = absolute(root);
        if (!aroot)
            goto oom;
        for (int tries = 0;; tries++) {
            sbx__random_hex(hex, 6);
            free(b->id);
            free(b->workspace);
            b->id = sbx__printf("local-%s", hex);
            b->workspace = sbx__printf("%s/%s", aroot, b->id ? b->id : "");
            if (!b->id || !b->workspace)
                goto oom;
            if (mkdir(b->workspace, 0700) == 0)
                break;
            if (errno != EEXIST || tries > 16) {
                e = sbx_error_new_errno(SBX_ECREATE, errno,
                                        "local provider cannot create the workspace '%s'; set "
                                        "workspace_root to a writable directory",
                                        b->workspace);
                goto fail;
            }
        }
        b->owned_ws = true;
    }
    /* The record: how list, stop by id and gc (any process's) find the box. */
    if (!(b->state_dir = state_canon(j->st, &e))) {
        e = sbx_error_prefix(e, "local provider cannot record the box");
        if (b->owned_ws)
            sbx__rm_rf(b->workspace);
        goto fail;
    }
    double ttl = 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    sbx_local_record rec = {
        .id = b->id,
        .workspace = b->workspace,
        .owned_workspace = b->owned_ws,
        .workdir = b->workdir_arg,
        .created = (double)now.tv_sec + now.tv_nsec / 1e9,
        .labels = &spec->metadata,
    };
    if (sbx_spec_get_ttl(spec, &ttl) && ttl >= 0)
        rec.expires_at = rec.created + ttl;
    if (sbx__local_record_write(b->state_dir, &rec, &e) < 0) {
        e = sbx_error_prefix(e, "local provider cannot record the box");
        if (b->owned_ws)
            sbx__rm_rf(b->workspace);
        goto fail;
    }
    sbx_spec_free(j->spec);
    free(j);
    sbx_op_complete(op, SBX_OK, NULL, b);
    return;
oom:
    e = sbx_error_new(SBX_ENOMEM, "out of memory");
fail:
    box_free(b);
    sbx_spec_free(j->spec);
    free(j);
    sbx_op_complete(op, sbx_error_code(e), e, NULL);
}

static void local_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    warn_ignored(spec);
    struct create_job *j = calloc(1, sizeof(*j));
    if (j)
        j->spec = sbx_spec_copy(spec);
    if (!j || !j->spec) {
        if (j)
            free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->st = state;
    if (sbx_op_run_blocking(op, create_work, j) < 0) {
        sbx_spec_free(j->spec);
        free(j);
        sbx_op_complete(op, SBX_EIO, sbx_error_new(SBX_EIO, "cannot queue local create"), NULL);
    }
}

/* --- exec ---------------------------------------------------------------- */

struct stream {
    uv_pipe_t pipe;
    char *data;
    size_t len, cap;
    size_t streamed; /* bytes handed to sbx_op_exec_output (up to the limit) */
    bool eof;
};

enum ex_phase { EX_QUEUED, EX_RUNNING, EX_FINISHED };
enum ex_end { END_NORMAL, END_TIMEOUT, END_CANCEL, END_CLOSED };

struct lexec {
    struct local_state *st;
    struct local_box *box;
    sbx_op *op;
    struct lexec *qnext;         /* the provider's FIFO */
    struct lexec *bprev, *bnext; /* the box's running list */
    enum ex_phase phase;
    enum ex_end end;
    char *command;
    char **argv; /* a transfer built-in: sbx-agent builtin NAME ARGS..., no shell; else NULL */
    bool user_argv; /* argv is the caller's (sbx_exec_opts_set_argv), not a built-in's */
    char *cwd;
    sbx_kv env;       /* spec.env, then the call's env on top */
    double timeout_s; /* < 0: none */
    size_t limit;
    bool keep;   /* the result carries the output (sbx_exec_opts_keep_output) */
    bool paused; /* the core's fd reader is behind: the pipes are not read */
    char *stdin_data;
    size_t stdin_len;
    bool has_stdin;
    int stdin_fd; /* sbx_exec_opts_set_stdin_fd: the command reads it directly; -1: none */

    uv_process_t proc;
    bool proc_closing, exited, reaping, truncated;
    int64_t exit_status;
    int term_signal;
    struct stream out, err;
    uv_pipe_t in;
    bool in_open;
    uv_write_t wreq;
    uv_timer_t timer;
    int handles; /* initialised handles whose close callback has not run */
};

/* Where bytes past the cap are read and dropped: one per loop thread, never read back. */
static __thread char scratch[READ_CHUNK];

static void exec_free(struct lexec *e)
{
    free(e->out.data);
    free(e->err.data);
    free(e->command);
    sbx_strv_free(e->argv);
    free(e->cwd);
    sbx__kv_free(&e->env);
    free(e->stdin_data);
    free(e);
}

static void handle_closed(uv_handle_t *h)
{
    struct lexec *e = h->data;
    if (--e->handles == 0 && e->phase == EX_FINISHED)
        exec_free(e);
}

static void close_handle(struct lexec *e, uv_handle_t *h)
{
    (void)e;
    if (!uv_is_closing(h))
        uv_close(h, handle_closed);
}

static void queue_remove(struct local_state *st, struct lexec *e)
{
    struct lexec **pp = &st->qhead, *prev = NULL;
    while (*pp && *pp != e) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (!*pp)
        return;
    *pp = e->qnext;
    if (st->qtail == e)
        st->qtail = prev;
    e->qnext = NULL;
}

static void close_continue(struct local_box *b);

static void box_unlink(struct lexec *e)
{
    if (!e->box)
        return;
    if (e->bprev)
        e->bprev->bnext = e->bnext;
    else if (e->box->execs == e)
        e->box->execs = e->bnext;
    if (e->bnext)
        e->bnext->bprev = e->bprev;
    e->bprev = e->bnext = NULL;
    if (!e->box->execs && e->box->closing)
        close_continue(e->box);
}

static void pump(struct local_state *st);

/* Takes a stream's bytes as a NUL-terminated malloc'd buffer ("" when empty). */
static char *stream_take(struct stream *s, size_t *len)
{
    char *d = s->data;
    /* Room for the NUL; and give back the slack geometric growth left behind. */
    if (!d || s->cap < s->len + 1 || s->cap - s->len > s->len / 8 + 4096) {
        d = realloc(s->data, s->len + 1);
        if (!d)
            return NULL;
    }
    d[s->len] = 0;
    *len = s->len;
    s->data = NULL;
    s->len = s->cap = 0;
    return d;
}

static sbx_exec_result *runtime_result(const char *error_type, char *msg)
{
    sbx_exec_result *r = NULL;
    if (!msg ||
        sbx_exec_result_new_take(NULL, 0, msg, strlen(msg), LOCAL_RUNTIME_RC, error_type, &r) < 0)
        return NULL;
    return r;
}

/* Completes the op (once) and releases the concurrency slot; handles close behind. */
static void finish(struct lexec *e)
{
    if (e->phase == EX_FINISHED)
        return;
    bool was_running = e->phase == EX_RUNNING;
    e->phase = EX_FINISHED;
    sbx_op_on_cancel(e->op, NULL, NULL);
    /* `e` may be freed before the core hears of the completion: no flow calls into it. */
    sbx_op_exec_on_flow(e->op, NULL, NULL);

    sbx_exec_result *r = NULL;
    int code = SBX_OK;
    sbx_error *err = NULL;
    switch (e->end) {
    case END_NORMAL: {
        size_t ol = 0, el = 0;
        char *o = stream_take(&e->out, &ol);
        char *er = stream_take(&e->err, &el);
        /* A signal death reads like Python's returncode: -SIGNUM. */
        int rc = e->term_signal ? -e->term_signal : (int)e->exit_status;
        if (!o || !er) {
            free(o);
            free(er);
        } else if (sbx_exec_result_new_take(o, ol, er, el, rc, NULL, &r) < 0) {
            r = NULL; /* new_take freed both */
        }
        if (r && e->truncated)
            sbx_exec_result_set_truncated(r, 1);
        break;
    }
    case END_TIMEOUT: {
        /*
         * What the command wrote before the kill (issue 9; the reference gave
         * stdout None): stdout the partial stdout, stderr the partial stderr,
         * a newline when it lacks one, then the reference's message.
         */
        char t[32];
        sbx__fmt_g(e->timeout_s, t, sizeof(t));
        size_t ol = 0, el = 0;
        char *o = stream_take(&e->out, &ol);
        char *er = stream_take(&e->err, &el);
        sbx_buf eb = {er, el, el + 1};
        if (o && er && (!el || er[el - 1] == '\n' || sbx__buf_append(&eb, "\n", 1) == 0) &&
            sbx__buf_printf(&eb, "local command timed out after %ss", t) == 0) {
            if (sbx_exec_result_new_take(o, ol, eb.data, eb.len, LOCAL_RUNTIME_RC, "timeout",
                                         &r) < 0)
                r = NULL;
            if (r && e->truncated)
                sbx_exec_result_set_truncated(r, 1);
        } else {
            free(o);
            free(eb.data);
        }
        break;
    }
    case END_CLOSED:
        r = runtime_result("sandbox",
                           sbx__printf("local sandbox %s was stopped while the command was "
                                       "running; its process group was killed",
                                       e->box ? e->box->id : "?"));
        break;
    case END_CANCEL:
        code = SBX_ECANCELED;
        err = sbx_error_new(SBX_ECANCELED,
                            "local command was cancelled; its process group was killed");
        break;
    }
    if (code == SBX_OK && !r) {
        code = SBX_ENOMEM;
        err = sbx_error_new(SBX_ENOMEM, "out of memory building the exec result");
    }
    sbx_op_complete(e->op, code, err, r);
    e->op = NULL;

    box_unlink(e);
    e->box = NULL;
    struct local_state *st = e->st;
    e->st = NULL;
    if (!was_running) {
        if (e->handles == 0)
            exec_free(e);
        return;
    }
    uv_timer_stop(&e->timer);
    close_handle(e, (uv_handle_t *)&e->timer);
    close_handle(e, (uv_handle_t *)&e->out.pipe);
    close_handle(e, (uv_handle_t *)&e->err.pipe);
    if (e->in_open)
        close_handle(e, (uv_handle_t *)&e->in);
    /* A process that has not exited yet keeps its handle until it does, so it gets reaped. */
    if (e->exited)
        close_handle(e, (uv_handle_t *)&e->proc);
    st->running--;
    pump(st);
}

static void check_done(struct lexec *e)
{
    if (e->phase == EX_RUNNING && e->exited && e->out.eof && e->err.eof)
        finish(e);
}

static void on_reap_bound(uv_timer_t *t)
{
    struct lexec *e = t->data;
    /*
     * The group was killed but something still holds a pipe (a process that
     * escaped into its own session): give up waiting so it cannot wedge us.
     */
    sbx_log(SBX_LOG_WARNING,
            "local command (pid %d) still held its output open %gs after being killed; "
            "a process escaped its process group",
            (int)e->proc.pid, REAP_TIMEOUT_S);
    finish(e);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *buf);

static void set_paused(struct lexec *e, bool pause)
{
    if (e->paused == pause || e->phase != EX_RUNNING)
        return;
    e->paused = pause;
    struct stream *ss[] = {&e->out, &e->err};
    for (int i = 0; i < 2; i++) {
        if (ss[i]->eof)
            continue;
        if (pause)
            uv_read_stop((uv_stream_t *)&ss[i]->pipe);
        else
            uv_read_start((uv_stream_t *)&ss[i]->pipe, on_alloc, on_read);
    }
}

/*
 * The core's fd reader fell behind (caught up): stop (resume) reading the
 * command's pipes, so the command blocks writing and nothing is lost.
 */
static void on_flow(sbx_op *op, int pause, void *data)
{
    (void)op;
    set_paused(data, pause != 0);
}

/* Kills the whole process group, then waits a bounded time for exit and EOF. */
static void kill_tree(struct lexec *e, enum ex_end why)
{
    if (e->phase != EX_RUNNING || e->reaping)
        return;
    e->end = why;
    e->reaping = true;
    /* setsid made the shell's pid its process group id; the group outlives the shell. */
    if (e->proc.pid > 0)
        kill(-e->proc.pid, SIGKILL);
    uv_timer_stop(&e->timer);
    uv_timer_start(&e->timer, on_reap_bound, (uint64_t)(REAP_TIMEOUT_S * 1000), 0);
    /* Read to EOF even when a slow fd reader paused us: what is left is a pipe's worth. */
    set_paused(e, false);
    check_done(e);
}

static void on_timeout(uv_timer_t *t)
{
    kill_tree(t->data, END_TIMEOUT);
}

static void on_cancel(sbx_op *op, void *data)
{
    (void)op;
    struct lexec *e = data;
    if (e->phase == EX_QUEUED) {
        queue_remove(e->st, e);
        e->end = END_CANCEL;
        finish(e);
    } else {
        kill_tree(e, END_CANCEL);
    }
}

static void on_proc_exit(uv_process_t *p, int64_t status, int term_signal)
{
    struct lexec *e = p->data;
    e->exited = true;
    e->exit_status = status;
    e->term_signal = term_signal;
    if (e->phase == EX_FINISHED) {
        close_handle(e, (uv_handle_t *)p);
        return;
    }
    check_done(e);
}

static struct stream *stream_of(struct lexec *e, uv_handle_t *h)
{
    return h == (uv_handle_t *)&e->out.pipe ? &e->out : &e->err;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct lexec *e = h->data;
    struct stream *s = stream_of(e, h);
    if (!e->keep || s->len >= e->limit) {
        *buf = uv_buf_init(scratch, sizeof(scratch));
        return;
    }
    if (s->cap - s->len < READ_CHUNK) {
        /* Geometric growth: 100 MiB arrives in ~12 reallocs, not thousands. */
        size_t cap = s->cap ? s->cap : READ_CHUNK * 2;
        while (cap - s->len < READ_CHUNK)
            cap *= 2;
        char *d = realloc(s->data, cap);
        if (!d) {
            *buf = uv_buf_init(scratch, sizeof(scratch));
            return;
        }
        s->data = d;
        s->cap = cap;
    }
    size_t room = s->cap - s->len;
    *buf = uv_buf_init(s->data + s->len, (unsigned)(room > UINT_MAX ? UINT_MAX : room));
}

static void on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *buf)
{
    struct lexec *e = h->data;
    struct stream *s = stream_of(e, (uv_handle_t *)h);
    if (n > 0) {
        /* Chunks stop at the output limit too, as the agent's do. */
        size_t give = (size_t)n;
        if (s->streamed + give > e->limit) {
            give = e->limit > s->streamed ? e->limit - s->streamed : 0;
            e->truncated = true;
        }
        s->streamed += give;
        if (give)
            sbx_op_exec_output(e->op, s == &e->out ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR,
                               buf->base, give);
        if (buf->base == scratch) {
            /* past the cap (or out of memory): drained, dropped, flagged; or not kept */
            if (e->keep)
                e->truncated = true;
        } else {
            s->len += (size_t)n;
            if (s->len > e->limit) {
                s->len = e->limit;
                e->truncated = true;
            }
        }
        return;
    }
    if (n == 0)
        return;
    /* EOF or a read error: this stream is done. */
    s->eof = true;
    uv_read_stop(h);
    check_done(e);
}

static void on_stdin_written(uv_write_t *w, int status)
{
    (void)status; /* a command that does not read its stdin is not an error */
    struct lexec *e = w->data;
    e->in_open = false;
    close_handle(e, (uv_handle_t *)&e->in);
}

/* The child's environment: the process's, then spec.env, then the call's. */
static char **build_env(const sbx_kv *over)
{
    size_t n = 0;
    for (char **p = environ; p && *p; p++)
        n++;
    char **envp = calloc(n + over->len + 1, sizeof(*envp));
    if (!envp)
        return NULL;
    size_t k = 0;
    for (char **p = environ; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        /* A hashed lookup: `over` may hold many thousands of variables. */
        _cleanup_free_ char *key = strndup(*p, eq ? (size_t)(eq - *p) : strlen(*p));
        if (!key)
            goto oom;
        if (sbx__kv_get(over, key))
            continue;
        if (!(envp[k++] = strdup(*p)))
            goto oom;
    }
    for (size_t i = 0; i < over->len; i++)
        if (!(envp[k++] =
                  sbx__printf("%s=%s", over->keys[i], over->values[i] ? over->values[i] : "")))
            goto oom;
    return envp;
oom:
    for (size_t i = 0; envp[i]; i++)
        free(envp[i]);
    free(envp);
    return NULL;
}

static void free_env(char **envp)
{
    for (size_t i = 0; envp && envp[i]; i++)
        free(envp[i]);
    free(envp);
}

/*
 * A transfer built-in (src/core/transfer.c) runs as the host's sbx-agent
 * with the same code the agent runs in a box, rooted at / (local has no
 * box root: its paths are the host's, as its exec's are).
 */
static char **builtin_argv(char *const *bi)
{
    size_t n = 0;
    while (bi[n])
        n++;
    char **v = calloc(n + 5, sizeof(*v));
    if (!v)
        return NULL;
    v[0] = sbx__kit_find_helper("sbx-agent", "SBX_AGENT");
    bool ok = v[0] && (v[1] = strdup("builtin")) && (v[2] = strdup("--root")) &&
              (v[3] = strdup("/"));
    for (size_t i = 0; ok && i < n; i++)
        ok = (v[4 + i] = strdup(bi[i])) != NULL;
    if (!ok) {
        sbx_strv_free(v);
        return NULL;
    }
    return v;
}

static void start_exec(struct lexec *e)
{
    struct local_state *st = e->st;
    uv_loop_t *loop = sbx_op_loop(e->op);
    e->phase = EX_RUNNING;
    st->running++;

    uv_timer_init(loop, &e->timer);
    uv_pipe_init(loop, &e->out.pipe, 0);
    uv_pipe_init(loop, &e->err.pipe, 0);
    e->timer.data = e->out.pipe.data = e->err.pipe.data = e;
    e->handles = 3;
    if (e->has_stdin) {
        uv_pipe_init(loop, &e->in, 0);
        e->in.data = e;
        e->in_open = true;
        e->handles++;
    }

    /*
     * Plain pipes, not libuv's socketpairs: a pipe lets a reader collect many
     * small writes in one read, which makes large outputs several times
     * faster. Both ends are close-on-exec; the child gets its end by dup2,
     * which clears the flag on the copy only.
     */
    int pfd[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
    int prc = 0;
    for (int i = 0; i < 3 && !prc; i++)
        if ((i > 0 || e->has_stdin) && pipe2(pfd[i], O_CLOEXEC) < 0)
            prc = uv_translate_sys_error(errno);
    /* The parent keeps stdin's write end and the read ends of stdout and stderr. */
    if (!prc && e->has_stdin && !(prc = uv_pipe_open(&e->in, pfd[0][1])))
        pfd[0][1] = -1;
    if (!prc && !(prc = uv_pipe_open(&e->out.pipe, pfd[1][0])))
        pfd[1][0] = -1;
    if (!prc && !(prc = uv_pipe_open(&e->err.pipe, pfd[2][0])))
        pfd[2][0] = -1;

    char **envp = prc ? NULL : build_env(&e->env);
    char *shell_args[] = {st->shell, (char *)"-c", e->command, NULL};
    char **args = e->argv ? e->argv : shell_args;
    uv_stdio_container_t io[3];
    io[0].flags = e->has_stdin || e->stdin_fd >= 0 ? UV_INHERIT_FD : UV_IGNORE; /* ignored: /dev/null */
    /* A streamed stdin is the caller's descriptor itself: nothing is buffered. */
    io[0].data.fd = e->stdin_fd >= 0 ? e->stdin_fd : pfd[0][0];
    io[1].flags = UV_INHERIT_FD;
    io[1].data.fd = pfd[1][1];
    io[2].flags = UV_INHERIT_FD;
    io[2].data.fd = pfd[2][1];
    uv_process_options_t o = {
        .exit_cb = on_proc_exit,
        .file = args[0],
        .args = args,
        .env = envp,
        .cwd = e->cwd,
        /* DETACHED = setsid(): the command leads its own process group, killed as one. */
        .flags = UV_PROCESS_DETACHED,
        .stdio_count = 3,
        .stdio = io,
    };
    e->proc.data = e;
    int rc = envp ? uv_spawn(loop, &e->proc, &o) : prc ? prc : UV_ENOMEM;
    free_env(envp);
    /* The child has its copies now (or never will): our copies of its ends must go for EOF. */
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++)
            if (pfd[i][k] >= 0)
                close(pfd[i][k]);
    if (envp)
        e->handles++; /* uv_spawn initialises the process handle even when it fails */
    if (rc < 0) {
        sbx_error *err;
        if (rc == UV_ENOENT && access(e->cwd, F_OK) < 0)
            err = sbx_error_new_errno(SBX_ENOENT, ENOENT,
                                      "local exec: working directory '%s' does not exist; "
                                      "create it or pass an existing cwd",
                                      e->cwd);
        else if (e->user_argv && (rc == UV_ENOENT || rc == UV_EACCES))
            err = NULL; /* the shell's answer: a result, below */
        else if (e->argv && (rc == UV_ENOENT || rc == UV_EACCES))
            err = sbx_error_new(SBX_ENOTSUP,
                                "local transfer: cannot run the sbx-agent helper '%s': %s; "
                                "install sbx's helpers or set SBX_AGENT to sbx-agent",
                                args[0], uv_strerror(rc));
        else if (rc == UV_ENOENT || rc == UV_EACCES)
            err = sbx_error_new(SBX_EPROVIDER,
                                "local exec: cannot run the shell '%s': %s; set the provider's "
                                "`shell` to an executable shell",
                                st->shell, uv_strerror(rc));
        else
            err = sbx_error_new(SBX_EPROVIDER, "local exec: cannot start '%s -c ...': %s",
                                st->shell, uv_strerror(rc));
        e->exited = true; /* nothing to wait for: the handle can close at once */
        e->phase = EX_FINISHED;
        sbx_op_on_cancel(e->op, NULL, NULL);
        if (!err) {
            /* What a shell says and returns for a program it cannot run: 127 or 126. */
            char *msg = sbx__printf("sbx: %s: %s\n", args[0],
                                    rc == UV_ENOENT ? "command not found" : uv_strerror(rc));
            sbx_exec_result *r = NULL;
            int code = msg ? sbx_exec_result_new_take(strdup(""), 0, msg, strlen(msg),
                                                      rc == UV_ENOENT ? 127 : 126, NULL, &r)
                           : SBX_ENOMEM;
            sbx_op_complete(e->op, code, NULL, code == SBX_OK ? r : NULL);
        } else {
            sbx_op_complete(e->op, sbx_error_code(err), err, NULL);
        }
        e->op = NULL;
        box_unlink(e);
        e->box = NULL;
        e->st = NULL;
        close_handle(e, (uv_handle_t *)&e->timer);
        close_handle(e, (uv_handle_t *)&e->out.pipe);
        close_handle(e, (uv_handle_t *)&e->err.pipe);
        if (e->has_stdin)
            close_handle(e, (uv_handle_t *)&e->in);
        if (envp)
            close_handle(e, (uv_handle_t *)&e->proc);
        st->running--;
        return;
    }
    uv_read_start((uv_stream_t *)&e->out.pipe, on_alloc, on_read);
    uv_read_start((uv_stream_t *)&e->err.pipe, on_alloc, on_read);
    if (e->has_stdin) {
        e->wreq.data = e;
        /* uv_buf_t lengths are 32-bit: feed larger inputs in 1 GiB pieces (uv_write copies the
         * array). */
        const size_t piece = (size_t)1 << 30;
        size_t nb = e->stdin_len ? (e->stdin_len + piece - 1) / piece : 1;
        uv_buf_t *bufs = calloc(nb, sizeof(*bufs));
        for (size_t i = 0; bufs && i < nb; i++) {
            size_t off = i * piece, n = e->stdin_len - off < piece ? e->stdin_len - off : piece;
            bufs[i] = uv_buf_init(e->stdin_data ? e->stdin_data + off : (char *)"", (unsigned)n);
        }
        int wrc =
            bufs ? uv_write(&e->wreq, (uv_stream_t *)&e->in, bufs, (unsigned)nb, on_stdin_written)
                 : UV_ENOMEM;
        free(bufs);
        if (wrc < 0) {
            e->in_open = false;
            close_handle(e, (uv_handle_t *)&e->in);
        }
    }
    if (e->timeout_s >= 0) {
        double ms = ceil(e->timeout_s * 1000.0);
        uv_timer_start(&e->timer, on_timeout, ms > 1e15 ? (uint64_t)1e15 : (uint64_t)ms, 0);
    }
}

/* Starts queued execs while there is room (FIFO). */
static void pump(struct local_state *st)
{
    while (st->running < st->concurrency && st->qhead) {
        struct lexec *e = st->qhead;
        st->qhead = e->qnext;
        if (!st->qhead)
            st->qtail = NULL;
        e->qnext = NULL;
        /* Joins the box's list when it starts, so stop kills exactly what runs. */
        e->bnext = e->box->execs;
        if (e->bnext)
            e->bnext->bprev = e;
        e->box->execs = e;
        start_exec(e);
    }
}

static void local_exec(sbx_op *op, void *state, void *box, const char *command,
                       const sbx_exec_opts *opts)
{
    struct local_state *st = state;
    struct local_box *b = box;
    if (sbx_exec_opts_user(opts)) {
        sbx_op_complete(op, SBX_EINVAL,
                        sbx_error_new(SBX_EINVAL,
                                      "The local sandbox provider cannot run commands as "
                                      "another user (user=%s): it runs host processes as the "
                                      "calling user, with no isolation; use a container "
                                      "provider (linux, docker) for `user`",
                                      sbx_exec_opts_user(opts)),
                        NULL);
        return;
    }
    struct lexec *e = calloc(1, sizeof(*e));
    if (!e) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    e->st = st;
    e->box = b;
    e->op = op;
    e->command = strdup(command);
    if (opts && opts->builtin_argv && e->command) {
        /* No agent to run the built-in: say so, not "out of memory". */
        char *agent = sbx__kit_find_helper("sbx-agent", "SBX_AGENT");
        if (!agent) {
            exec_free(e);
            sbx_op_complete(op, SBX_ENOTSUP,
                            sbx_error_new(SBX_ENOTSUP,
                                          "local: directory and byte transfers run the host's "
                                          "sbx-agent, which was not found (install sbx, or set "
                                          "SBX_AGENT to its path)"),
                            NULL);
            return;
        }
        free(agent);
        e->argv = builtin_argv(opts->builtin_argv);
    } else if (opts && opts->argv && e->command) {
        /* The caller's argv, run without the shell (sbx_exec_opts_set_argv). */
        size_t n = 0;
        while (opts->argv[n])
            n++;
        if ((e->argv = calloc(n + 1, sizeof(char *)))) {
            for (size_t i = 0; i < n; i++)
                if (!(e->argv[i] = strdup(opts->argv[i]))) {
                    sbx_strv_free(e->argv);
                    e->argv = NULL;
                    break;
                }
        }
        e->user_argv = true;
    }
    const char *cwd = sbx_exec_opts_cwd(opts);
    if (!cwd || (b->workdir_arg && !strcmp(cwd, b->workdir_arg)))
        e->cwd = strdup(b->workspace);
    else
        e->cwd = in_workspace(b, cwd);
    double t = sbx_exec_opts_timeout(opts);
    e->timeout_s = t >= 0 ? t : st->default_timeout_s;
    e->limit = sbx_exec_opts_output_limit(opts);
    if (!e->limit)
        e->limit = st->max_output;
    e->keep = sbx_exec_opts_keep_output(opts) != 0;
    size_t inlen = 0;
    const void *in = sbx_exec_opts_stdin(opts, &inlen);
    e->stdin_fd = sbx_exec_opts_stdin_fd(opts);
    bool ok = e->command && e->cwd && (!opts || !(opts->builtin_argv || opts->argv) || e->argv) &&
              sbx__kv_copy(&e->env, &b->env) == 0;
    for (size_t i = 0; ok && i < sbx_exec_opts_env_count(opts); i++) {
        const char *k, *v;
        sbx_exec_opts_env_at(opts, i, &k, &v);
        ok = sbx__kv_set(&e->env, k, v) == 0;
    }
    if (ok && in) {
        /* Our own copy: the write may outlive the caller's options. */
        e->has_stdin = true;
        e->stdin_len = inlen;
        if (inlen && (e->stdin_data = malloc(inlen)))
            memcpy(e->stdin_data, in, inlen);
        ok = !inlen || e->stdin_data;
    }
    if (!ok) {
        exec_free(e);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    /* A stat of a local directory is cheap enough for the loop, and gives a clear error. */
    struct stat sst;
    int serr = stat(e->cwd, &sst) < 0 ? errno : 0;
    if (serr || !S_ISDIR(sst.st_mode)) {
        /*
         * The reference's subprocess raises the OSError of its chdir
         * (FileNotFoundError for a missing directory): the errno travels with
         * the error, and the binding sets it on the exception.
         */
        int en = serr ? serr : ENOTDIR;
        bool missing = en == ENOENT || en == ENOTDIR;
        sbx_error *err = sbx_error_new_errno(missing ? SBX_ENOENT : sbx__code_from_errno(en), en,
                                             "local exec: working directory '%s' %s; create it "
                                             "or pass an existing cwd",
                                             e->cwd,
                                             en == ENOTDIR  ? "is not a directory"
                                             : en == ENOENT ? "does not exist"
                                                            : "cannot be used");
        exec_free(e);
        sbx_op_complete(op, sbx_error_code(err), err, NULL);
        return;
    }
    sbx_op_on_cancel(op, on_cancel, e);
    if (sbx_op_exec_streaming(op))
        sbx_op_exec_on_flow(op, on_flow, e);
    if (st->qtail)
        st->qtail->qnext = e;
    else
        st->qhead = e;
    st->qtail = e;
    pump(st);
}

/* --- files --------------------------------------------------------------- */

/* Copies bytes: copy_file_range, then sendfile, then read/write (all stream). */
static int copy_fd(int in, int out, bool regular)
{
    bool try_cfr = regular, try_sf = regular;
    for (;;) {
        ssize_t n;
        if (try_cfr) {
            n = copy_file_range(in, NULL, out, NULL, (size_t)1 << 30, 0);
            if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
                          errno == EOPNOTSUPP || errno == EPERM || errno == EBADF)) {
                try_cfr = false;
                continue;
            }
        } else if (try_sf) {
            n = sendfile(out, in, NULL, (size_t)1 << 30);
            if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
                try_sf = false;
                continue;
            }
        } else {
            char buf[1 << 16];
            n = read(in, buf, sizeof(buf));
            if (n > 0) {
                for (ssize_t off = 0; off < n;) {
                    ssize_t w = write(out, buf + off, (size_t)(n - off));
                    if (w < 0) {
                        if (errno == EINTR)
                            continue;
                        return -1;
                    }
                    off += w;
                }
                continue;
            }
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0)
            return 0;
    }
}

/*
 * shutil.copy2 semantics: `dst` may be a directory (the file lands inside
 * it under the source's name); missing parents are created (0755); mode
 * bits and times are kept. The copy goes to a temp file that is renamed
 * over the target, so a reader never sees half a file.
 */
static sbx_error *copy2(const char *what, const char *src, const char *src_label, const char *dst)
{
    _cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return sbx_error_new(SBX_ENOENT, "%s: %s '%s' does not exist; check the path", what,
                                 src_label, src);
        return sbx_error_new_errno(sbx__code_from_errno(errno), errno, "%s: cannot open %s '%s'",
                                   what, src_label, src);
    }
    struct stat st;
    if (fstat(in, &st) < 0)
        return sbx_error_new_errno(SBX_EIO, errno, "%s: cannot stat '%s'", what, src);
    if (S_ISDIR(st.st_mode))
        return sbx_error_new(SBX_EINVAL,
                             "%s: %s '%s' is a directory; this copies one file (pack a directory "
                             "into a tar archive first)",
                             what, src_label, src);
    _cleanup_free_ char *target = NULL;
    struct stat dstst;
    if (stat(dst, &dstst) == 0 && S_ISDIR(dstst.st_mode)) {
        const char *base = strrchr(src, '/');
        target = sbx__printf("%s/%s", dst, base ? base + 1 : src);
    } else {
        target = strdup(dst);
    }
    if (!target)
        return sbx_error_new(SBX_ENOMEM, "out of memory");
    size_t tl = strlen(target);
    if (tl == 0 || target[tl - 1] == '/')
        return sbx_error_new(SBX_EINVAL,
                             "%s: destination '%s' names a directory that does not "
                             "exist; give a file path",
                             what, dst);
    char *slash = strrchr(target, '/');
    if (slash && slash != target) {
        *slash = 0;
        int rc = sbx__mkdir_p(target, 0755);
        int e = errno;
        *slash = '/';
        if (rc < 0) {
            *slash = 0;
            sbx_error *err = sbx_error_new_errno(
                sbx__code_from_errno(e), e, "%s: cannot create the directory '%s'", what, target);
            *slash = '/';
            return err;
        }
    }
    _cleanup_free_ char *tmp = sbx__printf("%s.sbx-XXXXXX", target);
    if (!tmp)
        return sbx_error_new(SBX_ENOMEM, "out of memory");
    _cleanup_close_ int out = mkostemp(tmp, O_CLOEXEC);
    if (out < 0)
        return sbx_error_new_errno(sbx__code_from_errno(errno), errno, "%s: cannot write '%s'",
                                   what, target);
    sbx_error *err = NULL;
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (copy_fd(in, out, S_ISREG(st.st_mode) && st.st_size > 0) < 0)
        err = sbx_error_new_errno(sbx__code_from_errno(errno), errno,
                                  "%s: copying '%s' to '%s' failed", what, src, target);
    else if (fchmod(out, st.st_mode & 07777) < 0 || futimens(out, times) < 0)
        err = sbx_error_new_errno(sbx__code_from_errno(errno), errno,
                                  "%s: cannot set the mode and times of '%s'", what, target);
    else if (rename(tmp, target) < 0)
        err = sbx_error_new_errno(sbx__code_from_errno(errno), errno,
                                  "%s: cannot move the copy into place at '%s'", what, target);
    if (err)
        unlink(tmp);
    return err;
}

struct copy_job {
    char *what;
    char *src, *dst;
    const char *src_label;
};

static void copy_work(sbx_op *op, void *data)
{
    struct copy_job *j = data;
    sbx_error *err = copy2(j->what, j->src, j->src_label, j->dst);
    free(j->what);
    free(j->src);
    free(j->dst);
    free(j);
    sbx_op_complete(op, err ? sbx_error_code(err) : SBX_OK, err, NULL);
}

static void start_copy(sbx_op *op, char *what, char *src, const char *src_label, char *dst)
{
    struct copy_job *j = calloc(1, sizeof(*j));
    if (!j || !what || !src || !dst) {
        free(j);
        free(what);
        free(src);
        free(dst);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->what = what;
    j->src = src;
    j->dst = dst;
    j->src_label = src_label;
    if (sbx_op_run_blocking(op, copy_work, j) < 0) {
        free(j->what);
        free(j->src);
        free(j->dst);
        free(j);
        sbx_op_complete(op, SBX_EIO, sbx_error_new(SBX_EIO, "cannot queue a local file copy"),
                        NULL);
    }
}

static void local_upload(sbx_op *op, void *state, void *box, const char *local_path,
                         const char *remote_path)
{
    (void)state;
    struct local_box *b = box;
    if (!*remote_path || !*local_path) {
        sbx_op_complete(op, SBX_EINVAL,
                        sbx_error_new(SBX_EINVAL, "upload: both paths must be non-empty"), NULL);
        return;
    }
    start_copy(op, sbx__printf("upload to local sandbox %s", b->id), strdup(local_path),
               "local file", in_workspace(b, remote_path));
}

static void local_download(sbx_op *op, void *state, void *box, const char *remote_path,
                           const char *local_path)
{
    (void)state;
    struct local_box *b = box;
    if (!*remote_path || !*local_path) {
        sbx_op_complete(op, SBX_EINVAL,
                        sbx_error_new(SBX_EINVAL, "download: both paths must be non-empty"), NULL);
        return;
    }
    start_copy(op, sbx__printf("download from local sandbox %s", b->id),
               in_workspace(b, remote_path), "sandbox file", strdup(local_path));
}

/* --- status, endpoint, close --------------------------------------------- */

static void status_work(sbx_op *op, void *data)
{
    struct stat st;
    bool up = stat(data, &st) == 0 && S_ISDIR(st.st_mode);
    free(data);
    sbx_op_complete(op, SBX_OK, NULL,
                    (void *)(intptr_t)(up ? SBX_STATUS_RUNNING : SBX_STATUS_STOPPED));
}

static void local_status(sbx_op *op, void *state, void *box)
{
    (void)state;
    char *ws = strdup(((struct local_box *)box)->workspace);
    if (!ws) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    if (sbx_op_run_blocking(op, status_work, ws) < 0) {
        free(ws);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

static void local_endpoint(sbx_op *op, void *state, void *box, int port)
{
    (void)state;
    (void)box;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    sbx_endpoint *ep = NULL;
    sbx_error *err = NULL;
    int rc = sbx_endpoint_new(url, &ep, &err);
    sbx_op_complete(op, rc, err, ep);
}

/* What ending a box removes: its workspace (when sbx allocated it) and its record. */
struct remove_job {
    char *workspace; /* NULL: keep it */
    char *state_dir; /* NULL: keep the record */
    char *id;
};

static void remove_job_free(struct remove_job *j)
{
    if (!j)
        return;
    free(j->workspace);
    free(j->state_dir);
    free(j->id);
    free(j);
}

static void remove_work(sbx_op *op, void *data)
{
    struct remove_job *j = data;
    sbx_error *err = NULL;
    /* The box ends: so does its host agent (PTY sessions), before its workspace goes. */
    if (j->state_dir)
        sbx__local_agent_stop(j->state_dir, j->id);
    if (j->workspace && sbx__rm_rf(j->workspace) < 0)
        err = sbx_error_new_errno(SBX_EIO, errno,
                                  "local sandbox: cannot remove the workspace '%s'; remove it by "
                                  "hand",
                                  j->workspace);
    if (j->state_dir)
        sbx__local_record_remove(j->state_dir, j->id);
    remove_job_free(j);
    sbx_op_complete(op, err ? SBX_EIO : SBX_OK, err, NULL);
}

static void local_close(sbx_op *op, void *state, void *box, int owned)
{
    struct local_state *st = state;
    struct local_box *b = box;
    /* Commands still running in this box die with it (the whole process group). */
    for (struct lexec *e = st->qhead, *next; e; e = next) {
        next = e->qnext;
        if (e->box == b) {
            queue_remove(st, e);
            e->end = END_CLOSED;
            finish(e);
        }
    }
    for (struct lexec *e = b->execs, *next; e; e = next) {
        next = e->bnext;
        kill_tree(e, END_CLOSED);
    }
    /*
     * Only an allocated workspace is removed. A connected handle removes it
     * only with the owner's scope (or none), as stop() on a connected
     * reference sandbox ends the box.
     */
    b->closing = op;
    bool ends = owned || !b->scope || !strcmp(b->scope, "owner");
    b->closing_remove = b->owned_ws && ends;
    b->closing_forget = ends && b->state_dir;
    /* Stop returns once the killed commands are reaped: nothing of the box outlives it. */
    if (!b->execs)
        close_continue(b);
}

static void close_continue(struct local_box *b)
{
    sbx_op *op = b->closing;
    b->closing = NULL;
    if (!b->closing_remove && !b->closing_forget) {
        sbx_op_complete(op, SBX_OK, NULL, NULL);
        return;
    }
    struct remove_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->id = strdup(b->id)) ||
        (b->closing_remove && !(j->workspace = strdup(b->workspace))) ||
        (b->closing_forget && !(j->state_dir = strdup(b->state_dir)))) {
        remove_job_free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    if (sbx_op_run_blocking(op, remove_work, j) < 0) {
        remove_job_free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

/* --- serialize / connect ------------------------------------------------- */

static void local_serialize(sbx_op *op, void *state, void *box, const char *scope)
{
    (void)state;
    struct local_box *b = box;
    _cleanup_json_ json_t *d = json_object();
    json_object_set_new(d, "sandbox_id", json_string(b->id));
    json_object_set_new(d, "workspace", json_string(b->workspace));
    json_object_set_new(d, "owned_workspace", json_boolean(b->owned_ws));
    json_object_set_new(d, "provider", json_string("local"));
    if (scope)
        json_object_set_new(d, "scope", json_string(scope));
    else if (b->scope)
        json_object_set_new(d, "scope", json_string(b->scope));
    /* A caller's workdir travels as the connected handle's default cwd. */
    if (b->workdir_arg)
        json_object_set_new(d, "workdir", json_string(b->workspace));
    char *s = sbx__json_dump(d);
    sbx_op_complete(op, s ? SBX_OK : SBX_ENOMEM, NULL, s);
}

struct connect_job {
    struct local_state *st;
    char *descriptor;
};

static bool safe_id(const char *id)
{
    return *id && strcmp(id, ".") && strcmp(id, "..") && !strchr(id, '/');
}

static void connect_work(sbx_op *op, void *data)
{
    struct connect_job *j = data;
    sbx_error *err = NULL;
    struct local_box *b = NULL;
    json_t *d = json_loads(j->descriptor, 0, NULL);
    json_t *id = json_object_get(d, "sandbox_id");
    json_t *prov = json_object_get(d, "provider");
    json_t *ws = json_object_get(d, "workspace");
    json_t *owned = json_object_get(d, "owned_workspace");
    json_t *scope = json_object_get(d, "scope");
    json_t *wd = json_object_get(d, "workdir");
    if (!json_is_string(id) || !safe_id(json_string_value(id))) {
        err = sbx_error_new(SBX_EINVAL,
                            "local sandbox descriptor needs a 'sandbox_id' string naming the "
                            "sandbox, as serialize() returns");
        goto out;
    }
    if (prov && !json_is_null(prov) &&
        (!json_is_string(prov) || strcmp(json_string_value(prov), "local"))) {
        err = sbx_error_new(SBX_EINVAL,
                            "descriptor is for provider '%s', not 'local'; connect with that "
                            "provider",
                            json_is_string(prov) ? json_string_value(prov) : "?");
        goto out;
    }
    if ((ws && !json_is_null(ws) && !json_is_string(ws)) ||
        (scope && !json_is_null(scope) && !json_is_string(scope))) {
        err = sbx_error_new(SBX_ETYPE, "local sandbox descriptor: 'workspace' and 'scope' must "
                                       "be strings");
        goto out;
    }
    if (!(b = calloc(1, sizeof(*b))) || !(b->id = strdup(json_string_value(id))))
        goto oom;
    if (json_is_string(ws)) {
        b->workspace = strdup(json_string_value(ws));
        b->owned_ws = json_is_true(owned);
    } else {
        /* `sandbox_id` alone: the workspace we would have allocated for it. */
        _cleanup_free_ char *root = root_dir(j->st);
        _cleanup_free_ char *aroot = root ? absolute(root) : NULL;
        b->workspace = aroot ? sbx__printf("%s/%s", aroot, b->id) : NULL;
        b->owned_ws = owned ? json_is_true(owned) : true;
    }
    if (!b->workspace)
        goto oom;
    if (json_is_string(scope) && !(b->scope = strdup(json_string_value(scope))))
        goto oom;
    if (json_is_string(wd) && !(b->workdir_arg = strdup(json_string_value(wd))))
        goto oom;
    if (!(b->state_dir = state_canon(j->st, &err)))
        goto out;
    struct stat st;
    if (stat(b->workspace, &st) < 0 || !S_ISDIR(st.st_mode)) {
        err = sbx_error_new(SBX_ENOENT,
                            "local sandbox %s: workspace '%s' does not exist (the sandbox was "
                            "stopped, or the descriptor comes from another machine)",
                            b->id, b->workspace);
        goto out;
    }
    json_decref(d);
    free(j->descriptor);
    free(j);
    sbx_op_complete(op, SBX_OK, NULL, b);
    return;
oom:
    err = sbx_error_new(SBX_ENOMEM, "out of memory");
out:
    box_free(b);
    json_decref(d);
    free(j->descriptor);
    free(j);
    sbx_op_complete(op, sbx_error_code(err), err, NULL);
}

static void local_connect(sbx_op *op, void *state, const char *descriptor_json)
{
    struct connect_job *j = calloc(1, sizeof(*j));
    if (j)
        j->descriptor = strdup(descriptor_json);
    if (!j || !j->descriptor) {
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->st = state;
    if (sbx_op_run_blocking(op, connect_work, j) < 0) {
        free(j->descriptor);
        free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

/* --- boxes by id (local_boxes.c) ----------------------------------------- */

static void local_list(sbx_op *op, void *state, const char *filter_json)
{
    sbx__local_op_list(op, ((struct local_state *)state)->state_dir, filter_json);
}

static void local_stop_id(sbx_op *op, void *state, const char *id)
{
    sbx__local_op_stop_id(op, ((struct local_state *)state)->state_dir, id);
}

static void local_gc(sbx_op *op, void *state, const char *opts_json)
{
    sbx__local_op_gc(op, ((struct local_state *)state)->state_dir, opts_json);
}

/* [pty] A host sbx-agent serves the box's PTY sessions (local_agent.c). */
static void local_agent_address(sbx_op *op, void *state, void *box)
{
    struct local_state *st = state;
    struct local_box *b = box;
    if (!b->state_dir) {
        sbx_op_complete(op, SBX_ESTATE,
                        sbx_error_new(SBX_ESTATE, "local box %s has no record: no PTY sessions",
                                      b->id),
                        NULL);
        return;
    }
    char **envp = build_env(&b->env);
    if (!envp) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx__local_agent_address(op, b->state_dir, b->id, b->workspace, st->shell, envp);
}

SBX_INTERNAL const struct sbx_provider_ops sbx__local_provider = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "local",
    .init = local_init,
    .release = local_release,
    .create = local_create,
    .exec = local_exec,
    .upload_file = local_upload,
    .download_file = local_download,
    .status = local_status,
    .close = local_close,
    .box_id = local_box_id,
    .box_free = box_free,
    .endpoint = local_endpoint,
    .serialize = local_serialize,
    .connect = local_connect,
    .list = local_list,
    .stop_id = local_stop_id,
    .gc = local_gc,
    .agent_address = local_agent_address, /* [pty] */
    /* [netw] port forwarding: the box's agent (local_agent.c) relays FORWARD streams. */
    .capabilities = SBX_CAP_EXEC_STREAM | SBX_CAP_PTY | SBX_CAP_PORT_FORWARD | SBX_CAP_AGENT,
};
