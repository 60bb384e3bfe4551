/*
 * opensandbox: the provider for OpenSandbox (a Kubernetes-backed sandbox
 * service), a plugin on the remote kit. Built from the public headers only
 * (<sbx/http.h>, <sbx/wire.h>, <sbx/schema.h>, <sbx/provider.h>), as a
 * provider outside the tree would be; these declarations are shared by its
 * files and by nothing else (the fuzz target reads wire.c alone).
 *
 * Files: config.c (the config schema, attribution labels, the create
 * request body), wire.c (parsers of the service's bytes), provider.c
 * (plumbing, create with its retries and readiness, status, close,
 * endpoint, connect, list, stop by id, gc), exec.c (foreground and
 * background exec over execd), files.c (upload, download), pty.c
 * (terminals over execd's /pty WebSocket).
 */
#ifndef SBX_OSB_H
#define SBX_OSB_H

#include <sbx.h>
#include <sbx/http.h>
#include <sbx/provider.h>

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OSB_NAME "opensandbox"
#define OSB_EXECD_PORT 44772
#define OSB_EGRESS_PORT 18080
/* The SDK's readiness poll of execd's /ping. */
#define OSB_PING_INTERVAL_S 0.2
#define OSB_DEFAULT_READY_TIMEOUT_S 30.0
/* Files move whole through one request: larger ones are refused, not cut. */
#define OSB_MAX_FILE ((size_t)64 << 20)
/* Output kept per exec unless the exec sets its own cap. */
#define OSB_MAX_OUTPUT ((size_t)64 << 20)
/* One execd event (a JSON line) at most: a longer line fails the exec. */
#define OSB_MAX_EVENT ((size_t)4 << 20)
/* stdin travels inside the command (execd has none): bounded by one argv string. */
#define OSB_MAX_STDIN ((size_t)64 << 10)

/* --- config (config.c) ---------------------------------------------------- */

struct osb_connection {
    char *domain;
    char *api_key;
    int protocol; /* index in osb_protocols */
    double request_timeout_s;
    bool use_server_proxy;
};

struct osb_create {
    double request_timeout_s;
    double timeout_s;
    int64_t retries;
    double retry_delay_s;
    double retry_max_delay_s;
    int image_pull_policy; /* index in osb_pull_policies */
    bool skip_health_check;
    double connect_attempt_timeout_s;
    double connect_poll_s;
};

struct osb_probe {
    char *command;
    char *expected_stdout;
    double timeout_s;
    double deadline_s;
    int64_t stable_count;
    double stable_delay_s;
};

struct osb_operations {
    int64_t retries;
    double retry_delay_s;
    double retry_max_delay_s;
    int64_t command_retries;
    double close_timeout_s;
    bool background_exec;
    double background_poll_initial_s;
    double background_poll_interval_s;
    int output; /* index in osb_outputs: 0 reference, 1 lines */
};

struct osb_attribution {
    bool enabled;
    char *team, *user, *workload, *run;
    char *key_prefix;
};

struct osb_config {
    struct osb_connection connection;
    struct osb_create create;
    struct osb_probe probe;
    struct osb_operations operations;
    struct osb_attribution attribution;
};

extern const char *const osb_protocols[];
extern const char *const osb_pull_policies[];

/* Parses and checks the config; fills `labels` (the attribution labels, a JSON object). */
int osb_config_parse(const char *json_text, struct osb_config *cfg, json_t **labels,
                     sbx_error **err);
void osb_config_free(struct osb_config *cfg);
/* The reference's metadata value sanitising (a malloc'd string; NULL: no memory). */
char *osb_sanitize_value(const char *v);
/*
 * The POST /v1/sandboxes body for `spec` (the SDK's defaults, attribution
 * labels under spec metadata, provider_options checked). Writes whether the
 * options asked to skip the health check.
 */
int osb_create_body(const struct osb_config *cfg, json_t *labels, const sbx_spec *spec,
                    json_t **body, bool *skip_health, sbx_error **err);

/* --- the service's bytes (wire.c) ------------------------------------------ */

enum osb_event_type {
    OSB_EV_OTHER = 0,
    OSB_EV_INIT,
    OSB_EV_STDOUT,
    OSB_EV_STDERR,
    OSB_EV_ERROR,
    OSB_EV_COMPLETE,
    OSB_EV_PING,
};

struct osb_event {
    enum osb_event_type type;
    char *text;   /* init: the execution id; stdout/stderr: one line */
    char *ename;  /* error */
    char *evalue; /* error */
};

/*
 * One execd event line: a JSON object, with an optional "data:" prefix; SSE
 * field lines ("event:", "id:", comments) are OSB_EV_OTHER. SBX_EPROTO for
 * anything else, saying what.
 */
int osb_event_parse(const char *line, size_t len, struct osb_event *ev, sbx_error **err);
void osb_event_clear(struct osb_event *ev);

struct osb_info {
    char *id;
    char *state; /* as the service spells it */
    char *reason, *message;
};
/* A sandbox object ({"id", "status": {"state", "reason", "message"}}). */
int osb_info_parse(const char *body, size_t len, struct osb_info *info, sbx_error **err);
void osb_info_clear(struct osb_info *info);
/* The reference's state map (lowercased). */
sbx_status osb_status_of(const char *state);
/* "{reason} {message}" names an OOM kill (\boom[\s_-]*killed\b|\bout of memory\b, any case). */
bool osb_is_oom(const char *text);

