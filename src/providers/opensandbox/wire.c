/*
 * opensandbox: parsers of what the service sends (execd's event lines, a
 * sandbox's info, an endpoint, a command's status, a file's info). Every
 * byte is hostile: sizes are bounded by the callers (the kit's readers and
 * the client's body cap), types are checked, nothing is trusted to be there.
 * Pure functions (no I/O), so fuzz/fuzz_opensandbox.c runs them alone.
 */
#include "osb.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static char *dup_str(json_t *v)
{
    const char *s = json_string_value(v);
    return s ? strdup(s) : NULL;
}

static json_t *load(const char *body, size_t len, const char *what, sbx_error **err)
{
    json_error_t je;
    json_t *j = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        if (err)
            *err =
                sbx_error_new(SBX_EPROTO, OSB_NAME ": the service's %s is not a JSON object", what);
        return NULL;
    }
    return j;
}

void osb_event_clear(struct osb_event *ev)
{
    free(ev->text);
    free(ev->ename);
    free(ev->evalue);
    memset(ev, 0, sizeof(*ev));
}

int osb_event_parse(const char *line, size_t len, struct osb_event *ev, sbx_error **err)
{
    memset(ev, 0, sizeof(*ev));
    /* execd writes bare JSON objects; an SSE proxy in front may add "data:". */
    if (len >= 5 && !memcmp(line, "data:", 5)) {
        line += 5, len -= 5;
        if (len && *line == ' ')
            line++, len--;
    } else if (len && line[0] != '{') {
        /* "event:", "id:", "retry:", a ":" comment: nothing of ours. */
        const char *colon = memchr(line, ':', len);
        if (colon || line[0] == ':')
            return SBX_OK;
    }
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        *err = sbx_error_new(SBX_EPROTO,
                             OSB_NAME ": execd sent an event that is not a JSON object "
                                      "(%zu bytes): is the endpoint really execd?",
                             len);
        return SBX_EPROTO;
    }
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *text = json_object_get(j, "text");
    if (text && !json_is_string(text)) {
        json_decref(j);
        *err = sbx_error_new(SBX_EPROTO, OSB_NAME ": an execd event's \"text\" is not a string");
        return SBX_EPROTO;
    }
    int rc = SBX_OK;
    if (!type)
        ev->type = OSB_EV_OTHER;
    else if (!strcmp(type, "init"))
        ev->type = OSB_EV_INIT;
    else if (!strcmp(type, "stdout"))
        ev->type = OSB_EV_STDOUT;
    else if (!strcmp(type, "stderr"))
        ev->type = OSB_EV_STDERR;
    else if (!strcmp(type, "error"))
        ev->type = OSB_EV_ERROR;
    else if (!strcmp(type, "execution_complete"))
        ev->type = OSB_EV_COMPLETE;
    else if (!strcmp(type, "ping"))
        ev->type = OSB_EV_PING;
    if (text && !(ev->text = dup_str(text)))
        rc = SBX_ENOMEM;
    if (ev->type == OSB_EV_ERROR) {
        json_t *e = json_object_get(j, "error");
        /* The SDK reads name and value as strings; anything else reads as empty. */
        const char *n = json_string_value(json_object_get(e, "ename"));
        const char *v = json_string_value(json_object_get(e, "evalue"));
        if (!(ev->ename = strdup(n ? n : "")) || !(ev->evalue = strdup(v ? v : "")))
            rc = SBX_ENOMEM;
    }
    json_decref(j);
    if (rc < 0)
        osb_event_clear(ev);
    return rc;
}

void osb_info_clear(struct osb_info *info)
{
    free(info->id);
    free(info->state);
    free(info->reason);
    free(info->message);
    memset(info, 0, sizeof(*info));
}

