/*
 * Box records in the state directory, listing, stopping and garbage
 * collection. The shim owns a box's directory while it runs; these functions
 * only read records, signal shims, and clean up after shims that died.
 */
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

char *sbx__linux_state_dir(const char *override)
{
    /*
     * Canonical (links resolved, no "//"): descriptors carry it, connect
     * requires it canonical, and shims are matched by the box directory
     * on their command line.
     */
    char *p = sbx__kit_state_dir_spelled("linux", override);
    char *c = p && p[0] == '/' ? sbx__canonical_path(p) : NULL;
    if (!c)
        return p; /* relative or unresolvable: refused where it is used, with the reason */
    free(p);
    return c;
}

void sbx__linux_record_free(sbx_linux_record *r)
{
    if (!r)
        return;
    free(r->id);
    free(r->box_dir);
    free(r->image);
    free(r->state);
    free(r->service);
    free(r->hostname);
    free(r->socket);
    free(r->workdir);
    json_decref(r->env);
    json_decref(r->metadata);
    json_decref(r->cgroups);
    json_decref(r->ports); /* [endpoint] */
    memset(r, 0, sizeof(*r));
}

static char *jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? strdup(s) : NULL;
}

bool sbx__linux_id_ok(const char *id) { return sbx__kit_id_ok(id); }

/*
 * The box directory and the record in it are checked before a byte is
 * believed: the directory (not a link) and the record (a regular file,
 * opened without following a link) belong to the caller and nobody else
 * can write them, the record is at most SBX_RECORD_MAX bytes, its id is the
 * directory's name, and every cgroup it names is that box's own group under
 * a cgroup mount. The agent socket's path is not read from it at all.
 */
