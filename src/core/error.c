/* Error objects (crun's model) and the code table (libuv's). */
#include "internal.h"

#include <stdio.h>
#include <pthread.h>

struct sbx_error {
    int code;
    int errnum;
    char *provider;
    char *message;
};

/* Returned when allocating an error fails: callers still get a code. */
static struct sbx_error oom_error = { SBX_ENOMEM, ENOMEM, NULL, (char *)"out of memory" };

const char *sbx_version(void) { return SBX_VERSION_STRING; }

const char *sbx_strerror(int code)
{
    switch (code) {
    case SBX_OK:
        return "success";
#define X(name, value, msg)                                                                        \
    case SBX_##name:                                                                               \
        return msg;
        SBX_ERRNO_MAP(X)
#undef X
    }
    return "unknown error";
}

const char *sbx_err_name(int code)
{
    switch (code) {
    case SBX_OK:
        return "OK";
#define X(name, value, msg)                                                                        \
    case SBX_##name:                                                                               \
        return #name;
        SBX_ERRNO_MAP(X)
#undef X
    }
    return "UNKNOWN";
}

static sbx_error *error_vnew(int code, int errnum, const char *fmt, va_list ap)
{
    sbx_error *e = calloc(1, sizeof(*e));
    if (!e)
        return &oom_error;
    e->code = code < 0 ? code : SBX_EPROVIDER;
    e->errnum = errnum;
    char *msg = NULL;
    if (!fmt || vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    if (msg && errnum) {
        char *full = NULL;
        /* Out of descriptors: say what to do, whichever call ran out. */
        const char *hint = errnum == EMFILE || errnum == ENFILE
                               ? "; raise the open-file limit (ulimit -n) or run fewer "
                                 "sandboxes at once"
                               : "";
        if (asprintf(&full, "%s: %s%s", msg, strerror(errnum), hint) >= 0) {
            free(msg);
            msg = full;
        }
    }
    e->message = msg ? msg : strdup(sbx_strerror(e->code));
    if (!e->message) {
        free(e);
        return &oom_error;
    }
    return e;
}

sbx_error *sbx_error_new(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sbx_error *e = error_vnew(code, 0, fmt, ap);
    va_end(ap);
    return e;
}

sbx_error *sbx_error_new_errno(int code, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sbx_error *e = error_vnew(code, errnum, fmt, ap);
    va_end(ap);
    return e;
}

sbx_error *sbx_error_prefix(sbx_error *e, const char *fmt, ...)
{
    if (!e || e == &oom_error)
        return e;
    char *prefix = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&prefix, fmt, ap);
    va_end(ap);
    if (n < 0)
        return e;
    char *full = NULL;
    if (asprintf(&full, "%s: %s", prefix, e->message) >= 0) {
        free(e->message);
        e->message = full;
    }
    free(prefix);
    return e;
}

sbx_error *sbx_error_copy(const sbx_error *e)
{
    if (!e)
        return NULL;
    sbx_error *c = sbx_error_new(e->code, "%s", e->message);
    if (c != &oom_error) {
        c->errnum = e->errnum;
        c->provider = sbx__strdup0(e->provider);
    }
    return c;
}

int sbx_error_code(const sbx_error *e) { return e ? e->code : SBX_OK; }
const char *sbx_error_message(const sbx_error *e) { return e ? e->message : ""; }
int sbx_error_errno(const sbx_error *e) { return e ? e->errnum : 0; }
const char *sbx_error_provider(const sbx_error *e) { return e ? e->provider : NULL; }

void sbx_error_free(sbx_error *e)
{
    if (!e || e == &oom_error)
        return;
    free(e->provider);
    free(e->message);
    free(e);
}

void sbx__error_set_provider(sbx_error *e, const char *provider)
{
    if (!e || e == &oom_error || !provider)
        return;
    free(e->provider);
    e->provider = strdup(provider);
}

int sbx__fail(sbx_error **err, sbx_error *e)
{
    int code = sbx_error_code(e);
    if (err && !*err)
        *err = e;
    else
        sbx_error_free(e);
    return code;
}

int sbx__set_error(sbx_error **err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    sbx_error *e = error_vnew(code, 0, fmt, ap);
    va_end(ap);
    sbx__fail(err, e);
    return code;
}

int sbx__set_errno(sbx_error **err, int code, int errnum, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    sbx_error *e = error_vnew(code, errnum, fmt, ap);
    va_end(ap);
    sbx__fail(err, e);
    return code;
}

int sbx__code_from_errno(int errnum)
{
    switch (errnum) {
    case ENOENT:
    case ENOTDIR:
        return SBX_ENOENT;
    case EACCES:
    case EPERM:
    case EROFS:
        return SBX_EPERM;
    case ENOMEM:
        return SBX_ENOMEM;
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case EISDIR:
        return SBX_EINVAL;
    case ETIMEDOUT:
        return SBX_ETIMEDOUT;
    case ECANCELED:
        return SBX_ECANCELED;
    case ENOTSUP:
        return SBX_ENOTSUP;
    default:
        return SBX_EIO;
    }
}

void sbx_free(void *p) { free(p); }

void sbx_strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

/* --- logging ------------------------------------------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static sbx_log_cb log_cb;
static void *log_data;
static int log_min = SBX_LOG_INFO;

/*
 * Fork safety: a loop thread may hold log_lock when another thread forks,
 * and the child (which has no such thread) would then deadlock on its first
 * log line. Hold the lock across fork() so both sides start with it free.
 */
static void log_lock_take(void) { pthread_mutex_lock(&log_lock); }
static void log_lock_give(void) { pthread_mutex_unlock(&log_lock); }
__attribute__((constructor)) static void log_atfork(void)
{
    pthread_atfork(log_lock_take, log_lock_give, log_lock_give);
}

void sbx_set_log_cb(sbx_log_cb cb, void *data, sbx_log_level min_level)
{
    pthread_mutex_lock(&log_lock);
    log_cb = cb;
    log_data = data;
    log_min = (int)min_level;
    pthread_mutex_unlock(&log_lock);
}

bool sbx__log_enabled(sbx_log_level level)
{
    pthread_mutex_lock(&log_lock);
    bool on = log_cb && (int)level >= log_min;
    pthread_mutex_unlock(&log_lock);
    return on;
}

void sbx_log(sbx_log_level level, const char *fmt, ...)
{
    pthread_mutex_lock(&log_lock);
    sbx_log_cb cb = log_cb;
    void *data = log_data;
    bool on = cb && (int)level >= log_min;
    pthread_mutex_unlock(&log_lock);
    if (!on)
        return;
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    cb(level, msg, data);
    free(msg);
}
