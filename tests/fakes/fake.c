/*
 * The fake provider: an in-memory box for the core, CLI and binding tests,
 * with failures injectable per operation (as sqlite's test VFS).
 *
 * Config (all optional):
 *   fail:      {op: "message"}  op in create, exec, upload_file, download_file,
 *                               status, close, endpoint, serialize, connect
 *   fail_code: {op: "ECREATE"}  the sbx code name to fail with (default EPROVIDER)
 *   fail_after:{op: N}          fail only from the (N+1)th call of that op on
 *   status:    "running"        what status() answers
 *   marker:    any              echoed by exec "marker"
 *
 * exec understands a few commands, enough to test the core:
 *   "sleep S"   completes after S seconds (a timer; cancellable; honours timeout)
 *   "exit N"    return code N
 *   "cat PATH"  the bytes uploaded at PATH
 *   "marker"    the config's marker
 *   anything else: stdout is a JSON object of what exec received.
 * `fake_basic` is the same provider without the optional capabilities.
 * `fake_boxes` is `fake` with the box registry's list and gc, answered from
 * the environment (the CLI makes its listing provider from an empty config):
 * list() gives $SBX_FAKE_LIST and gc() $SBX_FAKE_GC, JSON arrays ([] when
 * unset). What a race looks like to a caller is then set up exactly: a box
 * listed running that gc nevertheless removes.
 *
 * A test double, not part of libsbx: it uses only the public headers
 * (<sbx.h>, <sbx/provider.h>), so it builds both as the plugin
 * build/tests/fakes/sbx-fake.so (for the CLI, Python and script tests, via
 * SBX_PLUGIN_PATH) and linked into the C test binaries (tests/fakes/static.c
 * registers it there), where the tests read its call log.
 */
#include "fakes/fake.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

struct fake_state {
    json_t *config;
    pthread_mutex_t lock;
    json_t *files; /* box id -> {path: bytes} (shared so connect sees them) */
    json_t *calls; /* per-op call counts */
};

struct fake_box {
    char *id;
    bool borrowed;
};

/* A growable byte buffer, always NUL-terminated when non-empty. */
struct buf {
    char *data;
    size_t len, cap;
};