int sbx__linux_record_read(const char *box_dir, sbx_linux_record *rec, sbx_error **err)
{
    _cleanup_free_ char *path = sbx__printf("%s/record.json", box_dir);
    const char *slash = strrchr(box_dir, '/');
    const char *name = slash ? slash + 1 : box_dir;
    if (!path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!sbx__linux_id_ok(name))
        return sbx__set_error(err, SBX_EINVAL, "%s is not a box directory (bad box id)", box_dir);
    _cleanup_close_ int dfd = open(box_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return sbx__set_errno(err, SBX_ENOENT, errno, "no box directory at %s%s", box_dir,
                              errno == ELOOP || errno == ENOTDIR ? " (a link: refused)" : "");
    struct stat st;
    if (fstat(dfd, &st) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot stat %s", box_dir);
    if (st.st_uid != geteuid() || (st.st_mode & 022))
        return sbx__set_error(err, SBX_EPERM,
                              "the box directory %s belongs to uid %u with mode %04o: sbx uses "
                              "only directories of its caller (uid %u) that nobody else can "
                              "write; remove it",
                              box_dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                              (unsigned)geteuid());
    _cleanup_free_ char *text = NULL;
    size_t n = 0;
    int rc = sbx__read_private_file(dfd, "record.json", path, SBX_RECORD_MAX, &text, &n, err);
    if (rc < 0)
        return rc;
    json_error_t je;
    _cleanup_json_ json_t *j = json_loadb(text, n, 0, &je);
    if (!json_is_object(j))
        return sbx__set_error(err, SBX_ENOENT, "no readable box record at %s: %s", path,
                              j ? "not an object" : je.text);
    memset(rec, 0, sizeof(*rec));
    rec->id = jstr(j, "id");
    rec->box_dir = strdup(box_dir);
    rec->image = jstr(j, "image");
    rec->state = jstr(j, "state");
    rec->hostname = jstr(j, "hostname");
    rec->socket = sbx__printf("%s/run/agent.sock", box_dir);
    rec->workdir = jstr(j, "workdir");
    rec->created = json_number_value(json_object_get(j, "created"));
    json_t *ttl = json_object_get(j, "ttl_s");
    rec->ttl_s = json_is_number(ttl) ? json_number_value(ttl) : -1;
    rec->expires = json_number_value(json_object_get(j, "expires_at"));
    json_int_t pid = json_integer_value(json_object_get(j, "shim_pid"));
    rec->shim_pid = pid > 0 && pid <= INT_MAX ? (pid_t)pid : 0;
    rec->shim_start = (unsigned long long)json_integer_value(json_object_get(j, "shim_start"));
    rec->init_pid = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
    json_t *md = json_object_get(j, "metadata");
    rec->metadata = json_is_object(md) ? json_incref(md) : json_object();
    json_t *env = json_object_get(j, "env");
    rec->env = json_is_array(env) ? json_incref(env) : json_array();
    json_t *cg = json_object_get(j, "cgroups");
    rec->cgroups = json_is_array(cg) ? json_incref(cg) : json_array();
    /* [svc-logs] The service's end, as the shim recorded it. */
    json_t *svc = json_object_get(j, "service");
    rec->service = jstr(svc, "state");
    json_int_t code = json_integer_value(json_object_get(svc, "code"));
    rec->service_code = code >= 0 && code <= 255 ? (int)code : 0;
    /* [endpoint] Published ports; each entry is checked where it is used (provider.c). */
    json_t *ports = json_object_get(j, "ports");
    rec->ports = json_is_array(ports) ? json_incref(ports) : NULL;
    if (!rec->id || !rec->box_dir || !rec->metadata || !rec->cgroups || !rec->env ||
        !rec->socket) {
        sbx__linux_record_free(rec);
        return sbx__set_error(err, SBX_EIO, "box record %s is incomplete", path);
    }
    if (strcmp(rec->id, name) != 0) {
        sbx__set_error(err, SBX_EINVAL, "box record %s names box '%s', not '%s': refused", path,
                       rec->id, name);
        sbx__linux_record_free(rec);
        return SBX_EINVAL;
    }
    size_t i;
    json_t *p;
    json_array_foreach(rec->cgroups, i, p)
    {
        if (!sbx__cg_path_ok(json_string_value(p), rec->id)) {
            sbx__set_error(err, SBX_EINVAL,
                           "box record %s names the cgroup '%s', which is not box %s's own group "
                           "(<cgroup mount>/%s/%s): refused",
                           path, json_string_value(p) ? json_string_value(p) : "(not a string)",
                           rec->id, sbx__cg_name(), rec->id);
            sbx__linux_record_free(rec);
            return SBX_EINVAL;
        }
    }
    return SBX_OK;
}

unsigned long long sbx__linux_proc_start(pid_t pid) { return sbx__kit_proc_start(pid); }

/*
 * Whether `pid` is an sbx-shim of the caller's supervising `box_dir` (and,
 * when `start` is not 0, the one started then): its owner, its executable's
 * name and its command line `sbx-shim --box-dir DIR` with DIR that very
 * directory. A record could name any process; only a shim is ever signalled.
 */
static bool is_shim_of(pid_t pid, unsigned long long start, const char *box_dir)
{
    if (pid <= 0)
        return false;
    if (start && sbx__linux_proc_start(pid) != start)
        return false;
    char p[64];
    struct stat st;
    snprintf(p, sizeof(p), "/proc/%d", (int)pid);
    if (stat(p, &st) < 0 || st.st_uid != geteuid())
        return false;
    char exe[PATH_MAX];
    snprintf(p, sizeof(p), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(p, exe, sizeof(exe) - 1);
    if (n <= 0)
        return false;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    if (strncmp(base, "sbx-shim", 8) != 0)
        return false;
    snprintf(p, sizeof(p), "/proc/%d/cmdline", (int)pid);
    _cleanup_free_ char *cmd = NULL;
    size_t len = 0;
    if (sbx__read_file(p, &cmd, &len) < 0 || len == 0)
        return false;
    /* argv: sbx-shim, --box-dir, DIR */
    const char *a1 = memchr(cmd, 0, len);
    if (!a1 || (size_t)(++a1 - cmd) >= len || strcmp(a1, "--box-dir") != 0)
        return false;
    const char *a2 = a1 + strlen(a1) + 1;
    if ((size_t)(a2 - cmd) >= len)
        return false;
    if (!strcmp(a2, box_dir))
        return true;
    /* The same directory spelled otherwise (a link in the state directory's path). */
    struct stat x, y;
    return stat(a2, &x) == 0 && stat(box_dir, &y) == 0 && x.st_dev == y.st_dev &&
           x.st_ino == y.st_ino;
}

int sbx__linux_shim_pidfd(const sbx_linux_record *rec, int *pidfd)
{
    *pidfd = -1;
    if (!rec->box_dir || rec->shim_pid <= 0 || rec->shim_start == 0)
        return 0;
    int pfd = sbx__linux_pidfd_open(rec->shim_pid);
    if (pfd < 0 && errno != ENOSYS)
        return 0; /* gone */
    if (!is_shim_of(rec->shim_pid, rec->shim_start, rec->box_dir)) {
        if (pfd >= 0)
            close(pfd);
        return 0;
    }
    /*
     * The checks read /proc/PID; the pidfd was opened before them. If the
     * process it pins is still alive now, the pid was never reused in
     * between, so what was checked is what the pidfd signals.
     */
    if (pfd >= 0 && syscall(SYS_pidfd_send_signal, pfd, 0, NULL, 0) < 0) {
        close(pfd);
        return 0;
    }
    *pidfd = pfd;
    return 1;
}

bool sbx__linux_shim_alive(const sbx_linux_record *rec)
{
    int pfd;
    if (!sbx__linux_shim_pidfd(rec, &pfd))
        return false;
    if (pfd >= 0)
        close(pfd);
    return true;
}

bool sbx__linux_box_paused(const sbx_linux_record *rec)
{
    if (!rec || rec->init_pid <= 1 || rec->shim_pid <= 0)
        return false;
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)rec->init_pid);
    _cleanup_free_ char *t = NULL;
    size_t n = 0;
    if (sbx__read_file(p, &t, &n) < 0)
        return false;
    /* "pid (comm) S ppid ...": comm may hold anything, so from its last ')'. */
    const char *e = strrchr(t, ')');
    char state = 0;
    long ppid = 0;
    if (!e || sscanf(e + 1, " %c %ld", &state, &ppid) != 2)
        return false;
    /* Still the shim's child: the pid was not reused by another process since the record. */
    if (ppid != (long)rec->shim_pid)
        return false;
    /* Stopped (SIGSTOP, or by a tracer): it reads no request until continued. */
    if (state == 'T' || state == 't')
        return true;
    return sbx__cg_pid_frozen(rec->init_pid);
}

static bool labels_match(const json_t *md, const sbx_kv *labels)
{
    if (!labels)
        return true;
    for (size_t i = 0; i < labels->len; i++) {
        const char *v = json_string_value(json_object_get(md, labels->keys[i]));
        if (!v || strcmp(v, labels->values[i]) != 0)
            return false;
    }
    return true;
}

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void sbx__linux_list_free(sbx_linux_box_info *boxes, size_t n)
{
    for (size_t i = 0; boxes && i < n; i++)
        sbx__linux_record_free(&boxes[i].rec);
    free(boxes);
}

/* sbx__private_dir without creating; a directory that does not exist is no error. */
static int private_or_absent(const char *path, bool *absent, sbx_error **err)
{
    sbx_error *e = NULL;
    *absent = false;
    if (sbx__private_dir(path, false, NULL, &e) == SBX_OK)
        return SBX_OK;
    int code = sbx_error_code(e);
    if (code == SBX_ENOENT) {
        *absent = true;
        sbx_error_free(e);
        return SBX_OK;
    }
    if (err)
        *err = e;
    else
        sbx_error_free(e);
    return code;
}

int sbx__linux_list(const char *state_dir, const sbx_kv *labels, sbx_linux_box_info **out,
                    size_t *n_out, sbx_error **err)
{
    *out = NULL;
    *n_out = 0;
    /* A state directory someone else made or can write is refused, not listed. */
    _cleanup_free_ char *dir = sbx__printf("%s/boxes", state_dir);
    if (!dir)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    bool absent = false;
    int rc = private_or_absent(state_dir, &absent, err);
    if (rc == SBX_OK && !absent)
        rc = private_or_absent(dir, &absent, err);
    if (rc < 0 || absent)
        return rc;
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) {
        if (errno == ENOENT)
            return SBX_OK;
        return sbx__set_errno(err, SBX_EIO, errno, "cannot list %s", dir ? dir : state_dir);
    }
    sbx_linux_box_info *v = NULL;
    size_t n = 0;
    double now = now_unix();
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !sbx__linux_id_ok(de->d_name))
            continue;
        _cleanup_free_ char *bd = sbx__printf("%s/%s", dir, de->d_name);
        sbx_linux_record rec;
        if (!bd)
            continue;
        if (sbx__linux_record_read(bd, &rec, NULL) < 0) {
            /*
             * A shim that died before writing its record, or a record that
             * is not to be believed: listed as an orphan with no pid and no
             * cgroups to trust (gc finds its shim and groups by their names).
             */
            memset(&rec, 0, sizeof(rec));
            rec.id = strdup(de->d_name);
            rec.box_dir = strdup(bd);
            rec.state = strdup("creating");
            rec.ttl_s = -1;
            rec.metadata = json_object();
            rec.cgroups = json_array();
            rec.env = json_array();
        }
        if (!labels_match(rec.metadata, labels)) {
            sbx__linux_record_free(&rec);
            continue;
        }
        sbx_linux_box_info *nv = realloc(v, (n + 1) * sizeof(*v));
        if (!nv) {
            sbx__linux_record_free(&rec);
            break;
        }
        v = nv;
        v[n].rec = rec;
        v[n].shim_alive = sbx__linux_shim_alive(&rec);
        v[n].expired = rec.expires > 0 && rec.expires <= now;
        n++;
    }
    closedir(d);
    *out = v;
    *n_out = n;
    return SBX_OK;
}