int osb_info_parse(const char *body, size_t len, struct osb_info *info, sbx_error **err)
{
    memset(info, 0, sizeof(*info));
    json_t *j = load(body, len, "sandbox", err);
    if (!j)
        return SBX_EPROTO;
    json_t *st = json_object_get(j, "status");
    if (!json_is_string(json_object_get(j, "id"))) {
        json_decref(j);
        *err = sbx_error_new(SBX_EPROTO, OSB_NAME ": the service's sandbox has no \"id\"");
        return SBX_EPROTO;
    }
    info->id = dup_str(json_object_get(j, "id"));
    info->state = dup_str(json_object_get(st, "state"));
    info->reason = dup_str(json_object_get(st, "reason"));
    info->message = dup_str(json_object_get(st, "message"));
    json_decref(j);
    return info->id ? SBX_OK : SBX_ENOMEM;
}

sbx_status osb_status_of(const char *state)
{
    static const char *const running[] = {"active", "ready", "running", NULL};
    static const char *const starting[] = {"creating", "initializing", "pending", "starting", NULL};
    static const char *const stopped[] = {"completed", "deleted",    "exited",
                                          "stopped",   "terminated", NULL};
    static const char *const error[] = {"crashed", "error", "failed", "unhealthy", NULL};
    static const struct {
        const char *const *names;
        sbx_status s;
    } map[] = {{running, SBX_STATUS_RUNNING},
               {starting, SBX_STATUS_STARTING},
               {stopped, SBX_STATUS_STOPPED},
               {error, SBX_STATUS_ERROR}};
    if (!state)
        return SBX_STATUS_UNKNOWN;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        for (size_t k = 0; map[i].names[k]; k++)
            if (!strcasecmp(state, map[i].names[k]))
                return map[i].s;
    return SBX_STATUS_UNKNOWN;
}

static bool word_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

bool osb_is_oom(const char *text)
{
    if (!text)
        return false;
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && word_char(text[i - 1]))
            continue; /* \b before */
        if (!strncasecmp(text + i, "oom", 3)) {
            size_t k = i + 3;
            while (k < n && (isspace((unsigned char)text[k]) || text[k] == '_' || text[k] == '-'))
                k++;
            if (!strncasecmp(text + k, "killed", 6) && !word_char(text[k + 6]))
                return true;
        }
        if (!strncasecmp(text + i, "out of memory", 13) && !word_char(text[i + 13]))
            return true;
    }
    return false;
}

void osb_endpoint_clear(struct osb_endpoint *ep)
{
    free(ep->endpoint);
    json_decref(ep->headers);
    memset(ep, 0, sizeof(*ep));
}

int osb_endpoint_parse(const char *body, size_t len, struct osb_endpoint *ep, sbx_error **err)
{
    memset(ep, 0, sizeof(*ep));
    json_t *j = load(body, len, "endpoint", err);
    if (!j)
        return SBX_EPROTO;
    const char *e = json_string_value(json_object_get(j, "endpoint"));
    json_t *h = json_object_get(j, "headers");
    int rc = SBX_OK;
    if (!e || !*e) {
        *err = sbx_error_new(SBX_EPROTO, OSB_NAME ": the service gave an empty endpoint");
        rc = SBX_EPROTO;
    } else if (strlen(e) > 4096 || strpbrk(e, " \r\n\t")) {
        *err = sbx_error_new(SBX_EPROTO, OSB_NAME ": the service gave a malformed endpoint");
        rc = SBX_EPROTO;
    } else if (h && !json_is_null(h) && !json_is_object(h)) {
        *err = sbx_error_new(SBX_EPROTO, OSB_NAME ": an endpoint's \"headers\" is not a mapping");
        rc = SBX_EPROTO;
    }
    if (rc == SBX_OK) {
        const char *k;
        json_t *v;
        ep->headers = json_object();
        if (json_is_object(h))
            json_object_foreach(h, k, v)
            {
                const char *s = json_string_value(v);
                /* A header the client could not send as it is: refused, never sent cut. */
                if (!s || !*k || strpbrk(k, ":\r\n ") || strpbrk(s, "\r\n")) {
                    *err = sbx_error_new(SBX_EPROTO,
                                         OSB_NAME ": an endpoint header is not a valid header");
                    rc = SBX_EPROTO;
                    break;
                }
                json_object_set_new(ep->headers, k, json_string(s));
            }
        if (rc == SBX_OK && !(ep->endpoint = strdup(e)))
            rc = SBX_ENOMEM;
    }
    json_decref(j);
    if (rc < 0)
        osb_endpoint_clear(ep);
    return rc;
}

