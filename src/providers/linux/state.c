/*
 * Box records in the state directory, listing, stopping and garbage
 * collection. The shim owns a box's directory while it runs; these functions
 * only read records, signal shims, and clean up after shims that died.
 */
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

char *sbx__linux_state_dir(const char *override)
{
    if (override && *override)
        return strdup(override);
    const char *env = getenv("SBX_STATE_DIR");
    if (env && *env)
        return sbx__printf("%s/linux", env);
    if (geteuid() == 0)
        return strdup("/run/sbx/linux");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && *xdg)
        return sbx__printf("%s/sbx/linux", xdg);
    return sbx__printf("/tmp/sbx-%u/linux", (unsigned)geteuid());
}

void sbx__linux_record_free(sbx_linux_record *r)
{
    if (!r)
        return;
    free(r->id);
    free(r->box_dir);
    free(r->image);
    free(r->state);
    free(r->hostname);
    free(r->socket);
    json_decref(r->metadata);
    json_decref(r->cgroups);
    memset(r, 0, sizeof(*r));
}

static char *jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? strdup(s) : NULL;
}

int sbx__linux_record_read(const char *box_dir, sbx_linux_record *rec, sbx_error **err)
{
    _cleanup_free_ char *path = sbx__printf("%s/record.json", box_dir);
    json_error_t je;
    _cleanup_json_ json_t *j = path ? json_load_file(path, 0, &je) : NULL;
    if (!json_is_object(j))
        return sbx__set_error(err, SBX_ENOENT, "no readable box record at %s: %s",
                              path ? path : box_dir, j ? "not an object" : je.text);
    memset(rec, 0, sizeof(*rec));
    rec->id = jstr(j, "id");
    rec->box_dir = strdup(box_dir);
    rec->image = jstr(j, "image");
    rec->state = jstr(j, "state");
    rec->hostname = jstr(j, "hostname");
    rec->socket = jstr(j, "agent_socket");
    rec->created = json_number_value(json_object_get(j, "created"));
    json_t *ttl = json_object_get(j, "ttl_s");
    rec->ttl_s = json_is_number(ttl) ? json_number_value(ttl) : -1;
    rec->expires = json_number_value(json_object_get(j, "expires_at"));
    rec->shim_pid = (pid_t)json_integer_value(json_object_get(j, "shim_pid"));
    rec->shim_start = (unsigned long long)json_integer_value(json_object_get(j, "shim_start"));
    rec->init_pid = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
    json_t *md = json_object_get(j, "metadata");
    rec->metadata = json_is_object(md) ? json_incref(md) : json_object();
    json_t *cg = json_object_get(j, "cgroups");
    rec->cgroups = json_is_array(cg) ? json_incref(cg) : json_array();
    if (!rec->id || !rec->box_dir || !rec->metadata || !rec->cgroups) {
        sbx__linux_record_free(rec);
        return sbx__set_error(err, SBX_EIO, "box record %s is incomplete", path);
    }
    return SBX_OK;
}

unsigned long long sbx__linux_proc_start(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    char *data = NULL;
    size_t n = 0;
    if (pid <= 0 || sbx__read_file(p, &data, &n) < 0)
        return 0;
    /* The command name may hold spaces and parentheses: fields start after the last ')'. */
    char *s = strrchr(data, ')');
    unsigned long long start = 0;
    if (s) {
        s += 2; /* field 3 */
        for (int f = 3; f < 22 && s; f++) {
            s = strchr(s, ' ');
            if (s)
                s++;
        }
        if (s)
            start = strtoull(s, NULL, 10);
    }
    /* A zombie has exited: treat it as gone. */
    char *st = strrchr(data, ')');
    if (st && st[1] == ' ' && (st[2] == 'Z' || st[2] == 'X'))
        start = 0;
    free(data);
    return start;
}