/* The cgroup paths a box may have, whether or not its record got written. */
static json_t *guess_cgroups(const char *id)
{
    json_t *a = json_array();
    const char *const *parents = sbx__cg_parents();
    for (size_t i = 0; a && parents[i]; i++) {
        char *p = sbx__printf("%s/%s", parents[i], id);
        struct stat st;
        if (p && stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            json_array_append_new(a, json_string(p));
        free(p);
    }
    return a;
}

int sbx__linux_remove_leftovers(const char *box_dir, const sbx_linux_record *rec)
{
    /*
     * Thawed first (freeze.c): a frozen process is not killed by the
     * removal of its groups (cgroup v1), so a box a commit left frozen
     * would keep them busy for good.
     */
    if (rec && rec->id)
        sbx__cg_thaw(rec->id, rec->cgroups);
    /* Only a box's own groups: sbx__cg_destroy refuses any other path too. */
    if (rec && rec->cgroups && rec->id) {
        json_t *own = json_array();
        size_t i;
        json_t *p;
        json_array_foreach(rec->cgroups, i, p)
        {
            if (own && sbx__cg_path_ok(json_string_value(p), rec->id))
                json_array_append(own, p);
        }
        if (own)
            sbx__cg_destroy(own);
        json_decref(own);
    }
    if (rec && rec->id && sbx__linux_id_ok(rec->id)) {
        json_t *g = guess_cgroups(rec->id);
        if (g)
            sbx__cg_destroy(g);
        json_decref(g);
    }
    /* [netw] Its network peers forget it, if its shim could not tell them. */
    if (rec && rec->id)
        sbx__linux_net_forget(box_dir, rec->id);
    /*
     * The box's mounts lived in its own mount namespace and died with it; the
     * directory holds only the record, the socket and an empty mount point.
     * sbx__rm_rf never crosses into another mount, should one be there.
     */
    return sbx__rm_rf(box_dir);
}

int sbx__linux_pidfd_open(pid_t pid) { return sbx__kit_pidfd_open(pid); }

/*
 * Sends SIGTERM to a live shim and waits for it to exit. The shim is
 * identified (sbx__linux_shim_pidfd: owner, executable, command line naming
 * this box's directory, start time) through a pidfd that then carries the
 * signal: a record naming another process gets nothing signalled.
 */
static int stop_shim(const sbx_linux_record *rec, double timeout_s, sbx_error **err)
{
    int pfd_raw = -1;
    if (!sbx__linux_shim_pidfd(rec, &pfd_raw))
        return SBX_OK; /* gone already, or not a shim of this box: nothing to signal */
    _cleanup_close_ int pfd = pfd_raw;
    /* Without pidfds (Linux < 5.3, valgrind) kill() leaves a small pid-reuse window. */
    int sent = pfd >= 0 ? (int)syscall(SYS_pidfd_send_signal, pfd, SIGTERM, NULL, 0)
                        : kill(rec->shim_pid, SIGTERM);
    if (sent < 0 && errno != ESRCH)
        return sbx__set_errno(err, SBX_EPROVIDER, errno, "cannot signal the shim of box %s",
                              rec->id);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (pfd >= 0) {
            /* A pidfd becomes readable when the process exits (Linux 5.3+). */
            struct pollfd p = { .fd = pfd, .events = POLLIN };
            if (poll(&p, 1, 100) > 0)
                return SBX_OK;
        } else {
            if (sbx__linux_proc_start(rec->shim_pid) != rec->shim_start)
                return SBX_OK;
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9;
        /* The deadline covers the shim's own teardown, not its wait for a slot. */
        if (timeout_s >= 0 && el > timeout_s &&
            sbx__linux_stop_time_left(rec->box_dir, rec->shim_pid, timeout_s, el) <= 0)
            return sbx__set_error(err, SBX_ETIMEDOUT,
                                  "the shim of box %s (pid %d) did not finish within %.0fs",
                                  rec->id, (int)rec->shim_pid, timeout_s);
    }
}

/* --- what exists: shims and cgroups, whatever the records say ------------- */

typedef struct {
    pid_t pid;
    unsigned long long start;
    char *box_dir;
    bool verified; /* ours, by owner and executable: may be signalled */
} shim_proc;

static void shim_procs_free(shim_proc *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].box_dir);
    free(v);
}

