/*
 * Background processes (include/sbx.h, docs/terminals.md "Background
 * processes"): a command started in pipe mode as a PTY session of the box's
 * agent, so it outlives its handle and any process can attach to it again.
 * A handle here is a PTY handle (src/core/pty.c holds the connection code);
 * this file adds what background processes need on top: the start in pipe
 * mode, attach with KEEP (read without collecting the end), stdin EOF, and
 * the two listings (PTY_LIST, PS) rendered as JSON.
 *
 * The listings are decoded by src/proto/procs.c, which refuses more entries
 * or longer strings than the protocol's bounds: a box cannot make the host
 * hold more than those.
 */
#include "core/internal.h"
#include "proto/procs.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct sbx_proc {
    sbx_pty *pty;
};

static int wrap(sbx_pty *pty, sbx_proc **out, sbx_error **err)
{
    sbx_proc *p = calloc(1, sizeof(*p));
    if (!p) {
        sbx_pty_free(pty);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    p->pty = pty;
    *out = p;
    return SBX_OK;
}

int sbx_proc_start(sbx_sandbox *sb, const sbx_pty_opts *opts, sbx_proc **out, sbx_error **err)
{
    if (!sb || !out || !opts)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_proc_start: a sandbox, options with a command and out are "
                              "required");
    sbx_pty *pty;
    int rc = sbx__pty_open_pipes(sb, opts, &pty, err);
    return rc < 0 ? rc : wrap(pty, out, err);
}

int sbx_proc_attach(sbx_sandbox *sb, unsigned id, unsigned flags, unsigned long long since,
                    sbx_proc **out, sbx_error **err)
{
    if (flags & ~(unsigned)(SBX_PROC_TAKEOVER | SBX_PROC_KEEP))
        return sbx__set_error(err, SBX_EINVAL, "sbx_proc_attach: unknown flags 0x%x", flags);
    sbx_pty *pty;
    /* SBX_PROC_TAKEOVER and SBX_PROC_KEEP are the PTY_ATTACH bits themselves. */
    int rc = sbx__pty_attach_flags(sb, id, flags, since, &pty, err);
    return rc < 0 ? rc : wrap(pty, out, err);
}

unsigned sbx_proc_id(const sbx_proc *p) { return p ? sbx_pty_id(p->pty) : 0; }
int sbx_proc_fd(const sbx_proc *p) { return p ? sbx_pty_fd(p->pty) : -1; }
bool sbx__proc_ready(const sbx_proc *p) { return p && sbx__pty_ready(p->pty); }

int sbx_proc_write(sbx_proc *p, const void *data, size_t len, sbx_error **err)
{
    if (!p || (!data && len))
        return sbx__set_error(err, SBX_EINVAL, "sbx_proc_write: a handle and data are required");
    if (len == 0)
        return SBX_OK; /* an empty write is not EOF here: sbx_proc_close_stdin says that */
    return sbx_pty_write(p->pty, data, len, err);
}

int sbx_proc_close_stdin(sbx_proc *p, sbx_error **err)
{
    if (!p)
        return sbx__set_error(err, SBX_EINVAL, "sbx_proc_close_stdin: a handle is required");
    return sbx_pty_write(p->pty, "", 0, err);
}

int sbx_proc_read(sbx_proc *p, int stream, void *buf, size_t cap, double timeout_s, size_t *n,
                  unsigned long long *offset, sbx_error **err)
{
    if (!p)
        return sbx__set_error(err, SBX_EINVAL, "sbx_proc_read: a handle is required");
    return sbx_pty_read(p->pty, stream, buf, cap, timeout_s, n, offset, err);
}

int sbx_proc_wait(sbx_proc *p, double timeout_s, int *code, sbx_error **err)
{
    if (!p)
        return sbx__set_error(err, SBX_EINVAL, "sbx_proc_wait: a handle is required");
    return sbx_pty_wait(p->pty, timeout_s, code, err);
}

int sbx_proc_signal(sbx_proc *p, const char *name, sbx_error **err)
{
    if (!p)
        return sbx__set_error(err, SBX_EINVAL, "sbx_proc_signal: a handle is required");
    return sbx_pty_signal(p->pty, name, err);
}

int sbx_proc_detach(sbx_proc *p, sbx_error **err)
{
    if (!p)
        return sbx__set_error(err, SBX_EINVAL, "sbx_proc_detach: a handle is required");
    return sbx_pty_detach(p->pty, err);
}

void sbx_proc_free(sbx_proc *p)
{
    if (!p)
        return;
    sbx_pty_free(p->pty);
    free(p);
}

/* --- listings --------------------------------------------------------------- */

static int dump(json_t *v, char **out, sbx_error **err)
{
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *out = text;
    return SBX_OK;
}

