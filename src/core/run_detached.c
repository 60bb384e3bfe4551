/*
 * The newer reference's SandboxPtySession.run_detached (include/sbx.h,
 * docs/terminals.md "run_detached"): a command run as a background process
 * (src/core/proc.c) that the caller holds no connection to while it runs.
 * Every poll interval one listing asks whether it ended; only then is the
 * output read back, from the process's window. More output than the window
 * holds is an error, never a cut result: the process is stopped and the
 * caller told to send its output to a file.
 */
#include "core/internal.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* The listing's entry of process `id`: 1 running, 0 ended (*bytes its output), -1 gone. */
static int poll_once(sbx_sandbox *sb, unsigned id, unsigned long long *bytes, sbx_error **err)
{
    char *text = NULL;
    int rc = sbx_proc_list(sb, &text, err);
    if (rc < 0)
        return rc;
    json_t *all = json_loads(text, 0, NULL);
    sbx_free(text);
    int state = -1;
    size_t i;
    json_t *e;
    json_array_foreach(all, i, e)
    {
        if (json_integer_value(json_object_get(e, "id")) != (json_int_t)id)
            continue;
        *bytes = (unsigned long long)json_integer_value(json_object_get(e, "stdout_bytes"));
        state = json_is_true(json_object_get(e, "running")) ? 1 : 0;
    }
    json_decref(all);
    if (state < 0)
        return sbx__set_error(err, SBX_EPTY,
                              "run_detached: process %u left the box's list (another client "
                              "collected it?)",
                              id);
    return state;
}

static int too_much(const char *command, sbx_error **err)
{
    return sbx__set_error(err, SBX_EPTY,
                          "run_detached: '%s' wrote more than the %u bytes a detached run "
                          "keeps (it was stopped); send its output to a file and read that",
                          command, (unsigned)SBX_PTY_WINDOW_BYTES);
}

/* Ends process `id` (KILL to its group) and collects it. */
static void kill_and_collect(sbx_sandbox *sb, unsigned id)
{
    sbx_proc *p = NULL;
    if (sbx_proc_attach(sb, id, SBX_PROC_TAKEOVER, 0, &p, NULL) < 0)
        return;
    sbx_proc_signal(p, "KILL", NULL);
    int code;
    sbx_proc_wait(p, 30, &code, NULL);
    char buf[65536];
    size_t n = 0;
    for (int k = 0; k < 2; k++)
        while (sbx_proc_read(p, k == 0 ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR, buf, sizeof(buf), 5,
                             &n, NULL, NULL) == SBX_OK &&
               n > 0)
            ;
    sbx_proc_free(p);
}

/*
 * Reads everything handle `p` gives of an ended process, and its status:
 * *out as for sbx_proc_run_detached. More than the window is SBX_EPTY.
 */
static int read_all(sbx_proc *p, const char *command, char **out, size_t *len, int *code,
                    sbx_error **err)
{
    size_t cap = 65536, got = 0;
    char *buf = malloc(cap + 1);
    int rc = SBX_OK;
    while (buf) {
        if (cap - got < 65536) {
            char *nb = cap <= SBX_PTY_WINDOW_BYTES ? realloc(buf, cap * 2 + 1) : NULL;
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        size_t n = 0;
        rc = sbx_proc_read(p, SBX_STREAM_STDOUT, buf + got, cap - got, 30, &n, NULL, err);
        if (rc < 0 || n == 0)
            break;
        got += n;
    }
    if (!buf)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (rc == SBX_OK && got > SBX_PTY_WINDOW_BYTES)
        rc = too_much(command, err);
    if (rc == SBX_OK)
        rc = sbx_proc_wait(p, 30, code, err);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[got] = 0;
    *out = buf;
    *len = got;
    return SBX_OK;
}

/* The ended process `id`, read from offset 0 by a new handle (which collects it). */
static int collect(sbx_sandbox *sb, unsigned id, const char *command, char **out, size_t *len,
                   int *code, sbx_error **err)
{
    sbx_proc *p = NULL;
    int rc = sbx_proc_attach(sb, id, 0, 0, &p, err);
    if (rc < 0)
        return rc;
    rc = read_all(p, command, out, len, code, err);
    sbx_proc_free(p);
    return rc;
}

int sbx_proc_run_detached(sbx_sandbox *sb, const char *command, double poll_interval_s,
                          double timeout_s, char **out, size_t *len, int *code, sbx_error **err)
{
    if (!sb || !command || !out || !len || !code)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_proc_run_detached: a sandbox, a command and out, len and code "
                              "are required");
    if (!isfinite(poll_interval_s) || poll_interval_s <= 0 || poll_interval_s > 86400)
        return sbx__set_error(err, SBX_EINVAL,
                              "run_detached: poll_interval_s must be in (0, 86400], got %g",
                              poll_interval_s);
    if (isnan(timeout_s))
        return sbx__set_error(err, SBX_EINVAL, "run_detached: timeout_s is not a number");
    /* One stream, as a terminal would show it; stdin at EOF (nobody writes to it). */
    char *script = sbx__printf("{ %s\n} </dev/null 2>&1", command);
    sbx_pty_opts *o = sbx_pty_opts_new();
    int rc = script && o ? sbx_pty_opts_set_command(o, script) : SBX_ENOMEM;
    free(script);
    sbx_proc *p = NULL;
    if (rc == SBX_OK)
        rc = sbx_proc_start(sb, o, &p, err);
    else
        sbx__set_error(err, rc, "out of memory");
    sbx_pty_opts_free(o);
    if (rc < 0)
        return rc;
    unsigned id = sbx_proc_id(p);
    /* The connection goes now: it is not held while the command runs. */
    int status;
    if (sbx_proc_wait(p, 0, &status, NULL) != SBX_OK && (rc = sbx_proc_detach(p, err)) < 0) {
        sbx_proc_free(p);
        return rc;
    }
    if (sbx_proc_wait(p, 0, &status, NULL) == SBX_OK) {
        /* It ended while this handle still held it: the box forgot it, its output is here. */
        rc = read_all(p, command, out, len, code, err);
        sbx_proc_free(p);
        return rc;
    }
    sbx_proc_free(p);
    double deadline = timeout_s < 0 ? INFINITY : now_s() + timeout_s;
    for (;;) {
        unsigned long long bytes = 0;
        int state = poll_once(sb, id, &bytes, err);
        if (state < 0)
            return state;
        if (bytes > SBX_PTY_WINDOW_BYTES) {
            kill_and_collect(sb, id);
            return too_much(command, err);
        }
        if (state == 0)
            return collect(sb, id, command, out, len, code, err);
        double left = deadline - now_s();
        if (left <= 0) {
            kill_and_collect(sb, id);
            return sbx__set_error(err, SBX_ETIMEDOUT,
                                  "run_detached: '%s' did not end within %gs (it was stopped)",
                                  command, timeout_s);
        }
        sleep_s(poll_interval_s < left ? poll_interval_s : left);
    }
}