/*
 * Every process that calls itself sbx-shim, from /proc: its pid, start time
 * and the box directory on its command line, and whether it is verifiably
 * the caller's shim (only those are ever signalled; the others still keep
 * their cgroups from being collected).
 */
static shim_proc *find_shims(size_t *n_out)
{
    *n_out = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return NULL;
    shim_proc *v = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 1)
            continue;
        char p[64];
        snprintf(p, sizeof(p), "/proc/%ld/cmdline", pid);
        char *cmd = NULL;
        size_t len = 0;
        if (sbx__read_file(p, &cmd, &len) < 0)
            continue;
        /* argv: .../sbx-shim --box-dir DIR */
        const char *a0 = strrchr(cmd, '/');
        a0 = a0 ? a0 + 1 : cmd;
        const char *a1 = memchr(cmd, 0, len);
        const char *a2 = a1 && (size_t)(a1 + 1 - cmd) < len ? a1 + 1 + strlen(a1 + 1) + 1 : NULL;
        unsigned long long start = sbx__linux_proc_start((pid_t)pid);
        if (!strncmp(a0, "sbx-shim", 8) && a2 && (size_t)(a2 - cmd) < len &&
            !strcmp(a1 + 1, "--box-dir") && start) {
            shim_proc *nv = realloc(v, (n + 1) * sizeof(*v));
            if (nv) {
                v = nv;
                v[n] = (shim_proc){ (pid_t)pid, start, strdup(a2),
                                    is_shim_of((pid_t)pid, start, a2) };
                n++;
            }
        }
        free(cmd);
    }
    closedir(d);
    *n_out = n;
    return v;
}