/* The bytes as a JSON string, anything that is not UTF-8 replaced by '?'. */
static json_t *text(const char *s)
{
    json_t *v = json_string(s);
    if (v)
        return v;
    char *copy = strdup(s);
    if (!copy)
        return NULL;
    for (char *c = copy; *c; c++)
        if ((unsigned char)*c >= 0x80)
            *c = '?';
    v = json_string(copy);
    free(copy);
    return v;
}

static json_int_t clamp(uint64_t v) { return v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v; }

int sbx__procs_sessions_json(const uint8_t *payload, size_t len, char **out, sbx_error **err)
{
    sbx_frame f = {SBX_MSG_PTY_SESSIONS, 1, payload, (uint32_t)len};
    sbx_session_entry *e = NULL;
    size_t n = 0;
    if (len > SBX_PROTO_MAX_PAYLOAD || sbx__msg_pty_sessions_decode(&f, &e, &n) < 0)
        return sbx__set_error(err, SBX_EPROTO,
                              "the box's agent sent a malformed or over-long session list");
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        bool ended = e[i].flags & SBX_SESSION_ENDED;
        json_t *o = json_object();
        if (!o)
            break;
        json_object_set_new(o, "id", json_integer(e[i].id));
        json_object_set_new(o, "pid", json_integer(e[i].pid));
        json_object_set_new(o, "command", text(e[i].command));
        json_object_set_new(o, "mode", json_string(e[i].flags & SBX_SESSION_PIPES ? "pipe" : "pty"));
        json_object_set_new(o, "attached", json_boolean(e[i].flags & SBX_SESSION_HELD));
        json_object_set_new(o, "running", json_boolean(!ended));
        json_object_set_new(o, "exit_code", ended ? json_integer(e[i].status) : json_null());
        json_object_set_new(o, "started_ms", json_integer(clamp(e[i].started_ms)));
        json_object_set_new(o, "stdout_bytes", json_integer(clamp(e[i].out_bytes)));
        json_object_set_new(o, "stderr_bytes", json_integer(clamp(e[i].err_bytes)));
        json_array_append_new(arr, o);
    }
    free(e);
    return dump(arr, out, err);
}

int sbx__procs_ps_json(const uint8_t *payload, size_t len, char **out, sbx_error **err)
{
    sbx_frame f = {SBX_MSG_PS_LIST, 1, payload, (uint32_t)len};
    sbx_ps_entry *e = NULL;
    size_t n = 0;
    uint32_t flags = 0;
    if (len > SBX_PROTO_MAX_PAYLOAD || sbx__msg_ps_decode(&f, &flags, &e, &n) < 0)
        return sbx__set_error(err, SBX_EPROTO,
                              "the box's agent sent a malformed or over-long process list");
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        char state[2] = {e[i].state, 0};
        json_t *o = json_object();
        if (!o)
            break;
        json_object_set_new(o, "pid", json_integer(e[i].pid));
        json_object_set_new(o, "ppid", json_integer(e[i].ppid));
        json_object_set_new(o, "uid", json_integer(e[i].uid));
        json_object_set_new(o, "user", e[i].user[0] ? text(e[i].user) : json_null());
        json_object_set_new(o, "state", json_string(state));
        json_object_set_new(o, "rss_kib", json_integer(clamp(e[i].rss_kib)));
        json_object_set_new(o, "cpu_ms", json_integer(clamp(e[i].cpu_ms)));
        json_object_set_new(o, "started_ms", json_integer(clamp(e[i].started_ms)));
        json_object_set_new(o, "command", text(e[i].cmdline));
        json_array_append_new(arr, o);
    }
    free(e);
    json_t *top = arr ? json_pack("{s:o, s:b}", "processes", arr, "truncated",
                                  (flags & SBX_PS_TRUNCATED) != 0)
                      : NULL;
    return dump(top, out, err);
}

int sbx_proc_list(sbx_sandbox *sb, char **json_out, sbx_error **err)
{
    if (!sb || !json_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_proc_list: a sandbox and out are required");
    uint8_t *payload = NULL;
    size_t len = 0;
    int rc = sbx__pty_ask(sb, SBX_MSG_PTY_LIST, SBX_MSG_PTY_SESSIONS,
                          "listing the box's sessions", &payload, &len, err);
    if (rc < 0)
        return rc;
    rc = sbx__procs_sessions_json(payload, len, json_out, err);
    free(payload);
    return rc;
}

int sbx_sandbox_top(sbx_sandbox *sb, char **json_out, sbx_error **err)
{
    if (!sb || !json_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_top: a sandbox and out are required");
    uint8_t *payload = NULL;
    size_t len = 0;
    int rc = sbx__pty_ask(sb, SBX_MSG_PS, SBX_MSG_PS_LIST, "listing the box's processes",
                          &payload, &len, err);
    if (rc < 0)
        return rc;
    rc = sbx__procs_ps_json(payload, len, json_out, err);
    free(payload);
    return rc;
}