bool osb_parse_exit(const char *s, int *out)
{
    /* int(): surrounding whitespace, a sign, decimal digits (underscores between). */
    while (s && isspace((unsigned char)*s))
        s++;
    if (!s || !*s)
        return false;
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v < INT_MIN || v > INT_MAX)
        return false;
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return false;
    *out = (int)v;
    return true;
}

int osb_cmd_status_parse(const char *body, size_t len, struct osb_cmd_status *st, sbx_error **err)
{
    memset(st, 0, sizeof(*st));
    json_t *j = load(body, len, "command status", err);
    if (!j)
        return SBX_EPROTO;
    json_t *running = json_object_get(j, "running");
    json_t *code = json_object_get(j, "exit_code");
    json_t *e = json_object_get(j, "error");
    int rc = SBX_OK;
    if (!json_is_boolean(running) || !code) {
        *err = sbx_error_new(SBX_EPROTO, OSB_NAME ": a command status without \"running\" or "
                                                  "\"exit_code\"");
        rc = SBX_EPROTO;
    } else {
        st->running = json_is_true(running);
        if (json_is_integer(code) && json_integer_value(code) >= INT_MIN &&
            json_integer_value(code) <= INT_MAX) {
            st->has_exit = true;
            st->exit_code = (int)json_integer_value(code);
        }
        if (json_is_string(e) && *json_string_value(e) && !(st->error = dup_str(e)))
            rc = SBX_ENOMEM;
    }
    json_decref(j);
    return rc;
}

int osb_file_mode_parse(const char *body, size_t len, const char *path, int *is_dir)
{
    json_t *j = load(body, len, "file info", NULL);
    json_t *fi = json_object_get(j, path);
    if (!fi && json_object_size(j) == 1)
        fi = json_object_iter_value(json_object_iter(j)); /* the service's spelling of the path */
    json_t *m = json_object_get(fi, "mode");
    const char *type = json_string_value(json_object_get(fi, "type"));
    int mode = -1;
    if (is_dir)
        *is_dir = type && !strcmp(type, "directory");
    /* The decimal digits are octal ones: 755 is rwxr-xr-x. */
    if (json_is_integer(m) && json_integer_value(m) >= 0 && json_integer_value(m) <= 7777) {
        long long v = json_integer_value(m);
        int octal = 0, mult = 1;
        bool ok = true;
        for (; v; v /= 10, mult *= 8) {
            if (v % 10 > 7)
                ok = false;
            octal += (int)(v % 10) * mult;
        }
        mode = ok ? octal : -1;
    }
    json_decref(j);
    return mode;
}

bool osb_parse_time(const char *s, double *out)
{
    if (!s)
        return false;
    struct tm tm = {0};
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return false;
    double frac = 0;
    if (*p == '.') {
        double scale = 0.1;
        for (p++; isdigit((unsigned char)*p); p++, scale /= 10)
            frac += (*p - '0') * scale;
    }
    long off = 0;
    if (*p == 'Z' || *p == 'z')
        p++;
    else if ((*p == '+' || *p == '-') && isdigit((unsigned char)p[1]) &&
             isdigit((unsigned char)p[2]) && p[3] == ':' && isdigit((unsigned char)p[4]) &&
             isdigit((unsigned char)p[5])) {
        off = ((p[1] - '0') * 10 + (p[2] - '0')) * 3600 + ((p[4] - '0') * 10 + (p[5] - '0')) * 60;
        if (*p == '-')
            off = -off;
        p += 6;
    } else
        return false;
    if (*p)
        return false;
    *out = (double)timegm(&tm) - (double)off + frac;
    return true;
}