/* The (verified) shim whose box directory is `box_dir`, or NULL. */
static const shim_proc *shim_of_dir(const shim_proc *v, size_t n, const char *box_dir)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].verified && v[i].box_dir && !strcmp(v[i].box_dir, box_dir))
            return &v[i];
    return NULL;
}

/* Whether some shim (of any state directory) supervises a box named `id`. */
static bool shim_of_id(const shim_proc *v, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++) {
        const char *slash = v[i].box_dir ? strrchr(v[i].box_dir, '/') : NULL;
        if (slash && !strcmp(slash + 1, id))
            return true;
    }
    return false;
}

/* Seconds since a process started (from its start time in clock ticks since boot). */
static double proc_age(unsigned long long start)
{
    char *up = NULL;
    double uptime = 0;
    if (sbx__read_file("/proc/uptime", &up, NULL) == 0)
        uptime = strtod(up, NULL);
    free(up);
    long hz = sysconf(_SC_CLK_TCK);
    return uptime - (double)start / (double)(hz > 0 ? hz : 100);
}

int sbx__linux_stop_box(const char *state_dir, const char *id, double timeout_s, sbx_error **err)
{
    if (!sbx__linux_id_ok(id))
        return sbx__set_error(err, SBX_EINVAL, "invalid box id '%s' (letters, digits, '-', '_' "
                                               "and '.', not starting with '.' or '-')",
                              id ? id : "(null)");
    _cleanup_free_ char *boxes = sbx__printf("%s/boxes", state_dir);
    bool absent = false;
    int rc = boxes ? private_or_absent(state_dir, &absent, err) : SBX_ENOMEM;
    if (rc == SBX_OK && !absent)
        rc = private_or_absent(boxes, &absent, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *bd = sbx__printf("%s/boxes/%s", state_dir, id);
    struct stat st;
    if (absent || !bd || lstat(bd, &st) < 0)
        return sbx__set_error(err, SBX_ENOENT, "no box %s in %s", id, state_dir);
    sbx_linux_record rec;
    sbx_error *re = NULL;
    if (sbx__linux_record_read(bd, &rec, &re) < 0) {
        int code = sbx_error_code(re);
        /* A record that is there but not to be believed: say so, touch nothing. */
        if (code == SBX_EPERM || code == SBX_EINVAL) {
            if (err)
                *err = re;
            else
                sbx_error_free(re);
            return code;
        }
        sbx_error_free(re);
        memset(&rec, 0, sizeof(rec));
        rec.id = strdup(id);
        rec.box_dir = strdup(bd);
    }
    rc = SBX_OK;
    if (rec.shim_pid > 0 && sbx__linux_shim_alive(&rec)) {
        rc = stop_shim(&rec, timeout_s, err);
    } else if (!rec.shim_pid) {
        /* No record: its shim, if one runs, is found by its command line. */
        size_t ns = 0;
        shim_proc *v = find_shims(&ns);
        const shim_proc *sp = shim_of_dir(v, ns, bd);
        if (sp) {
            sbx_linux_record r2 = { .id = rec.id, .box_dir = bd, .shim_pid = sp->pid,
                                    .shim_start = sp->start };
            rc = stop_shim(&r2, timeout_s, err);
        }
        shim_procs_free(v, ns);
    }
    /* The shim removes everything on its way out; this catches a shim that died. */
    if (rc == SBX_OK && lstat(bd, &st) == 0 && !sbx__linux_shim_alive(&rec))
        sbx__linux_remove_leftovers(bd, &rec);
    sbx__linux_record_free(&rec);
    return rc;
}

/* --- boxes being created: the create lock ---------------------------------- */

static char *create_lock_path(const char *state_dir, const char *id)
{
    return sbx__printf("%s/creating/%s", state_dir, id);
}

/* A write lock on the whole file: an OFD lock, so it goes with this open file, not the process. */
static int lock_whole(int fd, bool wait)
{
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    int r;
    while ((r = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl)) < 0 && errno == EINTR)
        ;
    return r;
}

