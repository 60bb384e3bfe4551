/*
 * The public box-provider kit (include/sbx/box.h): thin wrappers over the
 * agent client (client.c), the connection pool (agentpool.c) and the shared
 * helpers (shared.c), plus the record store.
 */
#include <sbx/box.h>

#include "kit/agentpool.h"
#include "kit/client.h"
#include "kit/kit.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

/* A record holds labels and a provider's few fields: 1 MiB is plenty, and a bound. */
/* How long a box being created is left alone by gc (its maker may still be at it). */
#define CREATE_GRACE_S 60.0
#define BOX_RECORD_MAX ((size_t)1 << 20)

/* --- the agent ------------------------------------------------------------ */

char *sbx_box_find_agent(void)
{
    /*
     * A sanitizer build's sbx-agent is linked dynamically against the
     * sanitizer's runtime, which another image's box cannot load: such a
     * build also makes sbx-agent-static (Makefile), taken first unless
     * $SBX_AGENT names the agent to use.
     */
    const char *env = getenv("SBX_AGENT");
    char *a = env && *env ? NULL : sbx__kit_find_helper("sbx-agent-static", "SBX_AGENT_STATIC");
    return a ? a : sbx__kit_find_helper("sbx-agent", "SBX_AGENT");
}

int sbx_box_spawn_stdio(const char *const *argv, const char *cwd, const char *const *envp,
                        const char *log_path, pid_t *pid, int *fd, sbx_error **err)
{
    if (!argv || !argv[0] || !pid || !fd)
        return sbx__set_error(err, SBX_EINVAL, "sbx_box_spawn_stdio: no command");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot make a socket pair for %s", argv[0]);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    /* dup2 clears close-on-exec on the copies; the originals close at exec. */
    posix_spawn_file_actions_adddup2(&fa, sv[1], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, sv[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log_path ? log_path : "/dev/null",
                                     O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
    if (cwd)
        posix_spawn_file_actions_addchdir_np(&fa, cwd);
    /* Its own session: a stop signals the whole group; the caller's signals stay its own. */
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    sigset_t dfl;
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGINT);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t child = -1;
    int rc = posix_spawnp(&child, argv[0], &fa, &at, (char *const *)argv,
                          envp ? (char *const *)envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(sv[1]);
    if (rc != 0) {
        close(sv[0]);
        return sbx__set_errno(err, SBX_ECREATE, rc, "cannot start %s", argv[0]);
    }
    *pid = child;
    *fd = sv[0];
    return SBX_OK;
}

sbx_box_pool *sbx_box_pool_new(int max_connections)
{
    return (sbx_box_pool *)sbx__kit_agent_pool_new(
        max_connections > 0 ? max_connections : SBX_KIT_DEFAULT_MAX_AGENT_CONNECTIONS);
}

void sbx_box_pool_free(sbx_box_pool *pool)
{
    sbx__kit_agent_pool_free((sbx_kit_pool *)pool);
}

int sbx_box_pool_count(sbx_box_pool *pool)
{
    return sbx__kit_agent_pool_count((sbx_kit_pool *)pool);
}

struct sbx_box_agent {
    sbx_kit_slot slot;
    char *socket;  /* NULL: a handed-in stream */
    char *workdir; /* relative box paths are joined to it */
};

struct agent_open {
    sbx_box_agent *a;
    sbx_box_ready_cb cb;
    void *data;
};

static void agent_opened(sbx_agent_conn *conn, int code, sbx_error *err, void *data)
{
    struct agent_open *o = data;
    sbx_box_agent *a = o->a;
    sbx_box_ready_cb cb = o->cb;
    void *cb_data = o->data;
    free(o);
    if (!conn) {
        sbx_box_agent_free(a);
        cb(NULL, code < 0 ? code : SBX_EPROVIDER,
           err ? err : sbx_error_new(SBX_EPROVIDER, "the agent did not answer"), cb_data);
        return;
    }
    sbx_error_free(err);
    sbx__kit_agent_put(&a->slot, conn);
    cb(a, SBX_OK, NULL, cb_data);
}

static struct agent_open *open_begin(sbx_box_pool *pool, const char *socket, pid_t peer_pid,
                                     const char *workdir, sbx_box_ready_cb cb, void *data)
{
    struct agent_open *o = calloc(1, sizeof(*o));
    sbx_box_agent *a = calloc(1, sizeof(*a));
    if (!o || !a || (socket && !(a->socket = strdup(socket))) ||
        (workdir && !(a->workdir = strdup(workdir)))) {
        if (a)
            free(a->socket);
        free(a);
        free(o);
        cb(NULL, SBX_ENOMEM, sbx_error_new(SBX_ENOMEM, "out of memory"), data);
        return NULL;
    }
    sbx__kit_agent_init(&a->slot, (sbx_kit_pool *)pool, a->socket);
    a->slot.peer_pid = peer_pid > 0 ? peer_pid : 0;
    *o = (struct agent_open){.a = a, .cb = cb, .data = data};
    return o;
}

void sbx_box_agent_open_fd(sbx_op *op, sbx_box_pool *pool, int fd, double ready_timeout_s,
                           const char *workdir, sbx_box_ready_cb cb, void *data)
{
    struct agent_open *o = open_begin(pool, NULL, 0, workdir, cb, data);
    if (!o) {
        close(fd);
        return;
    }
    double t = ready_timeout_s > 0 ? ready_timeout_s : 60.0;
    int rc = sbx__agent_connect_fd(sbx_op_loop(op), fd, t, agent_opened, o);
    if (rc < 0)
        agent_opened(NULL, rc, sbx_error_new(rc, "cannot talk to the agent"), o);
}

void sbx_box_agent_open_socket(sbx_op *op, sbx_box_pool *pool, const char *socket_path,
                               pid_t peer_pid, double ready_timeout_s, const char *workdir,
                               sbx_box_ready_cb cb, void *data)
{
    struct agent_open *o = open_begin(pool, socket_path, peer_pid, workdir, cb, data);
    if (!o)
        return;
    double t = ready_timeout_s > 0 ? ready_timeout_s : 60.0;
    void *loop = sbx_op_loop(op);
    int rc = peer_pid > 0
                 ? sbx__agent_connect_peer(loop, socket_path, peer_pid, false, t, agent_opened, o)
                 : sbx__agent_connect(loop, socket_path, t, agent_opened, o);
    if (rc < 0)
        agent_opened(NULL, rc, sbx_error_new(rc, "cannot connect to the agent at %s", socket_path),
                     o);
}

int sbx_box_agent_gone(const sbx_box_agent *agent)
{
    return !agent || agent->slot.closed || sbx__kit_agent_gone(&agent->slot);
}

void sbx_box_agent_free(sbx_box_agent *agent)
{
    if (!agent)
        return;
    sbx__kit_agent_drop(&agent->slot);
    free(agent->socket);
    free(agent->workdir);
    free(agent);
}

/*
 * An exec, upload, download or ping: gets the connection from the pool (a
 * socket agent may be reopened), runs as an inner op on it, and hands the
 * connection back when that ends (the pool trims to its cap then). The
 * strings and opts belong to the core's call, which keeps them until the op
 * completes.
 */
enum call_kind { CALL_EXEC, CALL_UPLOAD, CALL_DOWNLOAD, CALL_PING };
struct call {
    enum call_kind kind;
    sbx_op *op, *inner;
    sbx_box_agent *a;
    const char *x, *y;
    const sbx_exec_opts *opts;
    const char *const *base_env;
    char *joined; /* a relative box path joined to the workdir */
};

static void call_cancel(sbx_op *op, void *data)
{
    (void)op;
    struct call *k = data;
    if (k->inner)
        sbx__op_cancel(k->inner);
}

static void call_done(int code, sbx_error *err, void *value, void *data)
{
    struct call *k = data;
    sbx_op_on_cancel(k->op, NULL, NULL);
    k->inner = NULL;
    /* Before the completion: the box may be freed once its last op is done. */
    sbx__kit_agent_release(&k->a->slot);
    sbx_op_complete(k->op, code, err, value);
    free(k->joined);
    free(k);
}

static void with_conn(sbx_agent_conn *conn, int code, const char *msg, void *arg)
{
    struct call *k = arg;
    sbx_op *inner = conn ? sbx__op_new(sbx__op_provider(k->op), call_done, k) : NULL;
    /* The caller's output callback and fds see the agent client's chunks. */
    sbx__op_inherit_exec_sink(inner, k->op);
    if (!inner) {
        if (!conn && k->kind == CALL_EXEC && sbx_box_agent_gone(k->a)) {
            /* A box no longer running: the reference's exec result (rc 125, "sandbox"). */
            char *why = sbx__printf("the box's agent cannot be reached: %s", msg ? msg : "gone");
            sbx__agent_exec_unreachable(k->op, why ? why : "the box's agent is gone");
            free(why);
        } else if (!conn)
            sbx_op_complete(k->op, code < 0 ? code : SBX_EPROVIDER,
                            sbx_error_new(code < 0 ? code : SBX_EPROVIDER,
                                          "the box's agent cannot be reached: %s",
                                          msg ? msg : "gone"),
                            NULL);
        else
            sbx_op_complete(k->op, SBX_ENOMEM, NULL, NULL);
        free(k->joined);
        free(k);
        return;
    }
    k->inner = inner;
    sbx_op_on_cancel(k->op, call_cancel, k);
    switch (k->kind) {
    case CALL_EXEC:
        sbx__agent_exec(conn, inner, k->x, NULL, k->opts, k->base_env);
        break;
    case CALL_UPLOAD:
        sbx__agent_upload(conn, inner, k->x, k->y);
        break;
    case CALL_DOWNLOAD:
        sbx__agent_download(conn, inner, k->x, k->y);
        break;
    case CALL_PING:
        sbx__agent_ping(conn, inner);
        break;
    }
}

static void call(sbx_op *op, sbx_box_agent *a, enum call_kind kind, const char *x, const char *y,
                 const sbx_exec_opts *opts, const char *const *base_env)
{
    if (!a) {
        sbx_op_complete(op, SBX_EINVAL, sbx_error_new(SBX_EINVAL, "no agent"), NULL);
        return;
    }
    struct call *k = calloc(1, sizeof(*k));
    if (!k) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    *k = (struct call){
        .kind = kind, .op = op, .a = a, .x = x, .y = y, .opts = opts, .base_env = base_env};
    /* A relative box path is relative to the workdir, as for local and linux. */
    const char **remote = kind == CALL_UPLOAD ? &k->y : kind == CALL_DOWNLOAD ? &k->x : NULL;
    if (remote && *remote && (*remote)[0] != '/' && a->workdir && a->workdir[0] == '/') {
        if (!(k->joined = sbx__printf("%s/%s", a->workdir, *remote))) {
            free(k);
            sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
            return;
        }
        *remote = k->joined;
    }
    sbx__kit_agent_use(&a->slot, sbx_op_loop(op), with_conn, k);
}

void sbx_box_exec(sbx_op *op, sbx_box_agent *agent, const char *command, const sbx_exec_opts *opts,
                  const char *const *base_env)
{
    call(op, agent, CALL_EXEC, command, NULL, opts, base_env);
}

void sbx_box_upload(sbx_op *op, sbx_box_agent *agent, const char *local_path,
                    const char *remote_path)
{
    call(op, agent, CALL_UPLOAD, local_path, remote_path, NULL, NULL);
}

void sbx_box_download(sbx_op *op, sbx_box_agent *agent, const char *remote_path,
                      const char *local_path)
{
    call(op, agent, CALL_DOWNLOAD, remote_path, local_path, NULL, NULL);
}

void sbx_box_ping(sbx_op *op, sbx_box_agent *agent)
{
    call(op, agent, CALL_PING, NULL, NULL, NULL, NULL);
}

/* --- processes ------------------------------------------------------------ */

unsigned long long sbx_box_pid_start(pid_t pid)
{
    return sbx__kit_proc_start(pid);
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits up to `timeout_s` for `pid` (started at `start`) to be gone; reaps a child of ours. */
static bool wait_gone(pid_t pid, unsigned long long start, int pfd, double timeout_s)
{
    double end = mono_now() + timeout_s;
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return true;
        if (sbx__kit_proc_start(pid) != start)
            return true; /* gone (or a zombie of someone else's, which is gone too) */
        if (mono_now() >= end)
            return false;
        if (pfd >= 0) {
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            poll(&p, 1, 20);
        } else {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

static int signal_box(pid_t pid, int pfd, int sig)
{
    /* The group first (the box's commands) when it leads one, then it through its pidfd. */
    if (getpgid(pid) == pid)
        kill(-pid, sig);
    if (pfd >= 0)
        return (int)syscall(SYS_pidfd_send_signal, pfd, sig, NULL, 0);
    return kill(pid, sig);
}

int sbx_box_stop_pid(pid_t pid, unsigned long long pid_start, double grace_s, sbx_error **err)
{
    if (pid <= 0)
        return SBX_OK;
    int pfd = sbx__kit_pidfd_open(pid);
    /* Checked after the pidfd is held: the pid cannot be reused under it from here on. */
    if (!pid_start || sbx__kit_proc_start(pid) != pid_start) {
        if (pfd >= 0)
            close(pfd);
        int st;
        waitpid(pid, &st, WNOHANG); /* a zombie child of ours */
        return SBX_OK;
    }
    if (signal_box(pid, pfd, SIGTERM) < 0 && errno != ESRCH) {
        int e = errno;
        if (pfd >= 0)
            close(pfd);
        return sbx__set_errno(err, SBX_EPROVIDER, e, "cannot signal process %d", (int)pid);
    }
    bool gone = wait_gone(pid, pid_start, pfd, grace_s < 0 ? 5.0 : grace_s);
    if (!gone) {
        signal_box(pid, pfd, SIGKILL);
        gone = wait_gone(pid, pid_start, pfd, 10.0);
    }
    if (pfd >= 0)
        close(pfd);
    if (!gone)
        return sbx__set_error(err, SBX_ETIMEDOUT, "process %d did not end after SIGKILL", (int)pid);
    return SBX_OK;
}

/* --- box records ----------------------------------------------------------- */

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int sbx_box_new_id(const char *prefix, char *buf, size_t size)
{
    char hex[17];
    sbx__random_hex(hex, 8);
    if (!prefix || !buf)
        return SBX_EINVAL;
    int n = snprintf(buf, size, "%s-%s", prefix, hex);
    if (n < 0 || (size_t)n >= size || !sbx__kit_id_ok(buf))
        return SBX_EINVAL;
    return SBX_OK;
}

int sbx_box_record_init(sbx_box_record *r, const char *id, const sbx_spec *spec)
{
    memset(r, 0, sizeof(*r));
    if (!sbx__kit_id_ok(id))
        return SBX_EINVAL;
    json_t *labels = json_object();
    for (size_t i = 0; spec && labels && i < sbx_spec_metadata_count(spec); i++) {
        const char *k, *v;
        sbx_spec_metadata_at(spec, i, &k, &v);
        json_object_set_new(labels, k, json_string(v ? v : ""));
    }
    r->id = strdup(id);
    r->labels_json = labels ? sbx__json_dump(labels) : NULL;
    json_decref(labels);
    r->created = now_unix();
    double ttl;
    if (spec && sbx_spec_get_ttl(spec, &ttl) && ttl > 0)
        r->expires_at = r->created + ttl;
    if (!r->id || !r->labels_json) {
        sbx_box_record_clear(r);
        return SBX_ENOMEM;
    }
    return SBX_OK;
}

void sbx_box_record_clear(sbx_box_record *r)
{
    if (!r)
        return;
    free(r->id);
    free(r->image);
    free(r->workdir);
    free(r->labels_json);
    free(r->provider_json);
    memset(r, 0, sizeof(*r));
}

struct sbx_box_store {
    char *path;  /* canonical */
    char *boxes; /* path/boxes */
    sbx_box_alive_fn alive;
    sbx_box_stop_fn stop;
    void *data;
};

int sbx_box_store_open(const char *provider, const char *dir, sbx_box_store **out, sbx_error **err)
{
    *out = NULL;
    if (!sbx__kit_id_ok(provider))
        return sbx__set_error(err, SBX_EINVAL, "'%s' is not a provider name fit for a directory",
                              provider ? provider : "(null)");
    _cleanup_free_ char *spelled = sbx__kit_state_dir_spelled(provider, dir);
    if (!spelled)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (spelled[0] != '/')
        return sbx__set_error(err, SBX_EINVAL,
                              "the state directory '%s' is relative: give an absolute path",
                              spelled);
    sbx_box_store *s = calloc(1, sizeof(*s));
    if (!s)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = sbx__private_dir(spelled, true, &s->path, err);
    if (rc == SBX_OK) {
        s->boxes = sbx__printf("%s/boxes", s->path);
        rc = s->boxes ? sbx__private_dir(s->boxes, true, NULL, err)
                      : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (rc < 0) {
        sbx_box_store_free(s);
        return rc;
    }
    *out = s;
    return SBX_OK;
}

void sbx_box_store_free(sbx_box_store *s)
{
    if (!s)
        return;
    free(s->path);
    free(s->boxes);
    free(s);
}

const char *sbx_box_store_path(const sbx_box_store *s)
{
    return s->path;
}

void sbx_box_store_set_hooks(sbx_box_store *s, sbx_box_alive_fn alive, sbx_box_stop_fn stop,
                             void *data)
{
    s->alive = alive;
    s->stop = stop;
    s->data = data;
}

/* The boxes directory, opened without following a link and checked to be the caller's alone. */
static int open_boxes(sbx_box_store *s, sbx_error **err)
{
    int fd = open(s->boxes, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot open %s", s->boxes);
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
        close(fd);
        return sbx__set_error(err, SBX_EPERM,
                              "%s is not the caller's alone (uid %u, nobody else may write "
                              "it): remove it",
                              s->boxes, (unsigned)geteuid());
    }
    return fd;
}

/* Box `id`'s directory under `bfd`, made 0700 with `create`; checked like the store. */
static int open_box(sbx_box_store *s, int bfd, const char *id, bool create, sbx_error **err)
{
    if (!sbx__kit_id_ok(id))
        return sbx__set_error(err, SBX_EINVAL,
                              "'%s' is not a box id (letters, digits, '.', '_' and '-', at most "
                              "64, not starting with '.' or '-')",
                              id ? id : "(null)");
    if (create && mkdirat(bfd, id, 0700) < 0 && errno != EEXIST)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot make %s/%s", s->boxes, id);
    int fd = openat(bfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx__set_errno(err, errno == ENOENT ? SBX_ENOENT : SBX_EPERM, errno,
                              "no box %s in %s", id, s->path);
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
        close(fd);
        return sbx__set_error(err, SBX_EPERM,
                              "the box directory %s/%s is not the caller's alone: remove it",
                              s->boxes, id);
    }
    return fd;
}

int sbx_box_store_box_dir(sbx_box_store *s, const char *id, char **path, sbx_error **err)
{
    *path = NULL;
    _cleanup_close_ int bfd = open_boxes(s, err);
    if (bfd < 0)
        return bfd;
    _cleanup_close_ int fd = open_box(s, bfd, id, true, err);
    if (fd < 0)
        return fd;
    if (!(*path = sbx__printf("%s/%s", s->boxes, id)))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}

static json_t *json_text_or(const char *text, json_t *fallback)
{
    json_t *v = text ? json_loads(text, 0, NULL) : NULL;
    if (!json_is_object(v)) {
        json_decref(v);
        return fallback;
    }
    json_decref(fallback);
    return v;
}

int sbx_box_record_write(sbx_box_store *s, const sbx_box_record *r, sbx_error **err)
{
    _cleanup_close_ int bfd = open_boxes(s, err);
    if (bfd < 0)
        return bfd;
    _cleanup_close_ int fd = open_box(s, bfd, r->id, true, err);
    if (fd < 0)
        return fd;
    json_t *j =
        json_pack("{s:s, s:f, s:f, s:I, s:I}", "id", r->id, "created", r->created, "expires_at",
                  r->expires_at, "pid", (json_int_t)r->pid, "pid_start", (json_int_t)r->pid_start);
    if (!j)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    json_object_set_new(j, "image", r->image ? json_string(r->image) : json_null());
    json_object_set_new(j, "workdir", r->workdir ? json_string(r->workdir) : json_null());
    json_object_set_new(j, "labels", json_text_or(r->labels_json, json_object()));
    json_object_set_new(j, "provider", json_text_or(r->provider_json, json_null()));
    if (r->creating)
        json_object_set_new(j, "creating", json_true());
    _cleanup_free_ char *text = sbx__json_dump(j);
    json_decref(j);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    size_t len = strlen(text);
    if (len > BOX_RECORD_MAX)
        return sbx__set_error(err, SBX_EINVAL, "the record of box %s is over 1 MiB", r->id);
    /* A fresh temp file (never through a link), then rename over the record. */
    char tmp[64], hex[17];
    sbx__random_hex(hex, 8);
    snprintf(tmp, sizeof(tmp), ".record.%s.tmp", hex);
    unlinkat(fd, tmp, 0);
    _cleanup_close_ int wfd =
        openat(fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (wfd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot write the record of box %s", r->id);
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(wfd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            unlinkat(fd, tmp, 0);
            return sbx__set_errno(err, SBX_EIO, e, "cannot write the record of box %s", r->id);
        }
        off += (size_t)n;
    }
    if (renameat(fd, tmp, fd, "record.json") < 0) {
        int e = errno;
        unlinkat(fd, tmp, 0);
        return sbx__set_errno(err, SBX_EIO, e, "cannot write the record of box %s", r->id);
    }
    return SBX_OK;
}

static char *jdup(json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? strdup(v) : NULL;
}

static int parse_record(const char *id, const char *text, size_t n, const char *shown,
                        sbx_box_record *r, sbx_error **err)
{
    json_error_t je;
    _cleanup_json_ json_t *j = json_loadb(text, n, 0, &je);
    if (!json_is_object(j))
        return sbx__set_error(err, SBX_EINVAL, "the box record %s is not a JSON object%s%s", shown,
                              j ? "" : ": ", j ? "" : je.text);
    const char *rid = json_string_value(json_object_get(j, "id"));
    if (!rid || strcmp(rid, id) != 0)
        return sbx__set_error(err, SBX_EINVAL, "the box record %s names another box: refused",
                              shown);
    json_int_t pid = json_integer_value(json_object_get(j, "pid"));
    json_t *labels = json_object_get(j, "labels");
    json_t *prov = json_object_get(j, "provider");
    memset(r, 0, sizeof(*r));
    r->id = strdup(id);
    r->created = json_number_value(json_object_get(j, "created"));
    r->expires_at = json_number_value(json_object_get(j, "expires_at"));
    r->pid = pid > 0 && pid <= INT_MAX ? (pid_t)pid : 0;
    r->pid_start = (unsigned long long)json_integer_value(json_object_get(j, "pid_start"));
    r->image = jdup(j, "image");
    r->workdir = jdup(j, "workdir");
    r->labels_json = sbx__json_dump(json_is_object(labels) ? labels : json_object());
    r->provider_json = json_is_object(prov) ? sbx__json_dump(prov) : NULL;
    r->creating = json_is_true(json_object_get(j, "creating"));
    if (!r->id || !r->labels_json) {
        sbx_box_record_clear(r);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    return SBX_OK;
}

static int read_at(sbx_box_store *s, int bfd, const char *id, sbx_box_record *r, sbx_error **err)
{
    memset(r, 0, sizeof(*r));
    _cleanup_close_ int fd = open_box(s, bfd, id, false, err);
    if (fd < 0)
        return fd;
    _cleanup_free_ char *shown = sbx__printf("%s/%s/record.json", s->boxes, id);
    _cleanup_free_ char *text = NULL;
    size_t n = 0;
    int rc = sbx__read_private_file(fd, "record.json", shown ? shown : id, BOX_RECORD_MAX, &text,
                                    &n, err);
    if (rc < 0)
        return rc;
    return parse_record(id, text, n, shown ? shown : id, r, err);
}

int sbx_box_record_read(sbx_box_store *s, const char *id, sbx_box_record *r, sbx_error **err)
{
    memset(r, 0, sizeof(*r));
    _cleanup_close_ int bfd = open_boxes(s, err);
    if (bfd < 0)
        return bfd;
    return read_at(s, bfd, id, r, err);
}

int sbx_box_record_remove(sbx_box_store *s, const char *id, sbx_error **err)
{
    if (!sbx__kit_id_ok(id))
        return sbx__set_error(err, SBX_EINVAL, "'%s' is not a box id", id ? id : "(null)");
    _cleanup_close_ int bfd = open_boxes(s, err);
    if (bfd < 0)
        return bfd;
    if (sbx__rm_rf_at(bfd, id) < 0 && errno != ENOENT)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot remove %s/%s", s->boxes, id);
    return SBX_OK;
}

int sbx_box_record_alive(sbx_box_store *s, const sbx_box_record *r)
{
    if (s->alive)
        return s->alive(r, s->data) > 0;
    return r->pid > 0 && r->pid_start && sbx__kit_proc_start(r->pid) == r->pid_start;
}

static int stop_record(sbx_box_store *s, const sbx_box_record *r, sbx_error **err)
{
    if (s->stop)
        return s->stop(r, s->data, err);
    return sbx_box_stop_pid(r->pid, r->pid_start, 5.0, err);
}

/* {"labels": {..}} of `json` (NULL when absent), or SBX_EINVAL. */
static int parse_opts(const char *text, const char *what, json_t **opts, json_t **labels,
                      sbx_error **err)
{
    *opts = NULL;
    *labels = NULL;
    if (!text || !*text)
        return SBX_OK;
    json_error_t je;
    *opts = json_loads(text, 0, &je);
    if (!json_is_object(*opts)) {
        json_decref(*opts);
        *opts = NULL;
        return sbx__set_error(err, SBX_EINVAL, "%s must be a JSON object", what);
    }
    json_t *l = json_object_get(*opts, "labels");
    if (l && !json_is_null(l)) {
        const char *k;
        json_t *v;
        if (!json_is_object(l))
            goto bad;
        json_object_foreach(l, k, v)
        {
            if (!json_is_string(v))
                goto bad;
        }
        *labels = l;
    }
    return SBX_OK;
bad:
    json_decref(*opts);
    *opts = NULL;
    return sbx__set_error(err, SBX_EINVAL, "%s: \"labels\" must map names to strings", what);
}

static bool labels_match(const char *labels_json, const json_t *want)
{
    if (!want)
        return true;
    _cleanup_json_ json_t *have = labels_json ? json_loads(labels_json, 0, NULL) : NULL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)want, k, v)
    {
        const char *h = json_string_value(json_object_get(have, k));
        if (!h || strcmp(h, json_string_value(v)) != 0)
            return false;
    }
    return true;
}

/* Every record id of the store (entries that are not box ids are skipped). */
static int record_ids(sbx_box_store *s, int bfd, json_t **ids, sbx_error **err)
{
    int dfd = dup(bfd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return sbx__set_errno(err, SBX_EIO, errno, "cannot list %s", s->boxes);
    }
    *ids = json_array();
    struct dirent *de;
    while (*ids && (de = readdir(d)))
        if (sbx__kit_id_ok(de->d_name))
            json_array_append_new(*ids, json_string(de->d_name));
    closedir(d);
    return *ids ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

static json_t *num_or_null(double v)
{
    return v > 0 ? json_real(v) : json_null();
}

/*
 * A box still being created: its record says so, or (`r` NULL: no record to
 * believe yet) its directory is new, either within CREATE_GRACE_S.
 */
static bool starting(int bfd, const char *id, const sbx_box_record *r, double now)
{
    if (r)
        return r->creating && now - r->created < CREATE_GRACE_S;
    struct stat st;
    if (fstatat(bfd, id, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return false;
    return now - ((double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9) < CREATE_GRACE_S;
}

int sbx_box_store_list(sbx_box_store *s, const char *filter_json, char **out, sbx_error **err)
{
    *out = NULL;
    _cleanup_json_ json_t *opts = NULL;
    json_t *labels = NULL;
    int rc = parse_opts(filter_json, "the list filter", &opts, &labels, err);
    if (rc < 0)
        return rc;
    _cleanup_close_ int bfd = open_boxes(s, err);
    if (bfd < 0)
        return bfd;
    _cleanup_json_ json_t *ids = NULL;
    if ((rc = record_ids(s, bfd, &ids, err)) < 0)
        return rc;
    _cleanup_json_ json_t *arr = json_array();
    double now = now_unix();
    size_t i;
    json_t *idv;
    json_array_foreach(ids, i, idv)
    {
        const char *id = json_string_value(idv);
        sbx_box_record r;
        bool readable = read_at(s, bfd, id, &r, NULL) == SBX_OK;
        if (!readable) {
            /* A box whose record is missing or not to be believed: listed as an error. */
            if (labels)
                continue;
            json_array_append_new(
                arr, json_pack("{s:s, s:s, s:n, s:n, s:{}, s:n, s:n, s:{}}", "id", id, "status",
                               starting(bfd, id, NULL, now) ? "starting" : "error", "created",
                               "expires_at", "labels", "image", "descriptor", "provider"));
            continue;
        }
        if (labels_match(r.labels_json, labels)) {
            bool alive = sbx_box_record_alive(s, &r);
            const char *status = alive                        ? "running"
                                 : starting(bfd, id, &r, now) ? "starting"
                                                              : "error";
            json_t *e = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:n, s:o}", "id", r.id, "status",
                                  status, "created", num_or_null(r.created), "expires_at",
                                  num_or_null(r.expires_at), "labels",
                                  json_text_or(r.labels_json, json_object()), "image",
                                  r.image ? json_string(r.image) : json_null(), "descriptor",
                                  "provider", json_text_or(r.provider_json, json_object()));
            if (e && r.workdir)
                json_object_set_new(json_object_get(e, "provider"), "workdir",
                                    json_string(r.workdir));
            json_array_append_new(arr, e);
        }
        sbx_box_record_clear(&r);
    }
    if (!arr || !(*out = sbx__json_dump(arr)))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}

int sbx_box_store_stop(sbx_box_store *s, const char *id, sbx_error **err)
{
    _cleanup_close_ int bfd = open_boxes(s, err);
    if (bfd < 0)
        return bfd;
    sbx_box_record r;
    sbx_error *e = NULL;
    int rc = read_at(s, bfd, id, &r, &e);
    if (rc == SBX_ENOENT) {
        /* No directory at all: no such box. A directory without its record: a leftover. */
        _cleanup_close_ int fd =
            sbx__kit_id_ok(id) ? openat(bfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                               : -1;
        if (fd < 0) {
            sbx_error_free(e);
            return sbx__set_error(err, SBX_ENOENT, "no box %s", id);
        }
    } else if (rc < 0) {
        if (err)
            *err = e;
        else
            sbx_error_free(e);
        return rc;
    }
    sbx_error_free(e);
    if (rc == SBX_OK) {
        rc = stop_record(s, &r, err);
        sbx_box_record_clear(&r);
        if (rc < 0)
            return rc;
    }
    if (sbx__rm_rf_at(bfd, id) < 0 && errno != ENOENT)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot remove %s/%s", s->boxes, id);
    return SBX_OK;
}

int sbx_box_store_gc(sbx_box_store *s, const char *opts_json, char **out, sbx_error **err)
{
    *out = NULL;
    _cleanup_json_ json_t *opts = NULL;
    json_t *labels = NULL;
    int rc = parse_opts(opts_json, "the gc options", &opts, &labels, err);
    if (rc < 0)
        return rc;
    bool dry = json_is_true(json_object_get(opts, "dry_run"));
    _cleanup_close_ int bfd = open_boxes(s, err);
    if (bfd < 0)
        return bfd;
    _cleanup_json_ json_t *ids = NULL;
    if ((rc = record_ids(s, bfd, &ids, err)) < 0)
        return rc;
    _cleanup_json_ json_t *removed = json_array();
    double now = now_unix();
    size_t i;
    json_t *idv;
    json_array_foreach(ids, i, idv)
    {
        const char *id = json_string_value(idv);
        sbx_box_record r;
        bool readable = read_at(s, bfd, id, &r, NULL) == SBX_OK;
        bool collect;
        if (starting(bfd, id, readable ? &r : NULL, now))
            collect = false; /* a create in flight, maybe in another process */
        else if (!readable)
            collect = true; /* a leftover directory: nothing runs it */
        else
            collect = (r.expires_at > 0 && r.expires_at <= now) || !sbx_box_record_alive(s, &r) ||
                      (labels && labels_match(r.labels_json, labels));
        if (collect && !dry) {
            sbx_error *e = NULL;
            if (readable && stop_record(s, &r, &e) < 0) {
                sbx_log(SBX_LOG_WARNING, "gc: box %s: %s", id, sbx_error_message(e));
                sbx_error_free(e);
                collect = false;
            } else if (sbx__rm_rf_at(bfd, id) < 0 && errno != ENOENT) {
                sbx_log(SBX_LOG_WARNING, "gc: cannot remove %s/%s: %s", s->boxes, id,
                        strerror(errno));
                collect = false;
            }
        }
        if (collect)
            json_array_append_new(removed, json_string(id));
        if (readable)
            sbx_box_record_clear(&r);
    }
    if (!removed || !(*out = sbx__json_dump(removed)))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}

/* --- the same as ops ---------------------------------------------------------- */

enum store_kind { STORE_LIST, STORE_STOP, STORE_GC, STORE_CLOSE };
struct store_call {
    enum store_kind kind;
    sbx_box_store *s;
    char *arg;
};

static void store_work(sbx_op *op, void *data)
{
    struct store_call *k = data;
    sbx_error *e = NULL;
    char *out = NULL;
    int rc = k->kind == STORE_LIST ? sbx_box_store_list(k->s, k->arg, &out, &e)
             : k->kind == STORE_GC ? sbx_box_store_gc(k->s, k->arg, &out, &e)
                                   : sbx_box_store_stop(k->s, k->arg, &e);
    if (rc == SBX_ENOENT && k->kind == STORE_CLOSE) {
        sbx_error_free(e); /* gone already (stopped by id, collected): closed */
        e = NULL;
        rc = SBX_OK;
    }
    free(k->arg);
    free(k);
    if (rc < 0) {
        free(out);
        sbx_op_complete(op, rc, e, NULL);
    } else {
        sbx_op_complete(op, SBX_OK, NULL, out);
    }
}

static void store_op(sbx_op *op, sbx_box_store *s, enum store_kind kind, const char *arg)
{
    struct store_call *k = calloc(1, sizeof(*k));
    if (!k || (arg && !(k->arg = strdup(arg)))) {
        free(k);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    k->kind = kind;
    k->s = s;
    int rc = sbx_op_run_blocking(op, store_work, k);
    if (rc < 0) {
        free(k->arg);
        free(k);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

void sbx_box_op_list(sbx_op *op, sbx_box_store *s, const char *filter_json)
{
    store_op(op, s, STORE_LIST, filter_json);
}

void sbx_box_op_stop_id(sbx_op *op, sbx_box_store *s, const char *id)
{
    store_op(op, s, STORE_STOP, id);
}

void sbx_box_op_gc(sbx_op *op, sbx_box_store *s, const char *opts_json)
{
    store_op(op, s, STORE_GC, opts_json);
}

/* --- create and close ----------------------------------------------------------- */

struct create {
    sbx_op *op;
    sbx_box_store *s;
    sbx_box_pool *pool;
    const sbx_spec *spec;
    char prefix[40];
    sbx_box_start_fn start;
    sbx_box_start_socket_fn start_socket; /* instead of start: the agent listens on a socket */
    void *start_data;
    sbx_box_created_cb cb;
    void *cb_data;
    sbx_box_record rec;
    int fd;
    char *socket;   /* start_socket's agent socket */
    pid_t peer_pid; /* and the process that must listen on it */
    int code;       /* of the failure being cleaned up */
    sbx_error *err; /* its error */
};

static void create_free(struct create *k)
{
    sbx_box_record_clear(&k->rec);
    if (k->fd >= 0)
        close(k->fd);
    sbx_error_free(k->err);
    free(k->socket);
    free(k);
}

/* The end of a failed create, after the cleanup. */
static void create_failed(int code, sbx_error *err, void *value, void *data)
{
    (void)code;
    (void)value;
    struct create *k = data;
    sbx_error_free(err);
    sbx_error *e = k->err;
    k->err = NULL;
    sbx_box_created_cb cb = k->cb;
    void *cb_data = k->cb_data;
    sbx_op *op = k->op;
    int c = k->code;
    create_free(k);
    cb(op, NULL, NULL, c, e, cb_data);
}

static void cleanup_work(sbx_op *op, void *data)
{
    struct create *k = data;
    sbx_error *e = NULL;
    if (k->rec.id && sbx_box_store_stop(k->s, k->rec.id, &e) < 0 && sbx_error_code(e) != SBX_ENOENT)
        sbx_log(SBX_LOG_WARNING, "create failed, and cleaning up box %s failed too: %s", k->rec.id,
                sbx_error_message(e));
    sbx_error_free(e);
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

/* Fails the create after ending what it started (on the worker pool). */
static void create_fail(struct create *k, int code, sbx_error *err)
{
    k->code = code < 0 ? code : SBX_ECREATE;
    k->err = err ? err : sbx_error_new(k->code, "creating the box failed");
    if (k->fd >= 0) {
        close(k->fd);
        k->fd = -1;
    }
    sbx_op *inner = k->rec.id ? sbx__op_new(sbx__op_provider(k->op), create_failed, k) : NULL;
    if (inner && sbx_op_run_blocking(inner, cleanup_work, k) == SBX_OK)
        return;
    if (inner)
        sbx_op_complete(inner, SBX_OK, NULL, NULL);
    else
        create_failed(SBX_OK, NULL, NULL, k);
}

static void create_ready(sbx_box_agent *agent, int code, sbx_error *err, void *data)
{
    struct create *k = data;
    k->fd = -1; /* the open took it */
    if (!agent) {
        create_fail(k, code == SBX_ETIMEDOUT ? SBX_ETIMEDOUT : SBX_ECREATE,
                    sbx_error_prefix(err, "box %s: its agent did not become ready", k->rec.id));
        return;
    }
    if (sbx_op_cancelled(k->op)) {
        sbx_box_agent_free(agent);
        create_fail(k, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "create cancelled"));
        return;
    }
    sbx_box_created_cb cb = k->cb;
    void *cb_data = k->cb_data;
    sbx_op *op = k->op;
    sbx_box_record rec = k->rec;
    memset(&k->rec, 0, sizeof(k->rec));
    create_free(k);
    cb(op, agent, &rec, SBX_OK, NULL, cb_data);
    sbx_box_record_clear(&rec);
}

static void create_started(int code, sbx_error *err, void *value, void *data)
{
    (void)value;
    struct create *k = data;
    if (code < 0) {
        create_fail(k, code, err);
        return;
    }
    sbx_error_free(err);
    if (sbx_op_cancelled(k->op)) {
        create_fail(k, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "create cancelled"));
        return;
    }
    double t = 60.0;
    if (!sbx_spec_get_ready_timeout(k->spec, &t) || t <= 0)
        t = 60.0;
    if (k->socket) {
        sbx_box_agent_open_socket(k->op, k->pool, k->socket, k->peer_pid, t, k->rec.workdir,
                                  create_ready, k);
        return;
    }
    int fd = k->fd;
    sbx_box_agent_open_fd(k->op, k->pool, fd, t, k->rec.workdir, create_ready, k);
}

static void create_work(sbx_op *op, void *data)
{
    struct create *k = data;
    sbx_error *e = NULL;
    char id[128];
    int rc = sbx_box_new_id(k->prefix, id, sizeof(id));
    if (rc < 0) {
        sbx_op_complete(op, rc, sbx_error_new(rc, "'%s' cannot start a box id", k->prefix), NULL);
        return;
    }
    if ((rc = sbx_box_record_init(&k->rec, id, k->spec)) < 0) {
        sbx_op_complete(op, rc, NULL, NULL);
        return;
    }
    _cleanup_free_ char *dir = NULL;
    if ((rc = sbx_box_store_box_dir(k->s, id, &dir, &e)) < 0) {
        sbx_op_complete(op, rc, e, NULL);
        return;
    }
    /*
     * The record first, marked creating (no pid yet): a gc meanwhile leaves
     * it alone, and a crash from here on leaves a box a later gc finds.
     */
    k->rec.creating = 1;
    if ((rc = sbx_box_record_write(k->s, &k->rec, &e)) < 0 ||
        (rc = k->start_socket ? k->start_socket(&k->rec, dir, k->spec, k->start_data,
                                                &k->socket, &k->peer_pid, &e)
                              : k->start(&k->rec, dir, k->spec, k->start_data, &k->fd, &e)) < 0) {
        sbx_op_complete(op, rc, e, NULL);
        return;
    }
    if (k->rec.pid > 0)
        k->rec.pid_start = sbx__kit_proc_start(k->rec.pid);
    k->rec.creating = 0;
    if ((rc = sbx_box_record_write(k->s, &k->rec, &e)) < 0) {
        sbx_op_complete(op, rc, e, NULL);
        return;
    }
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

static void op_create(sbx_op *op, sbx_box_store *s, sbx_box_pool *pool, const sbx_spec *spec,
                      const char *id_prefix, sbx_box_start_fn start,
                      sbx_box_start_socket_fn start_socket, void *start_data,
                      sbx_box_created_cb cb, void *cb_data)
{
    struct create *k = calloc(1, sizeof(*k));
    if (!k) {
        cb(op, NULL, NULL, SBX_ENOMEM, sbx_error_new(SBX_ENOMEM, "out of memory"), cb_data);
        return;
    }
    *k = (struct create){.op = op,
                         .s = s,
                         .pool = pool,
                         .spec = spec,
                         .start = start,
                         .start_socket = start_socket,
                         .start_data = start_data,
                         .cb = cb,
                         .cb_data = cb_data,
                         .fd = -1};
    snprintf(k->prefix, sizeof(k->prefix), "%s", id_prefix ? id_prefix : "box");
    sbx_op *inner = sbx__op_new(sbx__op_provider(op), create_started, k);
    if (!inner) {
        create_free(k);
        cb(op, NULL, NULL, SBX_ENOMEM, sbx_error_new(SBX_ENOMEM, "out of memory"), cb_data);
        return;
    }
    if (sbx_op_run_blocking(inner, create_work, k) < 0)
        sbx_op_complete(inner, SBX_EIO, sbx_error_new(SBX_EIO, "cannot queue the create"), NULL);
}

void sbx_box_op_create(sbx_op *op, sbx_box_store *s, sbx_box_pool *pool, const sbx_spec *spec,
                       const char *id_prefix, sbx_box_start_fn start, void *start_data,
                       sbx_box_created_cb cb, void *cb_data)
{
    op_create(op, s, pool, spec, id_prefix, start, NULL, start_data, cb, cb_data);
}

void sbx_box_op_create_socket(sbx_op *op, sbx_box_store *s, sbx_box_pool *pool,
                              const sbx_spec *spec, const char *id_prefix,
                              sbx_box_start_socket_fn start, void *start_data,
                              sbx_box_created_cb cb, void *cb_data)
{
    op_create(op, s, pool, spec, id_prefix, NULL, start, start_data, cb, cb_data);
}

void sbx_box_op_close(sbx_op *op, sbx_box_store *s, sbx_box_agent *agent, const char *id)
{
    sbx_box_agent_free(agent);
    store_op(op, s, STORE_CLOSE, id);
}