static int buf_append(struct buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

static void buf_free(struct buf *b)
{
    free(b->data);
    *b = (struct buf){ 0 };
}

static char *dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct buf call_log;

/* The loop thread logs every call: hold the lock across fork() so a child can log too. */
static void log_lock_take(void) { pthread_mutex_lock(&log_lock); }
static void log_lock_give(void) { pthread_mutex_unlock(&log_lock); }
__attribute__((constructor)) static void log_atfork(void)
{
    pthread_atfork(log_lock_take, log_lock_give, log_lock_give);
}

void sbx_fake_log_reset(void)
{
    pthread_mutex_lock(&log_lock);
    buf_free(&call_log);
    pthread_mutex_unlock(&log_lock);
}

char *sbx_fake_log(void)
{
    pthread_mutex_lock(&log_lock);
    char *s = strdup(call_log.data ? call_log.data : "");
    pthread_mutex_unlock(&log_lock);
    return s;
}

static void log_call(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_call(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    pthread_mutex_lock(&log_lock);
    buf_append(&call_log, s, strlen(s));
    buf_append(&call_log, ";", 1);
    pthread_mutex_unlock(&log_lock);
    free(s);
}

static int code_by_name(const char *name)
{
#define X(n, v, m)                                                                                 \
    if (name && !strcmp(name, #n))                                                                 \
        return SBX_##n;
    SBX_ERRNO_MAP(X)
#undef X
    return SBX_EPROVIDER;
}

static int fail(sbx_error **err, int code, const char *msg)
{
    if (err)
        *err = sbx_error_new(code, "%s", msg);
    return code;
}

/* Returns an error when the config says this call of `op` fails. */
static sbx_error *injected(struct fake_state *st, const char *op)
{
    pthread_mutex_lock(&st->lock);
    json_int_t n = json_integer_value(json_object_get(st->calls, op));
    json_object_set_new(st->calls, op, json_integer(n + 1));
    pthread_mutex_unlock(&st->lock);
    json_t *msg = json_object_get(json_object_get(st->config, "fail"), op);
    if (!json_is_string(msg))
        return NULL;
    json_int_t after = json_integer_value(json_object_get(json_object_get(st->config, "fail_after"), op));
    if (n < after)
        return NULL;
    const char *code = json_string_value(json_object_get(json_object_get(st->config, "fail_code"), op));
    return sbx_error_new(code_by_name(code), "%s", json_string_value(msg));
}

static int fake_init(const char *config_json, void **state, sbx_error **err)
{
    json_error_t je;
    json_t *cfg = json_loads(config_json, 0, &je);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return fail(err, SBX_EINVAL, "fake provider config must be a mapping");
    }
    if (json_is_string(json_object_get(cfg, "init_error"))) {
        int rc = fail(err, SBX_EINVAL, json_string_value(json_object_get(cfg, "init_error")));
        json_decref(cfg);
        return rc;
    }
    struct fake_state *st = calloc(1, sizeof(*st));
    if (!st) {
        json_decref(cfg);
        return fail(err, SBX_ENOMEM, "out of memory");
    }
    st->config = cfg;
    st->files = json_object();
    st->calls = json_object();
    pthread_mutex_init(&st->lock, NULL);
    *state = st;
    log_call("init");
    return SBX_OK;
}

static void fake_release(void *state)
{
    struct fake_state *st = state;
    log_call("release");
    json_decref(st->config);
    json_decref(st->files);
    json_decref(st->calls);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static struct fake_box *box_new(const char *id, bool borrowed)
{
    struct fake_box *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->id = strdup(id);
    b->borrowed = borrowed;
    return b;
}

static void fake_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    struct fake_state *st = state;
    log_call("create:%s", sbx_spec_image(spec) ? sbx_spec_image(spec) : "");
    sbx_error *e = injected(st, "create");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    unsigned char rnd[6] = { 0 };
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        sbx_op_complete(op, SBX_EIO, sbx_error_new_errno(SBX_EIO, errno, "getrandom failed"), NULL);
        return;
    }
    char id[32];
    snprintf(id, sizeof(id), "fake-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3],
             rnd[4], rnd[5]);
    pthread_mutex_lock(&st->lock);
    json_object_set_new(st->files, id, json_object());
    pthread_mutex_unlock(&st->lock);
    sbx_op_complete(op, SBX_OK, NULL, box_new(id, false));
}

struct sleeper {
    uv_timer_t timer;
    sbx_op *op;
    double seconds;
    bool timed_out;
};

static void sleeper_closed(uv_handle_t *h)
{
    struct sleeper *s = h->data;
    sbx_exec_result *r = NULL;
    if (sbx_op_cancelled(s->op)) {
        sbx_op_complete(s->op, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "exec cancelled"), NULL);
    } else if (s->timed_out) {
        char *msg = NULL;
        if (asprintf(&msg, "fake command timed out after %gs", s->seconds) < 0)
            msg = NULL;
        sbx_exec_result_new_take(NULL, 0, msg, msg ? strlen(msg) : 0, 125, "timeout", &r);
        sbx_op_complete(s->op, SBX_OK, NULL, r);
    } else {
        sbx_exec_result_new("", 0, "", 0, 0, NULL, &r);
        sbx_op_complete(s->op, SBX_OK, NULL, r);
    }
    free(s);
}

static void sleeper_fire(uv_timer_t *t)
{
    uv_close((uv_handle_t *)t, sleeper_closed);
}

static void sleeper_cancel(sbx_op *op, void *data)
{
    (void)op;
    struct sleeper *s = data;
    uv_timer_stop(&s->timer);
    if (!uv_is_closing((uv_handle_t *)&s->timer))
        uv_close((uv_handle_t *)&s->timer, sleeper_closed);
}

static void fake_exec(sbx_op *op, void *state, void *box, const char *command,
                      const sbx_exec_opts *opts)
{
    struct fake_state *st = state;
    struct fake_box *b = box;
    log_call("exec:%s", command);
    sbx_error *e = injected(st, "exec");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    sbx_exec_result *r = NULL;
    double secs;
    int code;
    char path[4096];
    if (sscanf(command, "sleep %lf", &secs) == 1) {
        struct sleeper *s = calloc(1, sizeof(*s));
        double timeout = sbx_exec_opts_timeout(opts);
        s->op = op;
        s->timed_out = timeout >= 0 && timeout < secs;
        s->seconds = s->timed_out ? timeout : secs;
        uv_timer_init(sbx_op_loop(op), &s->timer);
        s->timer.data = s;
        uv_timer_start(&s->timer, sleeper_fire, (uint64_t)(s->seconds * 1000), 0);
        sbx_op_on_cancel(op, sleeper_cancel, s);
        return;
    }
    if (sscanf(command, "exit %d", &code) == 1) {
        sbx_exec_result_new("", 0, "", 0, code, NULL, &r);
    } else if (sscanf(command, "cat %4095s", path) == 1) {
        pthread_mutex_lock(&st->lock);
        json_t *data = json_object_get(json_object_get(st->files, b->id), path);
        if (data)
            sbx_exec_result_new(json_string_value(data), json_string_length(data), "", 0, 0, NULL, &r);
        else
            sbx_exec_result_new("", 0, "cat: no such file\n", 18, 1, NULL, &r);
        pthread_mutex_unlock(&st->lock);
    } else if (!strcmp(command, "marker")) {
        char *m = dump(json_object_get(st->config, "marker"));
        sbx_exec_result_new(m, m ? strlen(m) : 0, NULL, 0, 0, NULL, &r);
        free(m);
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "command", json_string(command));
        const char *cwd = sbx_exec_opts_cwd(opts);
        json_object_set_new(o, "cwd", cwd ? json_string(cwd) : json_null());
        json_t *env = json_object();
        for (size_t i = 0; i < sbx_exec_opts_env_count(opts); i++) {
            const char *k, *v;
            sbx_exec_opts_env_at(opts, i, &k, &v);
            json_object_set_new(env, k, json_string(v));
        }
        json_object_set_new(o, "env", env);
        double t = sbx_exec_opts_timeout(opts);
        json_object_set_new(o, "timeout", t < 0 ? json_null() : json_real(t));
        const char *user = sbx_exec_opts_user(opts);
        json_object_set_new(o, "user", user ? json_string(user) : json_null());
        size_t in_len = 0;
        const void *in = sbx_exec_opts_stdin(opts, &in_len);
        /*
         * A streamed stdin is read whole here (blocking the loop: this is a
         * test double) so the tests see what the caller passed.
         */
        struct buf fed = { 0 };
        int fd = sbx_exec_opts_stdin_fd(opts);
        for (char chunk[65536]; fd >= 0;) {
            ssize_t n = read(fd, chunk, sizeof(chunk));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0 || buf_append(&fed, chunk, (size_t)n) < 0)
                break;
        }
        if (fd >= 0) {
            in = fed.data ? fed.data : "";
            in_len = fed.len;
        }
        json_object_set_new(o, "stdin", in ? json_stringn_nocheck(in, in_len) : json_null());
        buf_free(&fed);
        char *text = dump(o);
        json_decref(o);
        if (text)
            sbx_exec_result_new(text, strlen(text), NULL, 0, 0, NULL, &r);
        free(text);
    }
    sbx_op_complete(op, r ? SBX_OK : SBX_ENOMEM, NULL, r);
}