int sbx__linux_create_lock(const char *state_dir, const char *id, sbx_error **err)
{
    _cleanup_free_ char *dir = sbx__printf("%s/creating", state_dir);
    _cleanup_free_ char *path = create_lock_path(state_dir, id);
    if (!dir || !path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = sbx__private_dir(dir, true, NULL, err);
    if (rc < 0)
        return rc;
    for (;;) {
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "cannot create the create lock %s",
                                  path);
        if (lock_whole(fd, true) < 0) {
            /*
             * A filesystem without locks: the create goes on unguarded (gc
             * then relies on its grace period alone, as before locks).
             */
            sbx_log(SBX_LOG_DEBUG, "linux: cannot lock %s: %s", path, strerror(errno));
            return fd;
        }
        /*
         * gc removes a lock file it could lock (its creator died). If it
         * removed this one while we waited, the lock we hold guards nothing
         * any more: make the file anew.
         */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino)
            return fd;
        close(fd);
    }
}

void sbx__linux_create_unlock(const char *state_dir, const char *id, int *fd)
{
    if (*fd < 0)
        return;
    /* Removed while still locked: nobody can take a lock on it and find it gone. */
    _cleanup_free_ char *path = create_lock_path(state_dir, id);
    if (path)
        unlink(path);
    close(*fd);
    *fd = -1;
}