bool sbx__linux_shim_alive(const sbx_linux_record *rec)
{
    if (rec->shim_pid <= 0)
        return false;
    unsigned long long s = sbx__linux_proc_start(rec->shim_pid);
    return s != 0 && s == rec->shim_start;
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

int sbx__linux_list(const char *state_dir, const sbx_kv *labels, sbx_linux_box_info **out,
                    size_t *n_out, sbx_error **err)
{
    _cleanup_free_ char *dir = sbx__printf("%s/boxes", state_dir);
    DIR *d = dir ? opendir(dir) : NULL;
    *out = NULL;
    *n_out = 0;
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
        if (de->d_name[0] == '.')
            continue;
        _cleanup_free_ char *bd = sbx__printf("%s/%s", dir, de->d_name);
        sbx_linux_record rec;
        if (!bd)
            continue;
        if (sbx__linux_record_read(bd, &rec, NULL) < 0) {
            /* A shim that died before writing its record: list it as an orphan. */
            memset(&rec, 0, sizeof(rec));
            rec.id = strdup(de->d_name);
            rec.box_dir = strdup(bd);
            rec.state = strdup("creating");
            rec.ttl_s = -1;
            rec.metadata = json_object();
            rec.cgroups = json_array();
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

/*
 * The cgroup paths a box may have, whether or not its record got written:
 * the shim names them by id, so gc finds them even after a crash mid-create.
 */
static json_t *guess_cgroups(const char *id)
{
    json_t *a = json_array();
    static const char *const roots[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/memory",
                                         "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu",
                                         "/sys/fs/cgroup/cpu,cpuacct" };
    for (size_t i = 0; a && i < SBX_ARRAY_SIZE(roots); i++) {
        char *p = sbx__printf("%s/sbx/%s", roots[i], id);
        struct stat st;
        if (p && stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            json_array_append_new(a, json_string(p));
        free(p);
    }
    return a;
}

int sbx__linux_remove_leftovers(const char *box_dir, const sbx_linux_record *rec)
{
    if (rec && rec->cgroups)
        sbx__cg_destroy(rec->cgroups);
    if (rec && rec->id) {
        json_t *g = guess_cgroups(rec->id);
        if (g)
            sbx__cg_destroy(g);
        json_decref(g);
    }
    /*
     * The box's mounts lived in its own mount namespace and died with it; the
     * directory holds only the record, the socket and an empty mount point.
     * sbx__rm_rf never crosses into another mount, should one be there.
     */
    return sbx__rm_rf(box_dir);
}

/*
 * pidfd_open, or ENOSYS without pidfd support (Linux < 5.3, valgrind), which
 * SBX_LINUX_NO_PIDFD=1 simulates so the fallback stays tested.
 */
int sbx__linux_pidfd_open(pid_t pid)
{
    const char *no = getenv("SBX_LINUX_NO_PIDFD");
    if (no && *no && strcmp(no, "0") != 0) {
        errno = ENOSYS;
        return -1;
    }
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Sends SIGTERM to a live shim and waits for it to exit. */
static int stop_shim(const sbx_linux_record *rec, double timeout_s, sbx_error **err)
{
    _cleanup_close_ int pfd = sbx__linux_pidfd_open(rec->shim_pid);
    if (pfd < 0 && errno != ENOSYS)
        return SBX_OK; /* gone already */
    /*
     * Re-check identity (with a pidfd pinning the process: no signal to a
     * reused pid). Without pidfds (Linux < 5.3, valgrind) the start time
     * check and kill() leave a small pid-reuse window; that is the best there is.
     */
    if (sbx__linux_proc_start(rec->shim_pid) != rec->shim_start)
        return SBX_OK;
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
        if (timeout_s >= 0 && el > timeout_s)
            return sbx__set_error(err, SBX_ETIMEDOUT,
                                  "the shim of box %s (pid %d) did not finish within %.0fs",
                                  rec->id, (int)rec->shim_pid, timeout_s);
    }
}

int sbx__linux_stop_box(const char *state_dir, const char *id, double timeout_s, sbx_error **err)
{
    if (!id || !*id || strchr(id, '/') || id[0] == '.')
        return sbx__set_error(err, SBX_EINVAL, "invalid box id %s", id ? id : "(null)");
    _cleanup_free_ char *bd = sbx__printf("%s/boxes/%s", state_dir, id);
    struct stat st;
    if (!bd || stat(bd, &st) < 0)
        return sbx__set_error(err, SBX_ENOENT, "no box %s in %s", id, state_dir);
    sbx_linux_record rec;
    if (sbx__linux_record_read(bd, &rec, NULL) < 0) {
        memset(&rec, 0, sizeof(rec));
        rec.id = strdup(id);
    }
    int rc = SBX_OK;
    if (rec.shim_pid > 0 && sbx__linux_shim_alive(&rec))
        rc = stop_shim(&rec, timeout_s, err);
    /* The shim removes everything on its way out; this catches a shim that died. */
    if (rc == SBX_OK && stat(bd, &st) == 0 && !sbx__linux_shim_alive(&rec))
        sbx__linux_remove_leftovers(bd, &rec);
    sbx__linux_record_free(&rec);
    return rc;
}

static int push_id(char ***v, size_t *n, const char *id)
{
    char **nv = realloc(*v, (*n + 2) * sizeof(char *));
    if (!nv)
        return -1;
    *v = nv;
    nv[*n] = strdup(id);
    nv[*n + 1] = NULL;
    (*n)++;
    return 0;
}

int sbx__linux_gc(const char *state_dir, const sbx_linux_gc_opts *opts, char ***removed,
                  sbx_error **err)
{
    sbx_linux_gc_opts o = { 0 };
    if (opts)
        o = *opts;
    if (o.stop_timeout_s <= 0)
        o.stop_timeout_s = 10;
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    int rc = sbx__linux_list(state_dir, NULL, &boxes, &n, err);
    if (rc < 0)
        return rc;
    char **ids = NULL;
    size_t nid = 0;
    double now = now_unix();
    for (size_t i = 0; i < n; i++) {
        sbx_linux_record *r = &boxes[i].rec;
        bool by_label = o.labels && o.labels->len && labels_match(r->metadata, o.labels);
        bool orphan = !boxes[i].shim_alive;
        /*
         * A directory with no record and no live shim may be a box whose shim
         * is starting right now: give it a grace period before calling it an
         * orphan (a shim writes its record within milliseconds).
         */
        if (orphan && r->shim_pid <= 0) {
            struct stat st;
            if (stat(r->box_dir, &st) == 0 && now - (double)st.st_mtime < 30)
                orphan = false;
        }
        if (!orphan && !boxes[i].expired && !by_label)
            continue;
        if (!o.dry_run) {
            if (boxes[i].shim_alive)
                stop_shim(r, o.stop_timeout_s, NULL);
            if (!sbx__linux_shim_alive(r))
                sbx__linux_remove_leftovers(r->box_dir, r);
        }
        if (removed)
            push_id(&ids, &nid, r->id);
    }
    sbx__linux_list_free(boxes, n);
    sbx__linux_image_gc(state_dir, o.dry_run); /* imports whose process died */
    if (removed)
        *removed = ids;
    return SBX_OK;
}