/* The whole file at `path` (a test double's inputs are small). */
static int read_file(const char *path, char **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct buf b = { 0 };
    char chunk[65536];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || buf_append(&b, chunk, (size_t)n) < 0) {
            int saved = n < 0 ? errno : ENOMEM;
            buf_free(&b);
            close(fd);
            errno = saved;
            return -1;
        }
    }
    close(fd);
    *data = b.data ? b.data : strdup("");
    *len = b.len;
    return *data ? 0 : -1;
}

/* Writes `path` whole: a fresh temporary beside it, renamed over it. */
static int write_file(const char *path, const char *data, size_t len)
{
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.fake-XXXXXX", path) < 0)
        return -1;
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        free(tmp);
        return -1;
    }
    int rc = fchmod(fd, 0644);
    for (size_t off = 0; rc == 0 && off < len;) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = -1;
        else
            off += (size_t)n;
    }
    if (close(fd) < 0 || rc < 0 || rename(tmp, path) < 0) {
        int saved = errno;
        unlink(tmp);
        free(tmp);
        errno = saved;
        return -1;
    }
    free(tmp);
    return 0;
}

static void fake_upload(sbx_op *op, void *state, void *box, const char *local, const char *remote)
{
    struct fake_state *st = state;
    struct fake_box *b = box;
    log_call("upload:%s", remote);
    sbx_error *e = injected(st, "upload_file");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    char *data = NULL;
    size_t len = 0;
    if (read_file(local, &data, &len) < 0) {
        sbx_op_complete(op, SBX_ENOENT,
                        sbx_error_new_errno(SBX_ENOENT, errno, "cannot read %s", local), NULL);
        return;
    }
    pthread_mutex_lock(&st->lock);
    json_object_set_new(json_object_get(st->files, b->id), remote, json_stringn_nocheck(data, len));
    pthread_mutex_unlock(&st->lock);
    free(data);
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

static void fake_download(sbx_op *op, void *state, void *box, const char *remote, const char *local)
{
    struct fake_state *st = state;
    struct fake_box *b = box;
    log_call("download:%s", remote);
    sbx_error *e = injected(st, "download_file");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    pthread_mutex_lock(&st->lock);
    json_t *data = json_incref(json_object_get(json_object_get(st->files, b->id), remote));
    pthread_mutex_unlock(&st->lock);
    if (!data) {
        sbx_op_complete(op, SBX_ENOENT,
                        sbx_error_new(SBX_ENOENT, "%s: no such file in the fake box", remote), NULL);
        return;
    }
    int rc = write_file(local, json_string_value(data), json_string_length(data));
    json_decref(data);
    sbx_op_complete(op, rc < 0 ? SBX_EIO : SBX_OK,
                    rc < 0 ? sbx_error_new_errno(SBX_EIO, errno, "cannot write %s", local) : NULL,
                    NULL);
}

static void fake_status(sbx_op *op, void *state, void *box)
{
    struct fake_state *st = state;
    struct fake_box *b = box;
    log_call("status");
    sbx_error *e = injected(st, "status");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    sbx_status s = SBX_STATUS_RUNNING;
    const char *name = json_string_value(json_object_get(st->config, "status"));
    if (name)
        sbx_status_from_name(name, &s);
    pthread_mutex_lock(&st->lock);
    if (!json_object_get(st->files, b->id))
        s = SBX_STATUS_STOPPED;
    pthread_mutex_unlock(&st->lock);
    sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)s);
}