bool sbx__linux_creating(const char *state_dir, const char *id)
{
    _cleanup_free_ char *path = sbx__linux_id_ok(id) ? create_lock_path(state_dir, id) : NULL;
    _cleanup_close_ int fd = path ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd < 0)
        return false;
    /* Asks without taking the lock: a creator waiting for it is never held up. */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

/* Lock files whose creator died mid-create (the lock went with it): removed under the lock. */
static void sweep_create_locks(const char *state_dir)
{
    _cleanup_free_ char *dir = sbx__printf("%s/creating", state_dir);
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!sbx__linux_id_ok(de->d_name))
            continue;
        int fd = openat(dirfd(d), de->d_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (lock_whole(fd, false) == 0)
            unlinkat(dirfd(d), de->d_name, 0);
        close(fd);
    }
    if (d)
        closedir(d);
}

static int push_id(char ***v, size_t *n, const char *id)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp((*v)[i], id))
            return 0; /* once per box */
    char **nv = realloc(*v, (*n + 2) * sizeof(char *));
    if (!nv)
        return -1;
    *v = nv;
    nv[*n] = strdup(id);
    nv[*n + 1] = NULL;
    (*n)++;
    return 0;
}

/* How long a box directory or shim may go without a record before gc calls it abandoned. */
#define GC_GRACE_S 30.0

