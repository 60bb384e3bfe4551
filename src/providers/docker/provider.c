/*
 * The docker provider: boxes are ordinary containers made through the Docker
 * Engine API (engine.c), with the static sbx-agent bind-mounted read-only
 * and run as the container's init. The agent listens on a unix socket in a
 * host directory (the box's directory in the kit's store) mounted into the
 * container, so exec, files and status go through the agent at fork speed
 * (the kit's client, as for linux and local) while `docker ps` shows the box
 * and `docker rm -f` ends it. For an engine elsewhere (the remote path) the
 * agent comes from a volume of the engine named by its hash (agent_volume)
 * and is reached through Engine-API exec sessions (session.c): one per
 * handle, and one more per connection of its own (relay_start).
 * docs/providers/docker.md.
 *
 * Everything that talks to the engine blocks, so it runs on the worker pool;
 * the agent is on the loop thread, as the kit requires.
 */
#include "providers/docker/docker.h"
#include "kit/kit.h"

#include <sbx/box.h>

#include <curl/curl.h>
#include <math.h>
#include <nettle/sha2.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

/* Where the agent and its socket directory appear inside the container. */
#define AGENT_IN_BOX "/.sbx-agent"
#define RUN_IN_BOX "/.sbx"
#define SOCKET_IN_BOX RUN_IN_BOX "/agent.sock"
/*
 * The remote path's agent: the engine's volume sbx-agent-<sha256>
 * (agent_volume), mounted read-only here in every box.
 */
#define AGENT_DIR_REMOTE "/.sbx-bin"
#define AGENT_REMOTE AGENT_DIR_REMOTE "/sbx-agent"
/* The reference's DEFAULT_KEEPALIVE_CMD (agent: false). */
#define NOAGENT_KEEPALIVE "while :; do sleep 2147483647; done"

/* --- provider state ------------------------------------------------------------- */

static void relay_stop(struct dk_relay *r);



void sbx__dk_box_free(void *box)
{
    struct dbox *b = box;
    if (!b)
        return;
    relay_stop(b->relay);
    sbx_box_agent_free(b->agent);
    free(b->id);
    free(b->container);
    free(b->scope);
    free(b->socket);
    free(b->shell);
    free(b->workdir);
    free(b);
}

/* The container a record names: its id when the record has one, else its name (the box id). */
static char *record_container(const sbx_box_record *r)
{
    _cleanup_json_ json_t *p = r->provider_json ? json_loads(r->provider_json, 0, NULL) : NULL;
    const char *c = json_string_value(json_object_get(p, "container"));
    return strdup(c && c[0] ? c : r->id);
}

/* Path-safe for a URL: container ids and names are [A-Za-z0-9_.-]; anything else is escaped. */
static char *esc(const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    char *out = e ? strdup(e) : NULL;
    curl_free(e);
    return out;
}

/*
 * Removes container `c` with its anonymous volumes; a container already gone
 * is success (close is idempotent, as the reference's "No such container").
 */