static void fake_close(sbx_op *op, void *state, void *box, int owned)
{
    struct fake_state *st = state;
    struct fake_box *b = box;
    log_call("close:%s", owned ? "owned" : "borrowed");
    sbx_error *e = injected(st, "close");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    pthread_mutex_lock(&st->lock);
    json_object_del(st->files, b->id);
    pthread_mutex_unlock(&st->lock);
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

static const char *fake_box_id(const void *box) { return ((const struct fake_box *)box)->id; }

static void fake_box_free(void *box)
{
    struct fake_box *b = box;
    free(b->id);
    free(b);
}

static void fake_endpoint(sbx_op *op, void *state, void *box, int port)
{
    (void)box;
    log_call("endpoint:%d", port);
    sbx_error *e = injected(state, "endpoint");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    sbx_endpoint *ep = NULL;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    sbx_endpoint_new(url, &ep, NULL);
    sbx_op_complete(op, SBX_OK, NULL, ep);
}

static void fake_serialize(sbx_op *op, void *state, void *box, const char *scope)
{
    struct fake_box *b = box;
    log_call("serialize:%s", scope ? scope : "");
    sbx_error *e = injected(state, "serialize");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    json_t *o = json_pack("{s:s}", "sandbox_id", b->id);
    if (scope)
        json_object_set_new(o, "scope", json_string(scope));
    char *text = dump(o);
    json_decref(o);
    sbx_op_complete(op, text ? SBX_OK : SBX_ENOMEM, NULL, text);
}

static void fake_connect(sbx_op *op, void *state, const char *descriptor)
{
    struct fake_state *st = state;
    log_call("connect");
    sbx_error *e = injected(st, "connect");
    if (e) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    json_t *d = json_loads(descriptor, 0, NULL);
    const char *id = json_string_value(json_object_get(d, "sandbox_id"));
    if (!id) {
        json_decref(d);
        sbx_op_complete(op, SBX_EINVAL,
                        sbx_error_new(SBX_EINVAL, "fake descriptor needs a sandbox_id"), NULL);
        return;
    }
    pthread_mutex_lock(&st->lock);
    if (!json_object_get(st->files, id))
        json_object_set_new(st->files, id, json_object());
    pthread_mutex_unlock(&st->lock);
    struct fake_box *b = box_new(id, true);
    json_decref(d);
    sbx_op_complete(op, SBX_OK, NULL, b);
}

static void answer_env(sbx_op *op, const char *var)
{
    const char *v = getenv(var);
    char *text = strdup(v && *v ? v : "[]");
    sbx_op_complete(op, text ? SBX_OK : SBX_ENOMEM, NULL, text);
}

static void fake_list(sbx_op *op, void *state, const char *filter_json)
{
    (void)state;
    log_call("list:%s", filter_json ? filter_json : "null");
    answer_env(op, "SBX_FAKE_LIST");
}

static void fake_gc(sbx_op *op, void *state, const char *opts_json)
{
    (void)state;
    log_call("gc:%s", opts_json ? opts_json : "null");
    answer_env(op, "SBX_FAKE_GC");
}

const struct sbx_provider_ops sbx_fake_provider = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "fake",
    .init = fake_init,
    .release = fake_release,
    .create = fake_create,
    .exec = fake_exec,
    .upload_file = fake_upload,
    .download_file = fake_download,
    .status = fake_status,
    .close = fake_close,
    .box_id = fake_box_id,
    .box_free = fake_box_free,
    .endpoint = fake_endpoint,
    .serialize = fake_serialize,
    .connect = fake_connect,
};

const struct sbx_provider_ops sbx_fake_basic_provider = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "fake_basic",
    .init = fake_init,
    .release = fake_release,
    .create = fake_create,
    .exec = fake_exec,
    .upload_file = fake_upload,
    .download_file = fake_download,
    .status = fake_status,
    .close = fake_close,
    .box_id = fake_box_id,
    .box_free = fake_box_free,
};

const struct sbx_provider_ops sbx_fake_boxes_provider = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "fake_boxes",
    .init = fake_init,
    .release = fake_release,
    .create = fake_create,
    .exec = fake_exec,
    .upload_file = fake_upload,
    .download_file = fake_download,
    .status = fake_status,
    .close = fake_close,
    .box_id = fake_box_id,
    .box_free = fake_box_free,
    .serialize = fake_serialize,
    .connect = fake_connect,
    .list = fake_list,
    .gc = fake_gc,
};

int sbx_fake_register(sbx_error **err)
{
    int rc = sbx_register_provider(&sbx_fake_provider, 1, err);
    if (rc == SBX_OK)
        rc = sbx_register_provider(&sbx_fake_basic_provider, 1, err);
    return rc < 0 ? rc : sbx_register_provider(&sbx_fake_boxes_provider, 1, err);
}