struct osb_endpoint {
    char *endpoint;  /* host[:port][/path] or a URL */
    json_t *headers; /* an object of strings (never NULL once parsed) */
};
int osb_endpoint_parse(const char *body, size_t len, struct osb_endpoint *ep, sbx_error **err);
void osb_endpoint_clear(struct osb_endpoint *ep);

struct osb_cmd_status {
    bool running;
    bool has_exit;
    int exit_code;
    char *error;
};
/* GET /command/status/{id}: a missing "running" or "exit_code" is an error, as the reference's. */
int osb_cmd_status_parse(const char *body, size_t len, struct osb_cmd_status *st, sbx_error **err);
/* A file's mode as execd's /files/info gives it (755 means 0755); -1 when absent or bad. */
int osb_file_mode_parse(const char *body, size_t len, const char *path, int *is_dir);
/* evalue as an int, as Python's int() would take it; false when it is not one. */
bool osb_parse_exit(const char *s, int *out);
/* RFC 3339 time as unix seconds; false when it is not one. */
bool osb_parse_time(const char *s, double *out);

/* --- the provider (provider.c, exec.c, files.c) ------------------------------ */

struct osb {
    struct osb_config cfg;
    json_t *labels;       /* attribution labels */
    sbx_http_client *api; /* the lifecycle API, {protocol}://{domain}/v1 */
    char *scheme;         /* "http" or "https": what endpoints without one get */
};

struct obox {
    char *id;
    sbx_http_client *execd; /* NULL until the endpoint is known */
    /* Terminal sessions whose execd id is not a number: sbx's id N is pty_sids[N - 1]. */
    char **pty_sids;
    size_t n_pty_sids;
};

void obox_free(void *box);

/* Where an execd endpoint is: a client for it, with the key rule applied. */
int osb_execd_client(struct osb *st, const struct osb_endpoint *ep, sbx_http_client **out,
                     sbx_error **err);

/*
 * A one-shot timer on `loop` (the op's) calling fn(data) after `s` seconds;
 * NULL when out of memory. osb_timer_cancel() before it fired stops it;
 * once it fired the handle is gone (the holder clears its pointer in fn).
 */
struct osb_timer;
struct osb_timer *osb_after(void *loop, double s, void (*fn)(void *data), void *data);
void osb_timer_cancel(struct osb_timer *t);
/* U(0, min(cap, base * 2^(n-1))): the reference's backoff before retry n (n >= 1). */
double osb_backoff(double base, double cap, int n);
double osb_now(void);

/*
 * Sends `req` (taken) on `op`'s loop; `done` runs once with the outcome (a
 * response of any status, or an error it owns) — inline when the send
 * itself failed. `*slot` holds the request while it is in flight (for a
 * cancel), and is cleared before `done` runs.
 */
typedef void (*osb_done_fn)(void *ctx, int code, sbx_http_response *resp, sbx_error *err);
void osb_send(sbx_op *op, sbx_http_request *req, double deadline_s, sbx_http_request **slot,
              osb_done_fn done, void *ctx);
/* A request to `c` with a JSON body (taken; NULL: none). SBX_OK or an error. */
int osb_request(sbx_http_client *c, const char *method, const char *path, json_t *body,
                sbx_http_request **out, sbx_error **err);
/*
 * METHOD `path` (taken; NULL: out of memory) on `c` without a body, sent as
 * osb_send does; a request that cannot be made reaches `done` inline. The
 * op's cancel hook is the caller's to set.
 */
void osb_call(sbx_op *op, sbx_http_client *c, const char *method, char *path, double deadline_s,
              sbx_http_request **slot, osb_done_fn done, void *ctx);
/* `fmt` (one %s) with `id` escaped as a path segment (malloc'd; NULL: no memory). */
char *osb_path_id(const char *fmt, const char *id);
/* The op's cancel hook for a flow whose request in flight is in `*slot`. */
void osb_cancel_slot(sbx_op *op, void *slot);

/*
 * The exec engine, for the exec op and for the create probe: runs `command`
 * in box `b` and calls `done` once with the result or an error.
 */
struct osb_run_opts {
    const char *cwd;
    json_t *envs; /* an object or NULL (borrowed) */
    const char *user;
    double timeout_s; /* < 0: none */
    size_t limit;     /* output cap per stream; 0: OSB_MAX_OUTPUT */
    bool keep;
    bool background;
    const void *stdin_data;
    size_t stdin_len;
    bool has_stdin;
};
typedef void (*osb_run_done_fn)(void *ctx, int code, sbx_exec_result *r, sbx_error *err);
void osb_run(sbx_op *op, struct osb *st, struct obox *b, const char *command,
             const struct osb_run_opts *o, osb_run_done_fn done, void *ctx);

void osb_exec(sbx_op *op, void *state, void *box, const char *command, const sbx_exec_opts *opts);
void osb_upload(sbx_op *op, void *state, void *box, const char *local_path,
                const char *remote_path);
void osb_download(sbx_op *op, void *state, void *box, const char *remote_path,
                  const char *local_path);
/* Terminals over execd's /pty WebSocket (pty.c). */
void osb_pty_open(sbx_op *op, void *state, void *box, sbx_pty_session *s);

/* Python's shlex.quote, exactly (malloc'd). */
char *osb_shq(const char *s);
/* A path under the box's execd base with `q` escaped as the query value of `key`. */
char *osb_query(const char *path, const char *key, const char *value);

#endif