int sbx__dk_remove(sbx_dk_engine *e, const char *c, sbx_error **err)
{
    _cleanup_free_ char *ec = esc(c);
    _cleanup_free_ char *path = ec ? sbx__printf("/containers/%s?force=1&v=1", ec) : NULL;
    if (!path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    long st = 0;
    _cleanup_json_ json_t *resp = NULL;
    /* A create out of time still removes what it made: not bounded by its deadline. */
    struct sbx_dk_deadline dl = sbx__dk_deadline_swap((struct sbx_dk_deadline){0, 0});
    int rc = sbx__dk_request(e, "DELETE", path, NULL, &st, &resp, err);
    sbx__dk_deadline_swap(dl);
    if (rc < 0)
        return rc;
    if (st == 204 || st == 200 || st == 404)
        return SBX_OK;
    /* 409 "removal already in progress": someone else is removing it. */
    if (st == 409 && strstr(json_string_value(json_object_get(resp, "message")) ?: "", "in progress"))
        return SBX_OK;
    return sbx__dk_error(err, SBX_EPROVIDER, st, resp, "removing container %s", c);
}

/* GET /containers/C/json: SBX_ENOENT for a container that is not there. */
int sbx__dk_inspect(sbx_dk_engine *e, const char *c, json_t **out, sbx_error **err)
{
    _cleanup_free_ char *ec = esc(c);
    _cleanup_free_ char *path = ec ? sbx__printf("/containers/%s/json", ec) : NULL;
    if (!path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    long st = 0;
    json_t *resp = NULL;
    int rc = sbx__dk_request(e, "GET", path, NULL, &st, &resp, err);
    if (rc < 0)
        return rc;
    if (st == 200 && json_is_object(resp)) {
        *out = resp;
        return SBX_OK;
    }
    rc = sbx__dk_error(err, st == 404 ? SBX_ENOENT : SBX_EPROVIDER, st, resp,
                       "inspecting container %s", c);
    json_decref(resp);
    return rc;
}

/* The store's hooks: a box is its container, not a host process. Worker threads. */
static int hook_alive(const sbx_box_record *r, void *data)
{
    struct docker *d = data;
    _cleanup_free_ char *c = record_container(r);
    json_t *j = NULL;
    sbx_error *e = NULL;
    int rc = c ? sbx__dk_inspect(d->engine, c, &j, &e) : SBX_ENOMEM;
    sbx_error_free(e);
    /* An engine that does not answer says nothing: the box is not taken for dead. */
    int alive = rc == SBX_ENOENT ? 0
                : rc < 0         ? 1
                                 : json_is_true(json_object_get(json_object_get(j, "State"),
                                                                "Running"));
    json_decref(j);
    return alive;
}

/* The host directory mounted at /.sbx in box `id`'s container (the agent's socket). */
static char *run_dir(const struct docker *d, const char *id)
{
    return sbx__printf("%s/boxes/%s/run", sbx_box_store_path(d->store), id);
}

/*
 * The socket directory is writable from inside the container (the agent
 * makes its socket there), so it gets a tiny tmpfs of its own: a box cannot
 * fill the host's /run through it. Where mounting is not allowed (no
 * CAP_SYS_ADMIN: a rootless engine's user) it stays a plain directory.
 */
static void run_dir_mount(const char *run)
{
    if (mount("sbx-docker", run, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=64k,nr_inodes=64,mode=0700") < 0)
        sbx_log(SBX_LOG_DEBUG, "docker: no tmpfs for %s (%s): a plain directory", run,
                strerror(errno));
}

/* After the container is gone; not a mount point (never mounted, done already) is fine. */
static void run_dir_umount(const char *run)
{
    if (umount2(run, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT &&
        errno != EPERM)
        sbx_log(SBX_LOG_WARNING, "docker: cannot unmount %s: %s", run, strerror(errno));
}

static int hook_stop(const sbx_box_record *r, void *data, sbx_error **err)
{
    struct docker *d = data;
    _cleanup_free_ char *c = record_container(r);
    _cleanup_free_ char *run = run_dir(d, r->id);
    if (!c || !run)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = sbx__dk_remove(d->engine, c, err);
    if (rc == SBX_OK)
        run_dir_umount(run); /* only once nothing in the container holds it */
    return rc;
}

static void dk_release(void *state)
{
    struct docker *d = state;
    if (!d)
        return;
    sbx_box_pool_free(d->pool);
    sbx_box_store_free(d->store);
    sbx__dk_engine_free(d->engine);
    sbx__dk_config_free(&d->cfg);
    free(d->agent);
    pthread_mutex_destroy(&d->vol_lock);
    free(d->vol_name);
    free(d);
}

static int dk_init(const char *config_json, void **state, sbx_error **err)
{
    struct docker *d = calloc(1, sizeof(*d));
    if (!d)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    pthread_mutex_init(&d->vol_lock, NULL);
    int rc = sbx__dk_config_parse(config_json, &d->cfg, err);
    if (rc < 0) {
        pthread_mutex_destroy(&d->vol_lock);
        free(d);
        return rc;
    }
    if ((rc = sbx__dk_engine_new(d->cfg.host, d->cfg.api_version, &d->engine, err)) < 0)
        goto fail;
    /* The reference bounds `docker run` (pull included) by it: here each engine request. */
    sbx__dk_engine_set_timeout(d->engine, d->cfg.start_timeout_s);
    if (!(d->agent = sbx_box_find_agent())) {
        rc = sbx__set_error(err, SBX_EINVAL,
                            "docker: cannot find the sbx-agent binary to mount into containers "
                            "(install sbx, or set SBX_AGENT to its path)");
        goto fail;
    }
    if ((rc = sbx_box_store_open("docker", d->cfg.state_dir, &d->store, err)) < 0)
        goto fail;
    if (!(d->pool = sbx_box_pool_new(d->cfg.max_connections))) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto fail;
    }
    sbx_box_store_set_hooks(d->store, hook_alive, hook_stop, d);
    *state = d;
    return SBX_OK;
fail:
    dk_release(d);
    return rc;
}

/* --- create ------------------------------------------------------------------------ */

/*
 * The engine's name for the spec's image (malloc'd, NULL with `err`): a
 * docker:// prefix is dropped, as the reference does, then the config's
 * image_rewrites apply (the reference's rewrite_image, first matching
 * prefix wins).
 */
static int engine_image(const struct docker *d, const sbx_spec *spec, char **out,
                        sbx_error **err)
{
    const char *img = sbx_spec_image(spec);
    if (!img || !img[0])
        img = d->cfg.image; /* the config's default image */
    if (!img || !img[0])
        return sbx__set_error(err, SBX_EINVAL,
                              "spec.image is required for the docker provider (or the "
                              "provider config's 'image')");
    if (!strncmp(img, "docker://", 9))
        img += 9;
    char *rw = NULL;
    if (d->cfg.image_rewrites) {
        int rc = sbx_rewrite_image(img, d->cfg.image_rewrites, &rw, err);
        if (rc < 0)
            return rc;
    }
    /* sbx_rewrite_image's string is sbx_free's; ours are free's: a copy. */
    *out = strdup(rw ? rw : img);
    sbx_free(rw);
    return *out ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

struct pull_progress {
    const char *image;
    sbx_op *op; /* the create's, for its progress; NULL: the debug log only */
};

/*
 * The engine's pull states as the linux provider's pull stages name them
 * ("pull:STATE:layer:ID12"); "extracting" is the engine's own.
 */
static const char *pull_state(const char *status)
{
    static const struct {
        const char *engine, *ours;
    } map[] = {{"Pulling fs layer", "waiting"},   {"Waiting", "waiting"},
               {"Downloading", "downloading"},    {"Verifying Checksum", "verifying"},
               {"Download complete", "verifying"}, {"Extracting", "extracting"},
               {"Pull complete", "done"},          {"Already exists", "cached"}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(status, map[i].engine))
            return map[i].ours;
    return NULL;
}

static void pull_line(const char *status, const char *id, long long cur, long long tot,
                      void *data)
{
    struct pull_progress *p = data;
    if (!status)
        return;
    sbx_log(SBX_LOG_DEBUG, "docker: pulling %s: %s%s%s (%lld/%lld)", p->image, id ? id : "",
            id ? ": " : "", status, cur, tot);
    const char *st = pull_state(status);
    if (p->op && st && id && strspn(id, "0123456789abcdef") == strlen(id)) {
        char stage[64];
        snprintf(stage, sizeof(stage), "pull:%s:layer:%.12s", st, id);
        sbx_op_progress(p->op, stage, (unsigned long long)cur, (unsigned long long)tot);
    }
}

/*
 * The image's config (inspect), pulling it through the engine first when it
 * is missing and pulls are allowed.
 */
static int image_config(struct docker *d, const char *img, sbx_op *op, json_t **out,
                        sbx_error **err)
{
    _cleanup_free_ char *ei = esc(img);
    _cleanup_free_ char *path = ei ? sbx__printf("/images/%s/json", ei) : NULL;
    if (!path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    for (int attempt = 0;; attempt++) {
        long st = 0;
        json_t *resp = NULL;
        int rc = sbx__dk_request(d->engine, "GET", path, NULL, &st, &resp, err);
        if (rc < 0)
            return rc;
        if (st == 200 && json_is_object(resp)) {
            *out = resp;
            return SBX_OK;
        }
        if (st != 404 || attempt > 0 || !d->cfg.pull) {
            rc = sbx__dk_error(err, st == 404 ? SBX_ENOENT : SBX_EPROVIDER, st, resp,
                               "image '%s'%s", img,
                               st == 404 ? " is not in the engine (and pull is off)" : "");
            json_decref(resp);
            return rc;
        }
        json_decref(resp);
        /* Missing: the engine pulls it (its registry credentials, its mirrors). */
        _cleanup_free_ char *q = sbx__printf("/images/create?fromImage=%s", ei);
        if (!q)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        struct pull_progress pp = {img, op};
        sbx_error *pe = NULL;
        rc = sbx__dk_request_stream(d->engine, "POST", q, &st, pull_line, &pp, &pe);
        if (rc == SBX_OK && st != 200)
            rc = sbx__set_error(&pe, SBX_EPROVIDER, "HTTP %ld", st);
        if (rc < 0)
            return sbx__fail(err, sbx_error_prefix(pe, "pulling image '%s' through the engine at %s",
                                                   img, sbx__dk_engine_host(d->engine)));
    }
}

/*
 * The create body: the reference's mapping of the spec onto `docker run`
 * flags, as engine API fields. The agent is the entrypoint; a spec
 * entrypoint becomes the agent's service (it runs as the image's user).
 */
json_t *sbx__dk_create_body(const struct dk_config *c, const sbx_spec *spec, const char *id,
                            const char *image, const char *image_user, const char *agent,
                            const char *run_dir, bool noagent)
{
    json_t *b = json_object(), *hc = json_object(), *env = json_array(), *labels = json_object();
    json_t *ep = json_pack("[ssss]", agent ? AGENT_IN_BOX : AGENT_REMOTE, "init", "--listen",
                           SOCKET_IN_BOX);
    json_t *binds = json_array();
    if (!b || !hc || !env || !labels || !ep || !binds) {
        json_decref(b), json_decref(hc), json_decref(env), json_decref(labels);
        json_decref(ep), json_decref(binds);
        return NULL;
    }
    json_object_set_new(b, "Image", json_string(image));
    for (size_t i = 0; i < sbx_spec_env_count(spec); i++) {
        const char *k, *v;
        sbx_spec_env_at(spec, i, &k, &v);
        char *kv = sbx__printf("%s=%s", k, v ? v : "");
        json_array_append_new(env, json_string(kv ? kv : ""));
        free(kv);
    }
    json_object_set_new(b, "Env", env);
    const char *wd = sbx_spec_workdir(spec);
    if (wd && wd[0])
        json_object_set_new(b, "WorkingDir", json_string(wd));
    /* sbx-agent --shell; --user: commands run as the image's user, as `docker exec` does. */
    if (c->shell)
        json_array_append_new(ep, json_string("--shell")), json_array_append_new(ep, json_string(c->shell));
    if (image_user && image_user[0])
        json_array_append_new(ep, json_string("--user")),
            json_array_append_new(ep, json_string(image_user));
    /*
     * A TTL: the agent, the container's init, ends the box when it passes,
     * and the engine removes the container then (the reference's `sleep
     * TTL` keepalive with --rm; here with an entrypoint too).
     */
    double ttl;
    bool ttl_on = sbx_spec_get_ttl(spec, &ttl) && ttl > 0;
    if (ttl_on) {
        char t[32];
        snprintf(t, sizeof(t), "%.0f", fmax(1.0, ceil(ttl)));
        json_array_append_new(ep, json_string("--ttl"));
        json_array_append_new(ep, json_string(t));
    }
    const char *const *entry = sbx_spec_entrypoint(spec);
    if (entry && entry[0]) {
        json_array_append_new(ep, json_string("--"));
        for (size_t i = 0; entry[i]; i++)
            json_array_append_new(ep, json_string(entry[i]));
    }
    if (noagent) {
        /*
         * No agent (agent: false): the reference's container. The spec's
         * entrypoint, else the keepalive (`sleep TTL` with a TTL, which
         * AutoRemove then removes), run as the image's user.
         */
        json_decref(ep);
        ep = json_array();
        json_t *cmd = json_array();
        if (entry && entry[0]) {
            json_array_append_new(ep, json_string(entry[0]));
            for (size_t i = 1; entry[i]; i++)
                json_array_append_new(cmd, json_string(entry[i]));
        } else {
            char keep[64];
            if (ttl_on)
                snprintf(keep, sizeof(keep), "sleep %.0f", fmax(1.0, ceil(ttl)));
            json_array_append_new(ep, json_string(c->keepalive_shell ? c->keepalive_shell
                                                                     : "/bin/sh"));
            json_array_append_new(cmd, json_string("-c"));
            json_array_append_new(cmd, json_string(ttl_on            ? keep
                                                   : c->keepalive_cmd ? c->keepalive_cmd
                                                                      : NOAGENT_KEEPALIVE));
        }
        json_object_set_new(b, "Entrypoint", ep);
        json_object_set_new(b, "Cmd", cmd);
    } else {
        json_object_set_new(b, "Entrypoint", ep);
        json_object_set_new(b, "Cmd", json_array());
        /* The agent must be root in the container to run commands as any user. */
        json_object_set_new(b, "User", json_string("0"));
    }
    json_object_set_new(labels, "sbx.sandbox", json_string("1"));
    json_object_set_new(labels, "sbx.box", json_string(id));
    if (noagent) /* connect() then knows there is no agent to reach */
        json_object_set_new(labels, "sbx.agent", json_string("false"));
    /* The image's user, for the remote path's sessions (the container's User is root). */
    if (!noagent && image_user && image_user[0])
        json_object_set_new(labels, "sbx.user", json_string(image_user));
    for (size_t i = 0; i < sbx_spec_metadata_count(spec); i++) {
        const char *k, *v;
        sbx_spec_metadata_at(spec, i, &k, &v);
        if (strncmp(k, "sbx.", 4)) /* ours stay ours */
            json_object_set_new(labels, k, json_string(v ? v : ""));
    }
    json_object_set_new(b, "Labels", labels);

    if (noagent) {
        json_decref(binds);
    } else if (agent && run_dir) {
        char *ab = sbx__printf("%s:%s:ro", agent, AGENT_IN_BOX);
        char *rb = sbx__printf("%s:%s", run_dir, RUN_IN_BOX);
        json_array_append_new(binds, json_string(ab ? ab : ""));
        json_array_append_new(binds, json_string(rb ? rb : ""));
        free(ab);
        free(rb);
        json_object_set_new(hc, "Binds", binds);
    } else {
        /*
         * The remote path: the agent is copied in (the archive API) and its
         * socket directory is the container's own small tmpfs; sbx reaches
         * it through an exec session instead.
         */
        json_decref(binds);
        json_object_set_new(hc, "Tmpfs", json_pack("{s:s}", RUN_IN_BOX, "size=64k,mode=0700"));
        json_object_set_new(b, "Volumes", json_pack("{s:{}}", AGENT_DIR_REMOTE));
    }
    /* The agent is the init: it reaps, and a second one would only sit between. */
    json_object_set_new(hc, "Init", json_boolean(noagent && c->use_init));
    /* Without an agent, as the reference: a TTL only without an entrypoint. */
    if (ttl_on && !(noagent && entry && entry[0]))
        json_object_set_new(hc, "AutoRemove", json_true());
    if (c->apply_resource_limits) {
        double cpu;
        long long mem;
        if (sbx_spec_get_cpu(spec, &cpu) && cpu > 0)
            json_object_set_new(hc, "NanoCpus", json_integer((json_int_t)llround(cpu * 1e9)));
        if (sbx_spec_get_memory_mib(spec, &mem) && mem > 0) {
            /* Swap equal to memory: a hard cap, as the reference's --memory-swap. */
            json_object_set_new(hc, "Memory", json_integer((json_int_t)mem << 20));
            json_object_set_new(hc, "MemorySwap", json_integer((json_int_t)mem << 20));
        }
    }
    long long gpu;
    if (sbx_spec_get_gpu(spec, &gpu) && gpu > 0)
        json_object_set_new(hc, "DeviceRequests",
                            json_pack("[{s:s,s:I,s:[[s]]}]", "Driver", "", "Count",
                                      (json_int_t)gpu, "Capabilities", "gpu"));
    if (c->network)
        json_object_set_new(hc, "NetworkMode", json_string(c->network));
    if (c->read_only)
        json_object_set_new(hc, "ReadonlyRootfs", json_true());
    /*
     * sbx's own profile unless the config names lists (an empty one gives
     * Docker's defaults): no MKNOD, and no_new_privs, so a setuid program in
     * the image gains nothing, as in a linux box (docs/providers/docker.md).
     */
    if (c->cap_drop)
        json_object_set(hc, "CapDrop", c->cap_drop);
    else
        json_object_set_new(hc, "CapDrop", json_pack("[s]", "MKNOD"));
    if (c->security_opt)
        json_object_set(hc, "SecurityOpt", c->security_opt);
    else
        json_object_set_new(hc, "SecurityOpt", json_pack("[s]", "no-new-privileges"));
    if (c->pids_limit > 0)
        json_object_set_new(hc, "PidsLimit", json_integer((json_int_t)c->pids_limit));
    size_t np = sbx_spec_port_count(spec);
    if (np) {
        json_t *exposed = json_object(), *pb = json_object();
        for (size_t i = 0; i < np; i++) {
            char k[32];
            snprintf(k, sizeof(k), "%d/tcp", sbx_spec_port_at(spec, i));
            json_object_set_new(exposed, k, json_object());
            json_object_set_new(pb, k,
                                json_pack("[{s:s,s:s}]", "HostIp",
                                          c->publish_host ? c->publish_host : "127.0.0.1",
                                          "HostPort", ""));
        }
        json_object_set_new(b, "ExposedPorts", exposed);
        json_object_set_new(hc, "PortBindings", pb);
    }
    /*
     * The config's HostConfig fields last: the operator's word over the
     * defaults above. Mappings (Tmpfs, Sysctls, ...) merge key by key and
     * Binds/Mounts add to sbx's, so the agent's own mounts stay.
     */
    if (c->host_config) {
        const char *k;
        json_t *v;
        json_object_foreach(c->host_config, k, v)
        {
            json_t *have = json_object_get(hc, k);
            if ((!strcmp(k, "Binds") || !strcmp(k, "Mounts")) && json_is_array(have) &&
                json_is_array(v))
                json_array_extend(have, v);
            else if (json_is_object(have) && json_is_object(v))
                json_object_update_recursive(have, v);
            else
                json_object_set(hc, k, v);
        }
    }
    json_object_set_new(b, "HostConfig", hc);
    return b;
}

/* One create's start hook data: the provider and the caller's op (pull progress). */
struct create_ctx {
    struct docker *d;
    sbx_op *op;
};

/* Whether boxes are reached through an exec session (config, else where the engine is). */
static bool use_remote(const struct docker *d)
{
    return d->cfg.remote >= 0 ? d->cfg.remote == 1 : !sbx__dk_engine_local(d->engine);
}

/* One ustar header at `t` (512 bytes, zeroed): a regular file of `size` bytes, or a hard link. */
static void tar_header(char *t, const char *name, long long size, const char *link)
{
    snprintf(t, 100, "%s", name);
    snprintf(t + 100, 8, "%07o", 0755);
    snprintf(t + 108, 8, "%07o", 0);
    snprintf(t + 116, 8, "%07o", 0);
    snprintf(t + 124, 12, "%011llo", (unsigned long long)size);
    snprintf(t + 136, 12, "%011llo", (unsigned long long)time(NULL));
    memset(t + 148, ' ', 8);
    t[156] = link ? '1' : '0';
    if (link)
        snprintf(t + 157, 100, "%s", link);
    memcpy(t + 257, "ustar", 6);
    memcpy(t + 263, "00", 2);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (unsigned char)t[i];
    snprintf(t + 148, 8, "%06o", sum);
}

/*
 * The agent volume's tar: the agent under a name of its own (`tmp`), then
 * sbx-agent as a hard link to it. The engine writes the file whole before
 * the link replaces sbx-agent, so sbx-agent is never a partial copy, even
 * with another process filling the same volume at the same time.
 */
static int agent_tar(const char *agent, const char *tmp, char **out, size_t *out_len,
                     sbx_error **err)
{
    char *bin = NULL;
    size_t n = 0;
    if (sbx__read_file(agent, &bin, &n) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "docker: cannot read the agent %s", agent);
    size_t padded = (n + 511) / 512 * 512;
    size_t total = 512 + padded + 512 + 1024; /* file, link, two zero blocks */
    char *t = calloc(1, total);
    if (!t) {
        free(bin);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    tar_header(t, tmp, (long long)n, NULL);
    memcpy(t + 512, bin, n);
    tar_header(t + 512 + padded, "sbx-agent", 0, tmp);
    free(bin);
    *out = t;
    *out_len = total;
    return SBX_OK;
}

/*
 * The remote path's agent volume: "sbx-agent-<SHA-256 of the agent>",
 * made once per engine and mounted read-only into every box, so a create
 * copies nothing. The name says what the content must be; the volume
 * is made (idempotently) on first use in this process. Blocking.
 */
/* d->vol_name, "sbx-agent-<sha256 of the agent>", computed once; under vol_lock. */
static int agent_volume_name(struct docker *d, sbx_error **err)
{
    int rc = SBX_OK;
    if (!d->vol_name) {
        char *bin = NULL;
        size_t n = 0;
        if (sbx__read_file(d->agent, &bin, &n) < 0) {
            rc = sbx__set_errno(err, SBX_ECREATE, errno, "docker: cannot read the agent %s",
                                d->agent);
        } else {
            struct sha256_ctx ctx;
            uint8_t dg[SHA256_DIGEST_SIZE];
            char hex[2 * SHA256_DIGEST_SIZE + 1];
            sha256_init(&ctx);
            sha256_update(&ctx, n, (const uint8_t *)bin);
            sha256_digest(&ctx, sizeof(dg), dg);
            for (size_t i = 0; i < sizeof(dg); i++)
                snprintf(hex + 2 * i, 3, "%02x", dg[i]);
            d->agent_size = (long long)n;
            if (!(d->vol_name = sbx__printf("sbx-agent-%s", hex)))
                rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
        free(bin);
    }
    return rc;
}

static int agent_volume(struct docker *d, sbx_error **err)
{
    pthread_mutex_lock(&d->vol_lock);
    int rc = agent_volume_name(d, err);
    if (rc == SBX_OK && !d->vol_made) {
        _cleanup_json_ json_t *body = json_pack("{s:s,s:{s:s,s:s}}", "Name", d->vol_name, "Labels",
                                                "sbx.agent-volume", "1", "sbx.agent-sha256",
                                                d->vol_name + 10);
        long st = 0;
        _cleanup_json_ json_t *resp = NULL;
        if (!body)
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        else if ((rc = sbx__dk_request(d->engine, "POST", "/volumes/create", body, &st, &resp,
                                       err)) == SBX_OK &&
                 st != 201 && st != 200)
            rc = sbx__dk_error(err, SBX_ECREATE, st, resp, "making the agent volume %s",
                               d->vol_name);
        if (rc == SBX_OK)
            d->vol_made = true;
    }
    pthread_mutex_unlock(&d->vol_lock);
    return rc;
}

/* Whether container `cid` sees the whole agent at AGENT_REMOTE (its stat: a file of its size). */
static int agent_volume_check(struct docker *d, const char *cid, bool *ok, sbx_error **err)
{
    unsigned long long mode = 0;
    long long size = -1;
    _cleanup_free_ char *link = NULL;
    int rc = sbx__dk_stat_path(d, cid, AGENT_REMOTE, &mode, &link, &size, err);
    /* Go's mode bits: any type bit set is not a regular file. */
    *ok = rc == SBX_OK && !(mode & 0xff000000ULL) && size == d->agent_size;
    return rc == SBX_ENOENT ? SBX_OK : rc;
}

/*
 * Fills the agent volume (agent_tar) through a container of `img` made for
 * that, never started, with the volume mounted writable. Blocking.
 */
static int agent_volume_fill(struct docker *d, const char *img, sbx_error **err)
{
    /* Unique across processes and machines sharing the engine: 64 random bits. */
    unsigned long long rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
    char tmp[64];
    snprintf(tmp, sizeof(tmp), ".sbx-agent.%016llx", rnd);
    _cleanup_free_ char *tar = NULL;
    size_t tar_len = 0;
    int rc = agent_tar(d->agent, tmp, &tar, &tar_len, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *body = json_pack(
        "{s:s,s:[s],s:[],s:{s:s},s:{s:s,s:[{s:s,s:s,s:s,s:b}]}}", "Image", img, "Entrypoint",
        AGENT_REMOTE, "Cmd", "Labels", "sbx.agent-volume-filler", d->vol_name, "HostConfig",
        "NetworkMode", "none", "Mounts", "Type", "volume", "Source", d->vol_name, "Target",
        AGENT_DIR_REMOTE, "ReadOnly", 0);
    long st = 0;
    _cleanup_json_ json_t *resp = NULL;
    if (!body)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if ((rc = sbx__dk_request(d->engine, "POST", "/containers/create", body, &st, &resp, err)) < 0)
        return rc;
    const char *cid = json_string_value(json_object_get(resp, "Id"));
    if (st != 201 || !cid)
        return sbx__dk_error(err, SBX_ECREATE, st, resp,
                             "making a container of image '%s' to fill the agent volume %s", img,
                             d->vol_name);
    _cleanup_free_ char *ap = sbx__printf("/containers/%s/archive?path=%s", cid, AGENT_DIR_REMOTE);
    _cleanup_json_ json_t *aresp = NULL;
    if (!ap)
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    else if ((rc = sbx__dk_request_raw(d->engine, "PUT", ap, tar, tar_len, "application/x-tar",
                                       &st, &aresp, err)) == SBX_OK &&
             st != 200)
        rc = sbx__dk_error(err, SBX_ECREATE, st, aresp, "copying sbx-agent into the volume %s",
                           d->vol_name);
    sbx__dk_remove(d->engine, cid, NULL);
    return rc;
}

/*
 * The agent volume as box container `cid` (made, not started) sees it,
 * checked on every create (a HEAD, ~2 ms), filled when it is not whole:
 * the fill is serialized in this process and checked again after it.
 * SBX_ECREATE when it still is not whole.
 */
static int agent_volume_ready(struct docker *d, const char *cid, const char *img, sbx_error **err)
{
    bool ok = false;
    int rc = agent_volume_check(d, cid, &ok, err);
    if (rc < 0 || ok)
        return rc;
    pthread_mutex_lock(&d->vol_lock);
    /* Another create of this process may have filled it meanwhile. */
    rc = agent_volume_check(d, cid, &ok, err);
    if (rc == SBX_OK && !ok) {
        sbx_log(SBX_LOG_DEBUG, "docker: filling the agent volume %s", d->vol_name);
        if ((rc = agent_volume_fill(d, img, err)) == SBX_OK &&
            (rc = agent_volume_check(d, cid, &ok, err)) == SBX_OK && !ok)
            rc = sbx__set_error(err, SBX_ECREATE,
                                "docker: the agent volume %s does not hold the agent (%lld "
                                "bytes at sbx-agent) after filling it; remove it "
                                "(`docker volume rm %s`) and try again",
                                d->vol_name, d->agent_size, d->vol_name);
    }
    pthread_mutex_unlock(&d->vol_lock);
    return rc;
}

/*
 * Makes and starts box r's container (worker thread): the image (pulled
 * when missing), the create body, for the remote path the agent volume
 * mounted and checked before the start; checks it runs. Writes its id
 * (malloc'd) and its PID 1 as the host sees it. On failure nothing is left
 * (the container removed).
 */
static int make_container_steps(struct docker *d, sbx_op *op, sbx_box_record *r,
                                const char *box_dir, const sbx_spec *spec, bool remote,
                                bool noagent, char **cid_out, pid_t *pid_out, char **user_out,
                                const char **step, sbx_error **err)
{
    if (noagent)
        remote = true; /* nothing of this machine goes in: no socket directory, no agent */
    _cleanup_free_ char *img = NULL;
    int rc = engine_image(d, spec, &img, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *ic = NULL;
    *step = "inspecting (or pulling) the image";
    rc = image_config(d, img, op, &ic, err);
    if (rc < 0)
        return rc == SBX_ENOENT ? SBX_ECREATE : rc;
    const char *user = json_string_value(json_object_get(json_object_get(ic, "Config"), "User"));
    _cleanup_free_ char *run = remote ? NULL : sbx__printf("%s/run", box_dir);
    if (!remote && !run)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (run && mkdir(run, 0700) < 0 && errno != EEXIST)
        return sbx__set_errno(err, SBX_ECREATE, errno, "docker: cannot make %s", run);
    /* Unmounted by the stop hook, which the kit runs on any failure from here on too. */
    if (run)
        run_dir_mount(run);
    bool agent_vol = remote && !noagent;
    if (agent_vol && (rc = agent_volume(d, err)) < 0)
        return rc;
    const char *const *entry = sbx_spec_entrypoint(spec);
    double ttl;
    if (noagent && entry && entry[0] && sbx_spec_get_ttl(spec, &ttl) && ttl > 0)
        sbx_log(SBX_LOG_WARNING, "ttl_s is not enforced when spec.entrypoint is set; it will be "
                                 "ignored (docker, agent: false; sbx gc still collects the box "
                                 "once it expired).");
    _cleanup_json_ json_t *body = sbx__dk_create_body(&d->cfg, spec, r->id, img, user,
                                                      remote ? NULL : d->agent, run, noagent);
    _cleanup_free_ char *q = sbx__printf("/containers/create?name=%s", r->id);
    if (!body || !q)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (agent_vol) {
        /* The agent volume, read-only, in place of the anonymous one the body names. */
        json_t *hc = json_object_get(body, "HostConfig");
        json_t *mounts = json_object_get(hc, "Mounts");
        json_t *m = json_pack("{s:s,s:s,s:s,s:b}", "Type", "volume", "Source", d->vol_name,
                              "Target", AGENT_DIR_REMOTE, "ReadOnly", 1);
        json_object_del(body, "Volumes");
        if (!m)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        if (json_is_array(mounts))
            json_array_append_new(mounts, m);
        else
            json_object_set_new(hc, "Mounts", json_pack("[o]", m));
    }
    long st = 0;
    _cleanup_json_ json_t *resp = NULL;
    *step = "creating the container";
    if ((rc = sbx__dk_request(d->engine, "POST", q, body, &st, &resp, err)) < 0)
        return rc == SBX_EPROVIDER ? SBX_ECREATE : rc;
    const char *cid = json_string_value(json_object_get(resp, "Id"));
    if (st != 201 || !cid)
        return sbx__dk_error(err, SBX_ECREATE, st, resp, "creating a container of image '%s'",
                             img);
    /* From here on a failure removes the container: a failed create leaves nothing. */
    _cleanup_json_ json_t *pj = json_pack("{s:s}", "container", cid);
    if (!pj || !(r->provider_json = sbx__json_dump(pj)) || !(r->image = strdup(img))) {
        sbx__dk_remove(d->engine, cid, NULL);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (agent_vol)
        *step = "checking the agent volume";
    if (agent_vol && (rc = agent_volume_ready(d, cid, img, err)) < 0) {
        sbx__dk_remove(d->engine, cid, NULL);
        return rc == SBX_EPROVIDER ? SBX_ECREATE : rc;
    }
    _cleanup_free_ char *sp = sbx__printf("/containers/%s/start", cid);
    _cleanup_json_ json_t *sresp = NULL;
    json_t *info = NULL;
    *step = "starting the container";
    if (!sp)
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    else if ((rc = sbx__dk_request(d->engine, "POST", sp, NULL, &st, &sresp, err)) == SBX_OK &&
             st != 204 && st != 304)
        rc = sbx__dk_error(err, SBX_ECREATE, st, sresp,
                           "starting container %.12s of image '%s'", cid, img);
    if (rc == SBX_OK) {
        *step = "inspecting the started container";
        rc = sbx__dk_inspect(d->engine, cid, &info, err);
    }
    json_t *state = json_object_get(info, "State");
    json_int_t pid = json_integer_value(json_object_get(state, "Pid"));
    if (rc == SBX_OK && (!json_is_true(json_object_get(state, "Running")) || pid <= 0))
        rc = sbx__set_error(err, SBX_ECREATE,
                            "container %.12s of image '%s' stopped as it started (exit code "
                            "%lld): its %s could not run; see `docker logs %s`",
                            cid, img,
                            (long long)json_integer_value(json_object_get(state, "ExitCode")),
                            noagent ? "entrypoint or keepalive" : "agent", r->id);
    /* agent: false: relative paths join the container's workdir (the spec's or the image's). */
    const char *cwd =
        json_string_value(json_object_get(json_object_get(info, "Config"), "WorkingDir"));
    if (rc == SBX_OK && noagent && cwd && cwd[0] == '/' && !r->workdir &&
        !(r->workdir = strdup(cwd)))
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    json_decref(info);
    if (rc == SBX_OK && (!(*cid_out = strdup(cid)) || (user && !(*user_out = strdup(user)))))
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (rc < 0) {
        sbx__dk_remove(d->engine, cid, NULL);
        return rc == SBX_EPROVIDER ? SBX_ECREATE : rc;
    }
    /* The agent's pid here, for connections of their own (agent_address). */
    json_object_set_new(pj, "pid", json_integer(pid));
    char *pjs = sbx__json_dump(pj);
    if (pjs) {
        free(r->provider_json);
        r->provider_json = pjs;
    }
    *pid_out = (pid_t)pid;
    return SBX_OK;
}

/*
 * make_container_steps within create.start_timeout_s for the whole of it,
 * as the reference bounds its `docker run` (the pull included): each
 * request gets what is left. When it runs out, the half-made container is
 * removed (the removal itself unbounded by it), the kit removes the
 * record, and the error says which step it ran out in.
 */
static int make_container(struct docker *d, sbx_op *op, sbx_box_record *r, const char *box_dir,
                          const sbx_spec *spec, bool remote, bool noagent, char **cid_out,
                          pid_t *pid_out, char **user_out, sbx_error **err)
{
    const char *step = "resolving the image";
    struct sbx_dk_deadline old = sbx__dk_deadline_set(d->cfg.start_timeout_s);
    int rc = make_container_steps(d, op, r, box_dir, spec, remote, noagent, cid_out, pid_out,
                                  user_out, &step, err);
    sbx__dk_deadline_swap(old);
    if (rc == SBX_ETIMEDOUT && err && *err)
        *err = sbx_error_prefix(*err,
                                "creating docker box %s: create.start_timeout_s (%gs) ran out "
                                "while %s",
                                r->id, d->cfg.start_timeout_s, step);
    return rc;
}

/* The kit's start hook for a local engine (worker thread): the agent's socket on the mount. */
static int dk_start(sbx_box_record *r, const char *box_dir, const sbx_spec *spec, void *data,
                    char **socket_path, pid_t *peer_pid, sbx_error **err)
{
    struct create_ctx *cx = data;
    struct docker *d = cx->d;
    _cleanup_free_ char *cid = NULL, *user = NULL;
    pid_t pid = 0;
    int rc = make_container(d, cx->op, r, box_dir, spec, false, false, &cid, &pid, &user, err);
    if (rc < 0)
        return rc;
    if (!(*socket_path = sbx__printf("%s/run/agent.sock", box_dir))) {
        sbx__dk_remove(d->engine, cid, NULL);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    /* The agent is PID 1 of the container: its pid here is the engine's State.Pid. */
    *peer_pid = pid;
    return SBX_OK;
}

/*
 * An exec session running `AGENT serve --stdio` (the agent's path in the
 * container) in container `cid`: the stream to it (the remote path).
 * Blocking.
 */
static int open_session(struct docker *d, const char *cid, const char *agent, const char *user,
                        int *fd, sbx_error **err)
{
    json_t *cmd = json_pack("[sss]", agent, "serve", "--stdio");
    if (cmd && d->cfg.shell) {
        json_array_append_new(cmd, json_string("--shell"));
        json_array_append_new(cmd, json_string(d->cfg.shell));
    }
    /* Commands with no user run as the image's, as on the socket path. */
    if (cmd && user && user[0]) {
        json_array_append_new(cmd, json_string("--user"));
        json_array_append_new(cmd, json_string(user));
    }
    _cleanup_json_ json_t *body =
        cmd ? json_pack("{s:b,s:b,s:b,s:b,s:s,s:o}", "AttachStdin", 1, "AttachStdout", 1,
                        "AttachStderr", 1, "Tty", 0, "User", "0", "Cmd", cmd)
            : NULL;
    _cleanup_free_ char *ec = esc(cid);
    _cleanup_free_ char *q = ec ? sbx__printf("/containers/%s/exec", ec) : NULL;
    if (!body || !q)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    long st = 0;
    _cleanup_json_ json_t *resp = NULL;
    int rc = sbx__dk_request(d->engine, "POST", q, body, &st, &resp, err);
    if (rc < 0)
        return rc;
    const char *id = json_string_value(json_object_get(resp, "Id"));
    if (st != 201 || !id)
        return sbx__dk_error(err, st == 404 ? SBX_ENOENT : SBX_EPROVIDER, st, resp,
                             "starting the agent's exec session in container %.12s", cid);
    return sbx__dk_session_open(d->engine, id, fd, err);
}

/* The kit's start hook for the remote path (worker thread): the agent over an exec session. */
static int dk_start_remote(sbx_box_record *r, const char *box_dir, const sbx_spec *spec,
                           void *data, int *fd, sbx_error **err)
{
    struct create_ctx *cx = data;
    struct docker *d = cx->d;
    _cleanup_free_ char *cid = NULL, *user = NULL;
    pid_t pid = 0;
    int rc = make_container(d, cx->op, r, box_dir, spec, true, false, &cid, &pid, &user, err);
    if (rc < 0)
        return rc;
    if ((rc = open_session(d, cid, AGENT_REMOTE, user, fd, err)) < 0) {
        sbx__dk_remove(d->engine, cid, NULL);
        return rc == SBX_EPROVIDER ? SBX_ECREATE : rc;
    }
    return SBX_OK;
}

static void dk_created(sbx_op *op, sbx_box_agent *agent, const sbx_box_record *r, int code,
                       sbx_error *err, void *data)
{
    struct docker *d = ((struct create_ctx *)data)->d;
    free(data);
    if (code < 0) {
        sbx_op_complete(op, code, err, NULL);
        return;
    }
    struct dbox *b = calloc(1, sizeof(*b));
    bool oom = false;
    if (b) {
        b->agent = agent;
        b->id = strdup(r->id);
        b->container = record_container(r);
        if (!use_remote(d)) {
            _cleanup_json_ json_t *pj =
                r->provider_json ? json_loads(r->provider_json, 0, NULL) : NULL;
            b->pid = (pid_t)json_integer_value(json_object_get(pj, "pid"));
            _cleanup_free_ char *run = run_dir(d, r->id);
            oom = !run || !(b->socket = sbx__printf("%s/agent.sock", run));
        }
    }
    if (!b || !b->id || !b->container || oom) {
        if (!b)
            sbx_box_agent_free(agent);
        sbx__dk_box_free(b);
        /* The record and container stay for gc: there is no memory to end them now. */
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    if (d->cfg.probe_command) {
        sbx__dk_probe_start(d, op, b);
        return;
    }
    sbx_op_complete(op, SBX_OK, NULL, b);
}

int sbx__dk_spec_noagent(const struct dk_config *c, const sbx_spec *spec, bool *noagent,
                         sbx_error **err)
{
    *noagent = !c->agent;
    const char *po = sbx_spec_provider_options(spec);
    _cleanup_json_ json_t *o = po ? json_loads(po, 0, NULL) : NULL;
    json_t *a = json_object_get(o, "agent");
    if (!a || json_is_null(a))
        return SBX_OK;
    if (!json_is_boolean(a))
        return sbx__set_error(err, SBX_EINVAL,
                              "provider_options['agent'] must be true or false (docker)");
    *noagent = !json_is_true(a);
    return SBX_OK;
}

/*
 * agent: false: the kit's records and the container, no agent to wait for.
 * The record is written marked `creating` before the container exists (a
 * gc elsewhere leaves it alone; a crash leaves something gc finds), then
 * the container, then the shell check; any failure removes both.
 */
struct nacreate {
    struct docker *d;
    sbx_op *op; /* the caller's */
    const sbx_spec *spec;
    struct dbox *b;
};

static void nacreate_work(sbx_op *inner, void *data)
{
    struct nacreate *j = data;
    struct docker *d = j->d;
    sbx_error *e = NULL;
    sbx_box_record r = {0};
    char id[96];
    _cleanup_free_ char *dir = NULL, *cid = NULL, *user = NULL;
    pid_t pid = 0;
    bool made = false;
    int rc = sbx_box_new_id("sbx", id, sizeof(id));
    if (rc < 0)
        rc = sbx__set_error(&e, rc, "cannot make a box id");
    if (rc == SBX_OK && (rc = sbx_box_record_init(&r, id, j->spec)) < 0)
        rc = sbx__set_error(&e, rc, "cannot make the box record");
    r.creating = 1;
    if (rc == SBX_OK)
        rc = sbx_box_store_box_dir(d->store, id, &dir, &e);
    if (rc == SBX_OK && (rc = sbx_box_record_write(d->store, &r, &e)) == SBX_OK)
        made = true;
    if (rc == SBX_OK)
        rc = make_container(d, j->op, &r, dir, j->spec, true, true, &cid, &pid, &user, &e);
    const char *wd = r.workdir; /* the container's, make_container says */
    r.creating = 0;
    if (rc == SBX_OK)
        rc = sbx_box_record_write(d->store, &r, &e);
    if (rc == SBX_OK) {
        struct dbox *b = calloc(1, sizeof(*b));
        j->b = b;
        if (!b || !(b->id = strdup(id)) || !(b->container = strdup(cid)) ||
            (wd && wd[0] && !(b->workdir = strdup(wd))) ||
            !(b->shell = sbx__dk_noagent_shell(d, cid)))
            rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
        if (b)
            b->noagent = true;
    }
    if (rc < 0 && made) {
        /* The container (by the record) and the record: nothing is left. */
        sbx_error *se = NULL;
        if (sbx_box_store_stop(d->store, id, &se) < 0)
            sbx_log(SBX_LOG_WARNING, "docker: cleaning up box %s: %s", id,
                    sbx_error_message(se));
        sbx_error_free(se);
    }
    if (rc < 0 && dir)
        sbx_box_record_remove(d->store, id, NULL);
    sbx_box_record_clear(&r);
    sbx_op_complete(inner, rc, rc < 0 ? e : NULL, NULL);
    if (rc >= 0)
        sbx_error_free(e);
}

static void nacreate_done(int code, sbx_error *err, void *value, void *data)
{
    (void)value;
    struct nacreate *j = data;
    sbx_op *op = j->op;
    struct dbox *b = j->b;
    struct docker *d = j->d;
    free(j);
    if (code < 0) {
        sbx__dk_box_free(b);
        sbx_op_complete(op, code, err, NULL);
        return;
    }
    sbx_error_free(err);
    if (d->cfg.probe_command) {
        sbx__dk_probe_start(d, op, b);
        return;
    }
    sbx_op_complete(op, SBX_OK, NULL, b);
}

static void dk_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    struct docker *d = state;
    bool noagent = false;
    sbx_error *e = NULL;
    if (sbx__dk_spec_noagent(&d->cfg, spec, &noagent, &e) < 0) {
        sbx_op_complete(op, sbx_error_code(e), e, NULL);
        return;
    }
    if (noagent) {
        struct nacreate *j = calloc(1, sizeof(*j));
        sbx_op *inner = j ? sbx__op_new(sbx__op_provider(op), nacreate_done, j) : NULL;
        if (!inner) {
            free(j);
            sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
            return;
        }
        *j = (struct nacreate){.d = d, .op = op, .spec = spec};
        if (sbx_op_run_blocking(inner, nacreate_work, j) < 0)
            sbx_op_complete(inner, SBX_EIO, sbx_error_new(SBX_EIO, "cannot queue the create"),
                            NULL);
        return;
    }
    /* The create's op rides along for the pull's progress; dk_created frees it. */
    struct create_ctx *cx = calloc(1, sizeof(*cx));
    if (!cx) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    *cx = (struct create_ctx){d, op};
    if (use_remote(d))
        sbx_box_op_create(op, d->store, d->pool, spec, "sbx", dk_start_remote, cx, dk_created, cx);
    else
        sbx_box_op_create_socket(op, d->store, d->pool, spec, "sbx", dk_start, cx, dk_created, cx);
}

/* --- a box's ops ---------------------------------------------------------------------- */

void sbx__dk_box_exec(sbx_op *op, struct docker *d, struct dbox *b, const char *command,
                      const sbx_exec_opts *opts)
{
    if (b->noagent)
        sbx__dk_noagent_exec(op, d, b, command, opts);
    else /* the spec's env is the container's: the agent and every command have it already */
        sbx_box_exec(op, b->agent, command, opts, NULL);
}

static void dk_exec(sbx_op *op, void *state, void *box, const char *command,
                    const sbx_exec_opts *opts)
{
    sbx__dk_box_exec(op, state, box, command, opts);
}

static void dk_upload(sbx_op *op, void *state, void *box, const char *local_path,
                      const char *remote_path)
{
    struct dbox *b = box;
    if (b->noagent)
        sbx__dk_noagent_upload(op, state, b, local_path, remote_path);
    else
        sbx_box_upload(op, b->agent, local_path, remote_path);
}

static void dk_download(sbx_op *op, void *state, void *box, const char *remote_path,
                        const char *local_path)
{
    struct dbox *b = box;
    if (b->noagent)
        sbx__dk_noagent_download(op, state, b, remote_path, local_path);
    else
        sbx_box_download(op, b->agent, remote_path, local_path);
}

/* The reference's status table, over the engine's State.Status. */
sbx_status sbx__dk_status_of(const char *s)
{
    if (!s)
        return SBX_STATUS_UNKNOWN;
    if (!strcasecmp(s, "running"))
        return SBX_STATUS_RUNNING;
    /* The newer reference's PAUSED (its older table read "paused" as running). */
    if (!strcasecmp(s, "paused"))
        return SBX_STATUS_PAUSED;
    if (!strcasecmp(s, "created") || !strcasecmp(s, "restarting"))
        return SBX_STATUS_STARTING;
    if (!strcasecmp(s, "exited") || !strcasecmp(s, "removing") || !strcasecmp(s, "dead"))
        return SBX_STATUS_STOPPED;
    return SBX_STATUS_UNKNOWN;
}

struct status_job {
    struct docker *d;
    char *container;
};

static void status_work(sbx_op *op, void *data)
{
    struct status_job *j = data;
    json_t *info = NULL;
    sbx_error *e = NULL;
    int rc = sbx__dk_inspect(j->d->engine, j->container, &info, &e);
    sbx_status s = rc == SBX_ENOENT ? SBX_STATUS_STOPPED
                   : rc < 0         ? SBX_STATUS_UNKNOWN
                                    : sbx__dk_status_of(json_string_value(json_object_get(
                                          json_object_get(info, "State"), "Status")));
    if (rc < 0 && rc != SBX_ENOENT)
        sbx_log(SBX_LOG_DEBUG, "docker status: %s", sbx_error_message(e));
    sbx_error_free(e);
    json_decref(info);
    free(j->container);
    free(j);
    sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)s);
}

static void dk_status(sbx_op *op, void *state, void *box)
{
    struct dbox *b = box;
    struct status_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->container = strdup(b->container))) {
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->d = state;
    if (sbx_op_run_blocking(op, status_work, j) < 0) {
        free(j->container);
        free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

/* --- pause and resume: the engine's own (the cgroup freezer, as runc does it) --- */

struct pause_job {
    struct docker *d;
    char *container;
    bool pause;
};

static void pause_work(sbx_op *op, void *data)
{
    struct pause_job *j = data;
    sbx_error *e = NULL;
    _cleanup_free_ char *ec = esc(j->container);
    _cleanup_free_ char *path =
        ec ? sbx__printf("/containers/%s/%s", ec, j->pause ? "pause" : "unpause") : NULL;
    long st = 0;
    json_t *resp = NULL;
    int rc = path ? sbx__dk_request(j->d->engine, "POST", path, NULL, &st, &resp, &e)
                  : sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    const char *msg = json_string_value(json_object_get(resp, "message"));
    if (rc >= 0 && st != 204 && st != 200) {
        /*
         * Idempotent, as the ABI says: the engine's "is already paused" (409)
         * and "is not paused" (500 from dockerd 20.10) mean it is done.
         */
        if ((st == 409 || st == 500) && msg &&
            (strstr(msg, "already paused") || strstr(msg, "is not paused")))
            rc = SBX_OK;
        else
            rc = sbx__dk_error(&e, st == 404 ? SBX_ESTATE : SBX_EPROVIDER, st, resp,
                               "%s container %s", j->pause ? "pausing" : "resuming",
                               j->container);
    }
    json_decref(resp);
    free(j->container);
    free(j);
    sbx_op_complete(op, rc, rc < 0 ? e : NULL, NULL);
    if (rc >= 0)
        sbx_error_free(e);
}

static void pause_or_resume(sbx_op *op, struct docker *d, struct dbox *b, bool pause)
{
    struct pause_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->container = strdup(b->container))) {
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->d = d;
    j->pause = pause;
    if (sbx_op_run_blocking(op, pause_work, j) < 0) {
        free(j->container);
        free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

static void dk_pause(sbx_op *op, void *state, void *box) { pause_or_resume(op, state, box, true); }

static void dk_resume(sbx_op *op, void *state, void *box)
{
    pause_or_resume(op, state, box, false);
}

struct close_job {
    struct docker *d;
    char *id, *container;
};

/* An owned box with no record here (connected from elsewhere): its container goes. */
static void close_work(sbx_op *op, void *data)
{
    struct close_job *j = data;
    sbx_error *e = NULL;
    int rc = sbx_box_store_stop(j->d->store, j->id, &e);
    if (rc == SBX_ENOENT) {
        sbx_error_free(e);
        e = NULL;
        rc = sbx__dk_remove(j->d->engine, j->container, &e);
    }
    free(j->id);
    free(j->container);
    free(j);
    sbx_op_complete(op, rc, rc < 0 ? e : NULL, NULL);
    if (rc >= 0)
        sbx_error_free(e);
}

static void dk_close(sbx_op *op, void *state, void *box, int owned)
{
    struct dbox *b = box;
    sbx_box_agent *a = b->agent;
    b->agent = NULL;
    sbx_box_agent_free(a);
    /* A borrowed handle (connect) releases itself only; "owner" scope ends the box. */
    if (!owned && !(b->scope && !strcmp(b->scope, "owner"))) {
        sbx_op_complete(op, SBX_OK, NULL, NULL);
        return;
    }
    struct close_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->id = strdup(b->id)) || !(j->container = strdup(b->container))) {
        if (j)
            free(j->id);
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->d = state;
    if (sbx_op_run_blocking(op, close_work, j) < 0) {
        free(j->id);
        free(j->container);
        free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

static const char *dk_box_id(const void *box)
{
    return ((const struct dbox *)box)->id;
}

/* --- endpoint -------------------------------------------------------------------------------- */

/*
 * The reference's endpoint (providers-local.md §1): the engine's host
 * binding of `port`/tcp in the container's inspect answer (`info`), the one
 * on 127.0.0.1 preferred, a wildcard host replaced by `publish_host`, an
 * IPv6 host bracketed. Writes the malloc'd URL.
 */
int sbx__dk_endpoint_url(const json_t *info, int port, const char *publish_host, char **url,
                         sbx_error **err)
{
    char key[32];
    snprintf(key, sizeof(key), "%d/tcp", port);
    json_t *binds =
        json_object_get(json_object_get(json_object_get(info, "NetworkSettings"), "Ports"), key);
    const char *host = NULL, *hport = NULL;
    size_t i;
    json_t *b;
    json_array_foreach(binds, i, b)
    {
        const char *h = json_string_value(json_object_get(b, "HostIp"));
        const char *p = json_string_value(json_object_get(b, "HostPort"));
        if (!p || !p[0])
            continue;
        if (!hport || (h && !strcmp(h, "127.0.0.1") && strcmp(host ? host : "", "127.0.0.1"))) {
            host = h;
            hport = p;
        }
    }
    if (!hport)
        return sbx__set_error(err, SBX_EPROVIDER,
                              "Docker returned no host binding for sandbox port %d", port);
    char *end;
    errno = 0;
    long pn = strtol(hport, &end, 10);
    if (errno || *end || pn < 1 || pn > 65535 || strlen(host ? host : "") > 64)
        return sbx__set_error(err, SBX_EPROVIDER,
                              "Docker returned an invalid host binding for sandbox port %d", port);
    if (!host || !host[0] || !strcmp(host, "0.0.0.0") || !strcmp(host, "::"))
        host = publish_host ? publish_host : "127.0.0.1";
    unsigned char a6[16];
    bool v6 = inet_pton(AF_INET6, host, a6) == 1;
    *url = sbx__printf("http://%s%s%s:%ld", v6 ? "[" : "", host, v6 ? "]" : "", pn);
    return *url ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

struct endpoint_job {
    struct docker *d;
    char *container;
    int port;
};

static void endpoint_work(sbx_op *op, void *data)
{
    struct endpoint_job *j = data;
    sbx_error *e = NULL;
    json_t *info = NULL;
    char *url = NULL;
    sbx_endpoint *ep = NULL;
    int rc = sbx__dk_inspect(j->d->engine, j->container, &info, &e);
    if (rc == SBX_OK)
        rc = sbx__dk_endpoint_url(info, j->port, j->d->cfg.publish_host, &url, &e);
    if (rc == SBX_OK)
        rc = sbx_endpoint_new(url, &ep, &e);
    json_decref(info);
    free(url);
    free(j->container);
    free(j);
    sbx_op_complete(op, rc, e, rc == SBX_OK ? ep : NULL);
}

static void dk_endpoint(sbx_op *op, void *state, void *box, int port)
{
    struct dbox *b = box;
    struct endpoint_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->container = strdup(b->container))) {
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->d = state;
    j->port = port;
    if (sbx_op_run_blocking(op, endpoint_work, j) < 0) {
        free(j->container);
        free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

/* --- serialize / connect ---------------------------------------------------------------- */

static void dk_serialize(sbx_op *op, void *state, void *box, const char *scope)
{
    (void)state;
    struct dbox *b = box;
    json_t *d = json_pack("{s:s,s:s,s:s}", "provider", "docker", "sandbox_id", b->id,
                          "container", b->container);
    const char *sc = scope ? scope : b->scope;
    if (d && sc)
        json_object_set_new(d, "scope", json_string(sc));
    char *s = d ? sbx__json_dump(d) : NULL;
    json_decref(d);
    sbx_op_complete(op, s ? SBX_OK : SBX_ENOMEM, NULL, s);
}

struct connect_job {
    struct docker *d;
    sbx_op *op;      /* the caller's */
    char *descriptor;
    struct dbox *b;
    char *socket;
    pid_t pid;
    int fd; /* the remote path: the exec session's stream; -1: none */
};

static void connect_job_free(struct connect_job *j)
{
    if (j->fd >= 0)
        close(j->fd);
    sbx__dk_box_free(j->b);
    free(j->descriptor);
    free(j->socket);
    free(j);
}

/*
 * Finds the box's container by the descriptor (container id, else the box
 * id as its name), checks that it runs, and where its agent listens: the
 * host side of the container's /.sbx mount, its PID 1 the only listener.
 */
static void connect_work(sbx_op *op, void *data)
{
    struct connect_job *j = data;
    sbx_error *e = NULL;
    int rc = SBX_OK;
    _cleanup_json_ json_t *d = json_loads(j->descriptor, 0, NULL);
    const char *prov = json_string_value(json_object_get(d, "provider"));
    const char *id = json_string_value(json_object_get(d, "sandbox_id"));
    const char *c = json_string_value(json_object_get(d, "container"));
    const char *scope = json_string_value(json_object_get(d, "scope"));
    _cleanup_json_ json_t *info = NULL;
    if (!json_is_object(d) || (!id && !c))
        rc = sbx__set_error(&e, SBX_EINVAL,
                            "docker sandbox descriptor needs a 'container' or 'sandbox_id' "
                            "string, as serialize() returns");
    else if (prov && strcmp(prov, "docker"))
        rc = sbx__set_error(&e, SBX_EINVAL,
                            "descriptor is for provider '%s', not 'docker'; connect with that "
                            "provider",
                            prov);
    else
        rc = sbx__dk_inspect(j->d->engine, c ? c : id, &info, &e);
    if (rc == SBX_ENOENT)
        e = sbx_error_prefix(e, "docker sandbox %s is gone (stopped, or removed behind sbx's back)",
                             id ? id : c);
    json_t *state = json_object_get(info, "State");
    const char *run = NULL;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(info, "Mounts"), i, m)
    {
        const char *dst = json_string_value(json_object_get(m, "Destination"));
        if (dst && !strcmp(dst, RUN_IN_BOX))
            run = json_string_value(json_object_get(m, "Source"));
    }
    const char *name = json_string_value(json_object_get(info, "Name"));
    /*
     * A box made on the remote path has no bind mount: a session reaches it
     * from anywhere. One made on the socket path is reached on its socket
     * where the engine is local, else through a session of its agent.
     */
    json_t *labels = json_object_get(json_object_get(info, "Config"), "Labels");
    /* A box made with agent: false has no agent to reach: the engine's APIs, as it was made. */
    const char *agent_label = json_string_value(json_object_get(labels, "sbx.agent"));
    bool noagent = agent_label && !strcmp(agent_label, "false");
    bool remote = !noagent && (!run || !sbx__dk_engine_local(j->d->engine));
    if (rc == SBX_OK && !json_is_string(json_object_get(labels, "sbx.sandbox")))
        rc = sbx__set_error(&e, SBX_EINVAL, "container %s is not an sbx docker box (no "
                                            "sbx.sandbox label)",
                            c ? c : id);
    else if (rc == SBX_OK && !remote && !noagent && run[0] != '/')
        rc = sbx__set_error(&e, SBX_EINVAL, "container %s: its %s mount is not a host path",
                            c ? c : id, RUN_IN_BOX);
    else if (rc == SBX_OK && (!json_is_true(json_object_get(state, "Running")) ||
                              json_integer_value(json_object_get(state, "Pid")) <= 0))
        rc = sbx__set_error(&e, SBX_ESTATE, "docker sandbox %s is not running (%s)", c ? c : id,
                            json_string_value(json_object_get(state, "Status")) ?: "?");
    if (rc == SBX_OK) {
        j->pid = (pid_t)json_integer_value(json_object_get(state, "Pid"));
        j->b = calloc(1, sizeof(*j->b));
        if (j->b && !remote && !noagent)
            j->b->pid = j->pid;
        const char *wd = json_string_value(json_object_get(json_object_get(info, "Config"),
                                                           "WorkingDir"));
        if (j->b && noagent)
            j->b->noagent = true;
        if (j->b && remote)
            j->b->bind_agent = run != NULL;
        if (!j->b || (noagent && wd && wd[0] && !(j->b->workdir = strdup(wd))) ||
            (!remote && !noagent &&
             (!(j->socket = sbx__printf("%s/agent.sock", run)) ||
                         !(j->b->socket = strdup(j->socket)))) ||
            !(j->b->container = strdup(json_string_value(json_object_get(info, "Id")) ?: "")) ||
            !(j->b->id = strdup(id ? id : name && name[0] == '/' ? name + 1 : j->b->container)) ||
            (scope && !(j->b->scope = strdup(scope))))
            rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    }
    if (rc == SBX_OK && noagent && !(j->b->shell = sbx__dk_noagent_shell(j->d, j->b->container)))
        rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    /* The remote path: a new exec session of the agent, this handle's own. */
    if (rc == SBX_OK && remote)
        rc = open_session(j->d, j->b->container, run ? AGENT_IN_BOX : AGENT_REMOTE,
                          json_string_value(json_object_get(labels, "sbx.user")), &j->fd, &e);
    sbx_op_complete(op, rc, e, NULL);
}

static void connect_opened(sbx_box_agent *agent, int code, sbx_error *err, void *data)
{
    struct connect_job *j = data;
    sbx_op *op = j->op;
    if (!agent) {
        connect_job_free(j);
        sbx_op_complete(op, code, sbx_error_prefix(err, "connecting to the box's agent"), NULL);
        return;
    }
    struct dbox *b = j->b;
    j->b = NULL;
    b->agent = agent;
    connect_job_free(j);
    sbx_op_complete(op, SBX_OK, NULL, b);
}

static void connect_found(int code, sbx_error *err, void *value, void *data)
{
    (void)value;
    struct connect_job *j = data;
    if (code < 0) {
        sbx_op *op = j->op;
        connect_job_free(j);
        sbx_op_complete(op, code, err, NULL);
        return;
    }
    sbx_error_free(err);
    if (j->b->noagent) {
        sbx_op *op = j->op;
        struct dbox *b = j->b;
        j->b = NULL;
        connect_job_free(j);
        sbx_op_complete(op, SBX_OK, NULL, b);
        return;
    }
    if (j->fd >= 0) {
        int fd = j->fd;
        j->fd = -1;
        sbx_box_agent_open_fd(j->op, j->d->pool, fd, 10.0, NULL, connect_opened, j);
        return;
    }
    sbx_box_agent_open_socket(j->op, j->d->pool, j->socket, j->pid, 10.0, NULL, connect_opened, j);
}

static void dk_connect(sbx_op *op, void *state, const char *descriptor_json)
{
    struct connect_job *j = calloc(1, sizeof(*j));
    if (j)
        j->descriptor = strdup(descriptor_json ? descriptor_json : "");
    sbx_op *inner = j && j->descriptor ? sbx__op_new(sbx__op_provider(op), connect_found, j) : NULL;
    if (!inner) {
        if (j)
            free(j->descriptor);
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->d = state;
    j->op = op;
    j->fd = -1;
    if (sbx_op_run_blocking(inner, connect_work, j) < 0)
        sbx_op_complete(inner, SBX_EIO, sbx_error_new(SBX_EIO, "cannot queue the connect"), NULL);
}

/* --- connections of their own: PTYs, background processes, port forwarding ---------------- */

/*
 * The remote path's relay: a unix socket of this process (a private
 * directory under $TMPDIR), whose every connection (from this process only:
 * SO_PEERCRED) gets an exec session of `sbx-agent relay` to the init
 * agent's socket in the box. The core then speaks to the init agent as on
 * the socket path, so PTY sessions and background processes live in the
 * box's init and outlive the connection, as there.
 */
struct dk_relay {
    struct docker *d;
    char *container;
    const char *agent; /* the agent's path in the box */
    char *dir, *path;
    int lfd;
    pthread_t thread;
};

static void *relay_main(void *arg)
{
    struct dk_relay *r = arg;
    for (;;) {
        int c = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            break; /* shut down: relay_stop */
        }
        struct ucred cred = {0};
        socklen_t cl = sizeof(cred);
        if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.pid != getpid()) {
            sbx_log(SBX_LOG_WARNING, "docker: refused a relay connection from pid %d (not this "
                                     "process)",
                    (int)cred.pid);
            close(c);
            continue;
        }
        json_t *cmd = json_pack("[sss]", r->agent, "relay", SOCKET_IN_BOX);
        _cleanup_json_ json_t *body =
            cmd ? json_pack("{s:b,s:b,s:b,s:b,s:s,s:o}", "AttachStdin", 1, "AttachStdout", 1,
                            "AttachStderr", 1, "Tty", 0, "User", "0", "Cmd", cmd)
                : NULL;
        _cleanup_free_ char *ec = esc(r->container);
        _cleanup_free_ char *q = ec ? sbx__printf("/containers/%s/exec", ec) : NULL;
        sbx_error *e = NULL;
        long st = 0;
        _cleanup_json_ json_t *resp = NULL;
        int rc = body && q ? sbx__dk_request(r->d->engine, "POST", q, body, &st, &resp, &e)
                           : sbx__set_error(&e, SBX_ENOMEM, "out of memory");
        const char *id = json_string_value(json_object_get(resp, "Id"));
        if (rc == SBX_OK && (st != 201 || !id))
            rc = sbx__dk_error(&e, SBX_EPROVIDER, st, resp,
                               "starting a relay to the agent in container %.12s", r->container);
        if (rc == SBX_OK) {
            rc = sbx__dk_session_open_on(r->d->engine, id, c, &e); /* c is the session's */
            c = -1;
        }
        if (rc < 0)
            sbx_log(SBX_LOG_WARNING, "docker: a connection to the agent of container %.12s: %s",
                    r->container, sbx_error_message(e));
        sbx_error_free(e);
        if (c >= 0)
            close(c);
    }
    return NULL;
}

static int relay_start(struct docker *d, struct dbox *b, sbx_error **err)
{
    struct dk_relay *r = calloc(1, sizeof(*r));
    if (!r)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    r->d = d;
    r->lfd = -1;
    r->agent = b->bind_agent ? AGENT_IN_BOX : AGENT_REMOTE;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || tmp[0] != '/' || strlen(tmp) > 60)
        tmp = "/tmp";
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int rc = SBX_OK;
    if (!(r->container = strdup(b->container)) ||
        !(r->dir = sbx__printf("%s/sbx-docker-relay-XXXXXX", tmp)))
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    else if (!mkdtemp(r->dir)) {
        rc = sbx__set_errno(err, SBX_EIO, errno, "docker: cannot make %s", r->dir);
        free(r->dir);
        r->dir = NULL;
    } else if (!(r->path = sbx__printf("%s/agent.sock", r->dir)))
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (rc == SBX_OK) {
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", r->path);
        r->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            listen(r->lfd, 64) < 0)
            rc = sbx__set_errno(err, SBX_EIO, errno, "docker: cannot listen on %s", r->path);
    }
    if (rc == SBX_OK && pthread_create(&r->thread, NULL, relay_main, r) != 0)
        rc = sbx__set_error(err, SBX_EIO, "docker: cannot start the relay thread");
    if (rc < 0) {
        if (r->lfd >= 0)
            close(r->lfd);
        if (r->path)
            unlink(r->path);
        if (r->dir)
            rmdir(r->dir);
        free(r->path);
        free(r->dir);
        free(r->container);
        free(r);
        return rc;
    }
    b->relay = r;
    return SBX_OK;
}

/* Ends the listener (connections already relayed go on until either side ends them). */
static void relay_stop(struct dk_relay *r)
{
    if (!r)
        return;
    shutdown(r->lfd, SHUT_RDWR); /* wakes the accept */
    pthread_join(r->thread, NULL);
    close(r->lfd);
    unlink(r->path);
    rmdir(r->dir);
    free(r->path);
    free(r->dir);
    free(r->container);
    free(r);
}

/*
 * [pty] Where the box's agent listens, for a connection of its own: the
 * socket on the host directory mounted at /.sbx, the container's PID 1 the
 * only process accepted there. The remote path has no such socket on this
 * machine: the relay's socket of this process instead (relay_start).
 */
static void dk_agent_address(sbx_op *op, void *state, void *box)
{
    struct dbox *b = box;
    if (b->noagent) {
        sbx_op_complete(op, SBX_ENOTSUP,
                        sbx_error_new(SBX_ENOTSUP,
                                      "docker box %s runs without sbx's agent (agent: false): "
                                      "PTY sessions, background processes and port forwarding "
                                      "need it",
                                      b->id),
                        NULL);
        return;
    }
    if (!b->socket || b->pid <= 0) {
        /* The remote path: a socket of this process, relayed to the box's agent. */
        sbx_error *e = NULL;
        int rc = b->relay ? SBX_OK : relay_start(state, b, &e);
        json_t *j = rc == SBX_OK ? json_pack("{s:s, s:I}", "socket", b->relay->path, "pid",
                                             (json_int_t)getpid())
                                 : NULL;
        char *text = j ? sbx__json_dump(j) : NULL;
        json_decref(j);
        if (rc == SBX_OK && !text)
            rc = SBX_ENOMEM;
        sbx_op_complete(op, rc, e, text);
        return;
    }
    json_t *j = json_pack("{s:s, s:I}", "socket", b->socket, "pid", (json_int_t)b->pid);
    char *text = j ? sbx__json_dump(j) : NULL;
    json_decref(j);
    sbx_op_complete(op, text ? SBX_OK : SBX_ENOMEM, NULL, text);
}

/* --- provider-wide: the kit's records, with the container as the box -------------------- */

/*
 * The records are this state directory's; a container of sbx's with no
 * record here (a run that crashed before writing one, a box of another
 * state directory or machine user) is still found by its label
 * `sbx.sandbox=1`: list shows it (its provider object's "record" false),
 * stop by its box or container id removes it, and gc collects it once it
 * stopped (or by labels). A running one is never collected by age: it may
 * be another state directory's live box.
 */

/* Every container with the label sbx.sandbox=1, in any state: a JSON array (new ref). Blocking. */
static int label_containers(struct docker *d, json_t **out, sbx_error **err)
{
    _cleanup_free_ char *f = esc("{\"label\":[\"sbx.sandbox=1\"]}");
    _cleanup_free_ char *q = f ? sbx__printf("/containers/json?all=1&filters=%s", f) : NULL;
    if (!q)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    long st = 0;
    json_t *resp = NULL;
    int rc = sbx__dk_request(d->engine, "GET", q, NULL, &st, &resp, err);
    if (rc < 0)
        return rc;
    if (st != 200 || !json_is_array(resp)) {
        rc = sbx__dk_error(err, SBX_EPROVIDER, st, resp, "listing sbx's containers");
        json_decref(resp);
        return rc;
    }
    *out = resp;
    return SBX_OK;
}

/*
 * A listed container's box id (its sbx.box label, else its name) when it
 * is one fit for a path and it has no record or box directory here; NULL
 * for one this store has (or one not to be believed).
 */
static const char *unrecorded_id(struct docker *d, const json_t *c)
{
    json_t *labels = json_object_get(c, "Labels");
    const char *id = json_string_value(json_object_get(labels, "sbx.box"));
    const char *name = json_string_value(json_array_get(json_object_get(c, "Names"), 0));
    if (!id && name)
        id = name[0] == '/' ? name + 1 : name;
    if (!id || !sbx__kit_id_ok(id))
        return NULL;
    _cleanup_free_ char *bd = sbx__printf("%s/boxes/%s", sbx_box_store_path(d->store), id);
    struct stat sb;
    if (!bd || lstat(bd, &sb) == 0 || errno != ENOENT)
        return NULL;
    return id;
}

/* Whether a container's labels hold every one of `want` (an object of strings; NULL: all). */
static bool container_labels_match(const json_t *c, const json_t *want)
{
    json_t *have = json_object_get(c, "Labels");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)want, k, v)
    {
        const char *h = json_string_value(json_object_get(have, k));
        if (!h || !json_is_string(v) || strcmp(h, json_string_value(v)))
            return false;
    }
    return true;
}

/* A listed container with no record here, as list gives a box. */
static json_t *unrecorded_entry(const json_t *c, const char *id)
{
    const char *cid = json_string_value(json_object_get(c, "Id"));
    const char *state = json_string_value(json_object_get(c, "State"));
    json_t *labels = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(c, "Labels"), k, v)
    {
        if (strncmp(k, "sbx.", 4) && json_is_string(v))
            json_object_set(labels, k, v);
    }
    json_t *created = json_object_get(c, "Created");
    const char *image = json_string_value(json_object_get(c, "Image"));
    return json_pack("{s:s, s:s, s:o, s:n, s:o, s:o, s:{s:s,s:s,s:s}, s:{s:s,s:s,s:b}}", "id",
                     id, "status",
                     state && !strcmp(state, "running")   ? "running"
                     : state && !strcmp(state, "created") ? "starting"
                                                          : "error",
                     "created", json_is_integer(created) ? json_real((double)json_integer_value(created))
                                                         : json_null(),
                     "expires_at", "labels", labels, "image",
                     image ? json_string(image) : json_null(), "descriptor", "provider", "docker",
                     "sandbox_id", id, "container", cid ? cid : id, "provider", "container",
                     cid ? cid : id, "state", state ? state : "?", "record", 0);
}

/*
 * gc: the agent volumes of other sbx builds (another hash) go, unless a
 * container still uses one (the engine refuses: 409) or `dry`; each is
 * logged (gc's answer lists boxes only). A box being made by another build
 * meanwhile finds its volume gone, and fills it again (agent_volume_ready).
 */
static void gc_agent_volumes(struct docker *d, bool dry)
{
    sbx_error *e = NULL;
    pthread_mutex_lock(&d->vol_lock);
    int rc = agent_volume_name(d, &e);
    pthread_mutex_unlock(&d->vol_lock);
    _cleanup_free_ char *f = esc("{\"label\":[\"sbx.agent-volume=1\"]}");
    _cleanup_free_ char *q = f ? sbx__printf("/volumes?filters=%s", f) : NULL;
    long st = 0;
    _cleanup_json_ json_t *resp = NULL;
    if (rc < 0 || !q || sbx__dk_request(d->engine, "GET", q, NULL, &st, &resp, &e) < 0 ||
        st != 200) {
        sbx_log(SBX_LOG_DEBUG, "gc: agent volumes not looked at: %s",
                e ? sbx_error_message(e) : "the engine's answer was not a list");
        sbx_error_free(e);
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(resp, "Volumes"), i, v)
    {
        const char *name = json_string_value(json_object_get(v, "Name"));
        /* Only names of our own shape, never this build's. */
        if (!name || strncmp(name, "sbx-agent-", 10) || strlen(name) != 10 + 64 ||
            !strcmp(name, d->vol_name))
            continue;
        if (!dry) {
            _cleanup_free_ char *dq = sbx__printf("/volumes/%s", name);
            long dst = 0;
            _cleanup_json_ json_t *dresp = NULL;
            sbx_error *de = NULL;
            if (!dq || sbx__dk_request(d->engine, "DELETE", dq, NULL, &dst, &dresp, &de) < 0 ||
                (dst != 204 && dst != 404)) {
                /* 409: a container (another build's live box) still has it. */
                sbx_log(SBX_LOG_DEBUG, "gc: agent volume %s kept (%ld%s%s)", name, dst,
                        de ? ": " : "", de ? sbx_error_message(de) : "");
                sbx_error_free(de);
                continue;
            }
        }
        sbx_log(SBX_LOG_INFO, "gc: %s the agent volume %s of another sbx build",
                dry ? "would remove" : "removed", name);
    }
}

enum store_kind { DK_LIST, DK_STOP, DK_GC };
struct store_job {
    struct docker *d;
    enum store_kind kind;
    char *arg;
};

static void store_work(sbx_op *op, void *data)
{
    struct store_job *j = data;
    struct docker *d = j->d;
    sbx_error *e = NULL;
    char *text = NULL;
    int rc = j->kind == DK_LIST ? sbx_box_store_list(d->store, j->arg, &text, &e)
             : j->kind == DK_GC ? sbx_box_store_gc(d->store, j->arg, &text, &e)
                                : sbx_box_store_stop(d->store, j->arg, &e);
    _cleanup_json_ json_t *opts = j->kind != DK_STOP && j->arg ? json_loads(j->arg, 0, NULL) : NULL;
    json_t *want = json_object_get(opts, "labels");
    bool dry = json_is_true(json_object_get(opts, "dry_run"));
    _cleanup_json_ json_t *arr = text ? json_loads(text, 0, NULL) : NULL;
    _cleanup_json_ json_t *cs = NULL;
    if (j->kind == DK_STOP && rc == SBX_ENOENT) {
        /* No record here: a container of sbx's by that box id (its name) or container id. */
        json_t *info = NULL;
        sbx_error *ie = NULL;
        int irc = sbx__dk_inspect(d->engine, j->arg, &info, &ie);
        json_t *labels = json_object_get(json_object_get(info, "Config"), "Labels");
        if (irc == SBX_OK && !json_is_string(json_object_get(labels, "sbx.sandbox"))) {
            sbx_error_free(e);
            rc = sbx__set_error(&e, SBX_EINVAL,
                                "container %s is not an sbx box (no sbx.sandbox label); sbx "
                                "leaves it alone",
                                j->arg);
        } else if (irc == SBX_OK) {
            sbx_error_free(e);
            e = NULL;
            const char *cid = json_string_value(json_object_get(info, "Id"));
            rc = sbx__dk_remove(d->engine, cid ? cid : j->arg, &e);
        } else if (irc != SBX_ENOENT) {
            sbx_error_free(e);
            e = ie, ie = NULL;
            rc = irc;
        }
        sbx_error_free(ie);
        json_decref(info);
    } else if (rc == SBX_OK && j->kind != DK_STOP && json_is_array(arr)) {
        sbx_error *le = NULL;
        if (label_containers(d, &cs, &le) < 0)
            sbx_log(SBX_LOG_DEBUG, "docker: containers without a record not %s: %s",
                    j->kind == DK_LIST ? "listed" : "collected", sbx_error_message(le));
        sbx_error_free(le);
        double now = (double)time(NULL);
        size_t i;
        json_t *c;
        json_array_foreach(cs, i, c)
        {
            const char *id = unrecorded_id(d, c);
            if (!id)
                continue;
            bool match = container_labels_match(c, want);
            if (j->kind == DK_LIST) {
                if (match)
                    json_array_append_new(arr, unrecorded_entry(c, id));
                continue;
            }
            /* gc: a stopped one (a just-made one is some create's, in flight), or by labels. */
            const char *state = json_string_value(json_object_get(c, "State")) ?: "";
            json_int_t made = json_integer_value(json_object_get(c, "Created"));
            bool young = !strcmp(state, "created") && now - (double)made < 60;
            bool collect = (want && match) ||
                           (!want && strcmp(state, "running") && strcmp(state, "paused") &&
                            strcmp(state, "restarting") && !young);
            const char *cid = json_string_value(json_object_get(c, "Id"));
            if (!collect || !cid)
                continue;
            sbx_error *re = NULL;
            if (!dry && sbx__dk_remove(d->engine, cid, &re) < 0) {
                sbx_log(SBX_LOG_WARNING, "gc: container %.12s (box %s): %s", cid, id,
                        sbx_error_message(re));
                sbx_error_free(re);
                continue;
            }
            json_array_append_new(arr, json_string(id));
        }
        if (j->kind == DK_GC && !want)
            gc_agent_volumes(d, dry);
        free(text);
        text = sbx__json_dump(arr);
        if (!text)
            rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    }
    enum store_kind kind = j->kind;
    free(j->arg);
    free(j);
    if (rc < 0) {
        free(text);
        sbx_op_complete(op, rc, e, NULL);
        return;
    }
    sbx_error_free(e);
    if (kind == DK_STOP) {
        free(text);
        text = NULL;
    }
    sbx_op_complete(op, SBX_OK, NULL, text);
}

static void store_op(sbx_op *op, struct docker *d, enum store_kind kind, const char *arg)
{
    struct store_job *j = calloc(1, sizeof(*j));
    if (!j || (arg && !(j->arg = strdup(arg)))) {
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->d = d;
    j->kind = kind;
    if (sbx_op_run_blocking(op, store_work, j) < 0) {
        free(j->arg);
        free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

static void dk_list(sbx_op *op, void *state, const char *filter_json)
{
    store_op(op, state, DK_LIST, filter_json);
}

static void dk_stop_id(sbx_op *op, void *state, const char *id)
{
    store_op(op, state, DK_STOP, id);
}

static void dk_gc(sbx_op *op, void *state, const char *opts_json)
{
    store_op(op, state, DK_GC, opts_json);
}

static void dk_log_stream(sbx_op *op, void *state, void *box, int fd, double since,
                          long long tail, unsigned flags)
{
    sbx__dk_log_stream(op, state, box, fd, since, tail, flags);
}

#define DK_CAPS                                                                                    \
    (SBX_CAP_EXEC_STREAM | SBX_CAP_CONNECT | SBX_CAP_LIST | SBX_CAP_STOP_ID | SBX_CAP_GC |         \
     SBX_CAP_PTY | SBX_CAP_PORT_FORWARD | SBX_CAP_AGENT)

/* `agent: false` in the config: no agent, so no PTYs, forwarding or agent built-ins by default. */
static unsigned long long dk_capabilities_of(const void *state)
{
    const struct docker *d = state;
    if (d && !d->cfg.agent)
        return DK_CAPS & ~(SBX_CAP_AGENT | SBX_CAP_PTY | SBX_CAP_PORT_FORWARD);
    return DK_CAPS;
}

SBX_INTERNAL const struct sbx_provider_ops sbx__docker_provider = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "docker",
    .init = dk_init,
    .release = dk_release,
    .create = dk_create,
    .exec = dk_exec,
    .upload_file = dk_upload,
    .download_file = dk_download,
    .status = dk_status,
    .pause = dk_pause,
    .resume = dk_resume,
    .close = dk_close,
    .box_id = dk_box_id,
    .box_free = sbx__dk_box_free,
    .endpoint = dk_endpoint,
    .serialize = dk_serialize,
    .connect = dk_connect,
    .list = dk_list,
    .stop_id = dk_stop_id,
    .gc = dk_gc,
    .agent_address = dk_agent_address, /* [pty] */
    .log_stream = dk_log_stream,       /* [svc-logs] */
    .capabilities = DK_CAPS,
    .capabilities_of = dk_capabilities_of,
};