int sbx__linux_gc(const char *state_dir, const sbx_linux_gc_opts *opts, char ***removed,
                  sbx_error **err)
{
    sbx_linux_gc_opts o = { 0 };
    if (opts)
        o = *opts;
    if (o.stop_timeout_s <= 0)
        o.stop_timeout_s = 10;
    if (o.grace_s <= 0)
        o.grace_s = GC_GRACE_S;
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    int rc = sbx__linux_list(state_dir, NULL, &boxes, &n, err);
    if (rc < 0)
        return rc;
    char **ids = NULL;
    size_t nid = 0;
    double now = now_unix();
    size_t ns = 0;
    shim_proc *shims = find_shims(&ns);
    for (size_t i = 0; i < n; i++) {
        sbx_linux_record *r = &boxes[i].rec;
        bool by_label = o.labels && o.labels->len && labels_match(r->metadata, o.labels);
        bool orphan = !boxes[i].shim_alive;
        /*
         * No (believable) record: a box whose shim is starting right now, or
         * one whose record never came or was lost. Its shim is found by its
         * command line; past a grace period (a shim writes its record within
         * milliseconds) the box is abandoned either way: its shim is stopped
         * and what it left is removed.
         */
        const shim_proc *sp = r->shim_pid <= 0 ? shim_of_dir(shims, ns, r->box_dir) : NULL;
        if (orphan && r->shim_pid <= 0) {
            struct stat st;
            bool young = lstat(r->box_dir, &st) == 0 && now - (double)st.st_mtime < o.grace_s;
            if (sp && proc_age(sp->start) < o.grace_s)
                young = true;
            if (young)
                orphan = false;
        }
        if (!orphan && !boxes[i].expired && !by_label)
            continue;
        /*
         * Being created (listed first, then its lock found held): its creator
         * is alive and sees it through, or tears it down. Never touched, not
         * even by label or TTL.
         */
        if (sbx__linux_creating(state_dir, r->id))
            continue;
        /*
         * Gone since it was listed (a stop, its TTL, a failed create): nothing
         * of it is left to collect. A shim still ending is hurried below.
         */
        struct stat bst;
        if (lstat(r->box_dir, &bst) < 0 && errno == ENOENT)
            continue;
        if (!o.dry_run) {
            if (boxes[i].shim_alive) {
                stop_shim(r, o.stop_timeout_s, NULL);
            } else if (sp) {
                sbx_linux_record r2 = { .id = r->id, .box_dir = r->box_dir,
                                        .shim_pid = sp->pid, .shim_start = sp->start };
                stop_shim(&r2, o.stop_timeout_s, NULL);
            }
            if (!sbx__linux_shim_alive(r))
                sbx__linux_remove_leftovers(r->box_dir, r);
        }
        push_id(&ids, &nid, r->id);
    }
    /*
     * Shims of this state directory whose box directory is gone: one that is
     * ending (a stop, a failed create, its directory removed under it) ends
     * itself within seconds (it watches the directory); this only hurries it,
     * and it is not reported: nothing of its box is left to remove. One whose
     * box is being created has not made its directory yet: left alone.
     * Then cgroups named for a box that no shim anywhere supervises
     * (its shim was killed): the box's processes in them are killed and the
     * groups removed. A group whose shim runs, whatever state directory it
     * belongs to, is left alone.
     */
    _cleanup_free_ char *prefix = sbx__printf("%s/boxes/", state_dir);
    for (size_t i = 0; prefix && i < ns; i++) {
        if (!shims[i].verified || !shims[i].box_dir ||
            strncmp(shims[i].box_dir, prefix, strlen(prefix)) != 0)
            continue;
        struct stat st;
        if (lstat(shims[i].box_dir, &st) == 0 || errno != ENOENT)
            continue;
        const char *id = strrchr(shims[i].box_dir, '/') + 1;
        bool handled = false;
        for (size_t j = 0; j < nid; j++)
            handled |= !strcmp(ids[j], id);
        if (handled || sbx__linux_creating(state_dir, id))
            continue; /* stopped above (its directory went with it), or being created */
        /* Its create may have ended (handed over) since the look above: look again. */
        if (lstat(shims[i].box_dir, &st) == 0 || errno != ENOENT)
            continue;
        if (!o.dry_run) {
            sbx_linux_record r2 = { .id = (char *)id, .box_dir = shims[i].box_dir,
                                    .shim_pid = shims[i].pid, .shim_start = shims[i].start };
            stop_shim(&r2, o.stop_timeout_s, NULL);
        }
    }
    /*
     * v1 freezer groups (a commit's) of boxes no shim supervises: thawed,
     * their processes moved back and the groups removed, before the
     * sweep below kills those processes (a frozen one would not die).
     */
    _cleanup_free_ char *fz = geteuid() == 0 ? sbx__cg_v1_freezer_group(NULL) : NULL;
    DIR *fdir = fz ? opendir(fz) : NULL;
    struct dirent *fe;
    while (fdir && (fe = readdir(fdir))) {
        if (fe->d_type != DT_DIR || !sbx__linux_id_ok(fe->d_name) ||
            shim_of_id(shims, ns, fe->d_name))
            continue;
        _cleanup_free_ char *g = sbx__printf("%s/%s", fz, fe->d_name);
        struct stat st;
        /* As below: a group made this instant by a commit of a box being listed is left. */
        if (!g || stat(g, &st) < 0 || now - (double)st.st_mtime < 2)
            continue;
        if (!o.dry_run)
            sbx__cg_thaw(fe->d_name, NULL);
        push_id(&ids, &nid, fe->d_name);
    }
    if (fdir)
        closedir(fdir);
    /* Only root makes (and can remove) cgroups. */
    const char *const *parents = sbx__cg_parents();
    for (size_t k = 0; geteuid() == 0 && parents[k]; k++) {
        const char *sbxdir = parents[k];
        DIR *d = opendir(sbxdir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_type != DT_DIR || !sbx__linux_id_ok(de->d_name) ||
                shim_of_id(shims, ns, de->d_name))
                continue;
            _cleanup_free_ char *g = sbx__printf("%s/%s", sbxdir, de->d_name);
            struct stat st;
            /* A group made this instant by a shim not yet listed: left for the next gc. */
            if (!g || stat(g, &st) < 0 || now - (double)st.st_mtime < 2)
                continue;
            if (!o.dry_run) {
                _cleanup_json_ json_t *one = json_pack("[s]", g);
                if (one)
                    sbx__cg_destroy(one);
            }
            push_id(&ids, &nid, de->d_name);
        }
        if (d)
            closedir(d);
    }
    shim_procs_free(shims, ns);
    sbx__linux_list_free(boxes, n);
    if (!o.dry_run)
        sweep_create_locks(state_dir);
    sbx__linux_image_gc(state_dir, o.dry_run); /* imports whose process died */
    if (removed)
        *removed = ids;
    else
        sbx_strv_free(ids);
    return SBX_OK;
}
