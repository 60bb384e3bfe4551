/* The Docker Engine API client (engine.h): libcurl over a unix socket or TCP/TLS. */
#include "providers/docker/engine.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdarg.h>
#include <time.h>

/* An engine answer larger than this is not one we asked for (inspect is a few KiB). */
#define ENGINE_MAX_BODY ((size_t)8 << 20)
/* A pull-stream line is a small JSON object; a longer one is cut and fails to parse. */
#define ENGINE_MAX_LINE ((size_t)64 << 10)
/* The newest API we speak, and the oldest with what we use (HostConfig.Init, PidsLimit). */
#define ENGINE_API_MAX "1.43"
#define ENGINE_API_MIN 1025

struct sbx_dk_engine {
    char *host;   /* as resolved: unix:///path or tcp://h:p */
    char *socket; /* unix socket path, or NULL */
    char *base;   /* "http://localhost" (unix) or "http(s)://h:p" */
    char *cert, *key, *ca; /* TLS client files, or NULL */
    bool insecure;         /* a context's SkipTLSVerify: the engine's certificate is not checked */
    char *tls_hint;        /* what to do when the engine's certificate fails to verify, or NULL */
    bool local;
    long timeout_ms; /* a bound on each request (0: none); exec sessions are not bounded */
    pthread_mutex_t lock;
    char version[16]; /* negotiated, "" until then */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int sbx__dk_version_num(const char *v)
{
    if (!v)
        return 0;
    char *end;
    long major = strtol(v, &end, 10);
    if (end == v || *end != '.' || major < 1 || major > 9)
        return 0;
    const char *m = end + 1;
    long minor = strtol(m, &end, 10);
    if (end == m || *end || minor < 0 || minor > 999)
        return 0;
    return (int)(major * 1000 + minor);
}

/* Is `h` (a host name or address, maybe [v6]) this machine's loopback? */
static bool loopback(const char *h, size_t n)
{
    char buf[64];
    if (n >= sizeof(buf))
        return false;
    memcpy(buf, h, n);
    buf[n] = 0;
    if (!strcmp(buf, "localhost"))
        return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, buf, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (buf[0] == '[' && n > 2) {
        buf[n - 1] = 0;
        return inet_pton(AF_INET6, buf + 1, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    return false;
}

void sbx__dk_engine_free(sbx_dk_engine *e)
{
    if (!e)
        return;
    pthread_mutex_destroy(&e->lock);
    free(e->host);
    free(e->socket);
    free(e->base);
    free(e->cert);
    free(e->key);
    free(e->ca);
    free(e->tls_hint);
    free(e);
}

/* A small JSON file of the docker CLI's (bounded: it is input like any other). */
static json_t *load_small_json(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0)
        return NULL;
    json_t *j = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (1 << 20))
        j = json_loadfd(fd, 0, NULL);
    close(fd);
    return j;
}

/* dir/name when it is a readable file (malloc'd), else NULL. */
static char *readable_file(const char *dir, const char *name)
{
    char *p = sbx__printf("%s/%s", dir, name);
    if (p && access(p, R_OK) != 0) {
        free(p);
        p = NULL;
    }
    return p;
}

/*
 * The engine of the docker CLI's current context, as the CLI finds it when
 * DOCKER_HOST is unset: $DOCKER_CONTEXT, else config.json's
 * currentContext (in $DOCKER_CONFIG, else ~/.docker); "default" or none
 * means the default socket. A context's endpoint is in
 * contexts/meta/<sha256 of its name>/meta.json, its TLS files in
 * contexts/tls/<same>/docker/. Writes the host (malloc'd) and, when the
 * context has TLS files, their directory (malloc'd), and its
 * SkipTLSVerify. 0 when no context applies; -1 (with `err`) for a context
 * named but not found.
 */
static int context_host(char **host, char **tls_dir, bool *skip_verify, sbx_error **err)
{
    const char *cfgdir = getenv("DOCKER_CONFIG");
    const char *home = getenv("HOME");
    _cleanup_free_ char *dir =
        cfgdir && cfgdir[0] ? strdup(cfgdir) : sbx__printf("%s/.docker", home ? home : "");
    if (!dir)
        return 0;
    const char *name = getenv("DOCKER_CONTEXT");
    _cleanup_json_ json_t *cfg = NULL;
    if (!name || !name[0]) {
        _cleanup_free_ char *cp = sbx__printf("%s/config.json", dir);
        cfg = cp ? load_small_json(cp) : NULL;
        name = json_string_value(json_object_get(cfg, "currentContext"));
    }
    if (!name || !name[0] || !strcmp(name, "default"))
        return 0;
    struct sha256_ctx ctx;
    uint8_t dg[SHA256_DIGEST_SIZE];
    char hex[2 * SHA256_DIGEST_SIZE + 1];
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(name), (const uint8_t *)name);
    sha256_digest(&ctx, sizeof(dg), dg);
    for (size_t i = 0; i < sizeof(dg); i++)
        snprintf(hex + 2 * i, 3, "%02x", dg[i]);
    _cleanup_free_ char *mp = sbx__printf("%s/contexts/meta/%s/meta.json", dir, hex);
    _cleanup_json_ json_t *meta = mp ? load_small_json(mp) : NULL;
    const char *h = json_string_value(json_object_get(
        json_object_get(json_object_get(meta, "Endpoints"), "docker"), "Host"));
    if (!h || !h[0]) {
        sbx__set_error(err, SBX_EINVAL,
                       "docker: the docker context '%s' has no engine endpoint (%s); set "
                       "DOCKER_HOST, or the provider's 'host'",
                       name, mp ? mp : dir);
        return -1;
    }
    *host = strdup(h);
    *skip_verify = json_is_true(json_object_get(
        json_object_get(json_object_get(meta, "Endpoints"), "docker"), "SkipTLSVerify"));
    char *td = sbx__printf("%s/contexts/tls/%s/docker", dir, hex);
    struct stat st;
    if (td && stat(td, &st) == 0 && S_ISDIR(st.st_mode))
        *tls_dir = td;
    else
        free(td);
    return *host ? 1 : 0;
}

int sbx__dk_engine_new(const char *host, const char *api_version, sbx_dk_engine **out,
                       sbx_error **err)
{
    pthread_once(&curl_once, curl_init);
    _cleanup_free_ char *ctx_host = NULL, *ctx_tls = NULL;
    bool ctx_skip = false;
    if (!host || !host[0])
        host = getenv("DOCKER_HOST");
    if ((!host || !host[0]) && context_host(&ctx_host, &ctx_tls, &ctx_skip, err) < 0)
        return SBX_EINVAL;
    if ((!host || !host[0]) && ctx_host)
        host = ctx_host;
    if (!host || !host[0])
        host = "unix:///var/run/docker.sock";
    if (api_version && api_version[0] && sbx__dk_version_num(api_version) < ENGINE_API_MIN)
        return sbx__set_error(err, SBX_EINVAL,
                              "docker: api_version '%s' is not a version this provider can use "
                              "(1.25 or newer, as \"1.41\")",
                              api_version);
    sbx_dk_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    pthread_mutex_init(&e->lock, NULL);
    if (api_version && api_version[0])
        snprintf(e->version, sizeof(e->version), "%s", api_version);
    e->host = strdup(host);
    if (!strncmp(host, "unix://", 7) && host[7] == '/') {
        e->socket = strdup(host + 7);
        e->base = strdup("http://localhost");
        e->local = true;
    } else if (!strncmp(host, "tcp://", 6) && host[6]) {
        const char *hp = host + 6;
        size_t n = strcspn(hp, "/");
        const char *colon = memrchr(hp, ':', n);
        const char *close = memchr(hp, ']', n);
        size_t hn = colon && (!close || colon > close) ? (size_t)(colon - hp) : n;
        e->local = loopback(hp, hn);
        const char *tls = getenv("DOCKER_TLS_VERIFY");
        bool by_ctx = ctx_host && host == ctx_host;
        /*
         * As the docker CLI's context endpoints: TLS when the context has
         * TLS files or SkipTLSVerify; each of ca.pem, cert.pem and key.pem
         * used when there (no CA: the system's), and SkipTLSVerify takes
         * the engine's certificate unchecked.
         */
        if (by_ctx && (ctx_tls || ctx_skip)) {
            e->base = sbx__printf("https://%.*s", (int)n, hp);
            e->insecure = ctx_skip;
            if (ctx_tls) {
                e->ca = readable_file(ctx_tls, "ca.pem");
                e->cert = readable_file(ctx_tls, "cert.pem");
                e->key = readable_file(ctx_tls, "key.pem");
                if (!e->cert || !e->key) {
                    free(e->cert), free(e->key);
                    e->cert = e->key = NULL;
                }
            }
            if (!e->ca && !ctx_skip)
                e->tls_hint = sbx__printf(
                    "the docker context has no ca.pem in %s: put the engine's CA there, or "
                    "set the context's SkipTLSVerify (as `docker context create --docker "
                    "skip-tls-verify=true` does) to take its certificate unchecked",
                    ctx_tls ? ctx_tls : "its TLS directory");
        }
        bool use_tls = !by_ctx && tls && tls[0] && strcmp(tls, "0");
        if (!e->base)
            e->base = sbx__printf("%s://%.*s", use_tls ? "https" : "http", (int)n, hp);
        if (use_tls) {
            /* A context's own TLS files, else the environment's. */
            const char *dir = getenv("DOCKER_CERT_PATH");
            const char *home = getenv("HOME");
            char *d = dir && dir[0] ? strdup(dir) : sbx__printf("%s/.docker", home ? home : "");
            if (d) {
                e->cert = sbx__printf("%s/cert.pem", d);
                e->key = sbx__printf("%s/key.pem", d);
                e->ca = sbx__printf("%s/ca.pem", d);
            }
            free(d);
            if (!e->cert || !e->key || !e->ca) {
                sbx__dk_engine_free(e);
                return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            }
        }
    } else {
        sbx__dk_engine_free(e);
        return sbx__set_error(err, SBX_EINVAL,
                              "docker: cannot reach the engine at '%s': sbx speaks to unix:///PATH "
                              "and tcp://HOST:PORT (ssh:// and npipe:// are not supported); set "
                              "DOCKER_HOST or the provider's 'host'",
                              host);
    }
    if (!e->host || !e->base || (!strncmp(host, "unix://", 7) && !e->socket)) {
        sbx__dk_engine_free(e);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    *out = e;
    return SBX_OK;
}

void sbx__dk_engine_set_timeout(sbx_dk_engine *e, double seconds)
{
    e->timeout_ms = seconds > 0 ? (long)(seconds * 1000.0) : 0;
}

/*
 * A whole operation's deadline (a create's create.start_timeout_s), kept
 * per thread: the create's engine requests all run on one worker thread,
 * and nothing else on it is bounded by it.
 */
static _Thread_local struct sbx_dk_deadline tl_deadline;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct sbx_dk_deadline sbx__dk_deadline_set(double seconds)
{
    struct sbx_dk_deadline old = tl_deadline;
    tl_deadline = seconds > 0 ? (struct sbx_dk_deadline){mono_now() + seconds, seconds}
                              : (struct sbx_dk_deadline){0, 0};
    return old;
}

struct sbx_dk_deadline sbx__dk_deadline_swap(struct sbx_dk_deadline d)
{
    struct sbx_dk_deadline old = tl_deadline;
    tl_deadline = d;
    return old;
}

/*
 * The bound of the next request: the engine's per-request one, cut to what
 * is left of the thread's deadline. SBX_ETIMEDOUT when nothing is left.
 */
static int request_bound(const sbx_dk_engine *e, const char *method, const char *path,
                         long *ms, sbx_error **err)
{
    *ms = e->timeout_ms;
    if (tl_deadline.at <= 0)
        return SBX_OK;
    double left = tl_deadline.at - mono_now();
    if (left <= 0.001)
        return sbx__set_error(err, SBX_ETIMEDOUT,
                              "docker engine at %s: no time was left for %s %s of the %gs "
                              "(create.start_timeout_s)",
                              e->host, method, path, tl_deadline.budget);
    long lms = (long)(left * 1000.0);
    if (*ms <= 0 || lms < *ms)
        *ms = lms > 0 ? lms : 1;
    return SBX_OK;
}

/* The timeout's message: the whole create's bound when that is what ran out. */
/*
 * Why the engine could not be reached, said for what the user can fix: for
 * a unix socket, libcurl's words ("Failed to connect to localhost port 80")
 * hide the cause, so the socket itself is looked at: missing, not a socket,
 * or not ours to open (the docker group).
 */
static int unreachable(const sbx_dk_engine *e, const char *method, const char *path,
                       const char *why, sbx_error **err)
{
    struct stat st;
    if (e->socket && stat(e->socket, &st) < 0 && errno == ENOENT)
        return sbx__set_error(err, SBX_EPROVIDER,
                              "cannot reach the docker engine: there is no socket at %s (is "
                              "dockerd running? is DOCKER_HOST, or the provider's host, right?)",
                              e->socket);
    if (e->socket && stat(e->socket, &st) == 0 && !S_ISSOCK(st.st_mode))
        return sbx__set_error(err, SBX_EPROVIDER,
                              "cannot reach the docker engine: %s is not a socket (is "
                              "DOCKER_HOST, or the provider's host, right?)",
                              e->socket);
    if (e->socket && access(e->socket, R_OK | W_OK) < 0 && errno == EACCES)
        return sbx__set_error(err, SBX_EPERM,
                              "cannot reach the docker engine: permission denied on %s (add "
                              "yourself to its group: sudo usermod -aG docker $USER, then log in "
                              "again; or run rootless dockerd and point DOCKER_HOST at its socket)",
                              e->socket);
    return sbx__set_error(err, SBX_EPROVIDER,
                          "cannot reach the docker engine at %s (%s %s): %s; is dockerd "
                          "running, and is DOCKER_HOST right?",
                          e->host, method, path, why);
}

static int timed_out(const sbx_dk_engine *e, const char *method, const char *path,
                     sbx_error **err)
{
    /* Within a create every request's bound is what is left of the create's. */
    if (tl_deadline.at > 0)
        return sbx__set_error(err, SBX_ETIMEDOUT,
                              "docker engine at %s: %s %s ran past the create's %gs "
                              "(create.start_timeout_s)",
                              e->host, method, path, tl_deadline.budget);
    return sbx__set_error(err, SBX_ETIMEDOUT,
                          "docker engine at %s: %s %s took more than %gs "
                          "(create.start_timeout_s)",
                          e->host, method, path, e->timeout_ms / 1000.0);
}

const char *sbx__dk_engine_host(const sbx_dk_engine *e)
{
    return e->host;
}

bool sbx__dk_engine_local(const sbx_dk_engine *e)
{
    return e->local;
}

/* --- one request ---------------------------------------------------------- */

struct sink {
    sbx_buf body;
    bool too_big;
    char api_version[16]; /* the API-Version header, when asked for */
    /* streaming */
    sbx_dk_line_fn line;
    void *data;
    char *stream_err;
};

static void stream_lines(struct sink *s, bool final);

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t len = size * n;
    if (s->line) {
        if (sbx__buf_append(&s->body, p, len) < 0)
            return 0;
        stream_lines(s, false);
        /* What is left is one unfinished line: an endless one is not a progress report. */
        if (!s->stream_err && s->body.len > ENGINE_MAX_LINE)
            s->stream_err = sbx__printf("a line of the engine's stream passed %zu KiB",
                                        ENGINE_MAX_LINE >> 10);
        return s->stream_err ? 0 : len;
    }
    if (s->body.len + len > ENGINE_MAX_BODY) {
        s->too_big = true;
        return 0;
    }
    return sbx__buf_append(&s->body, p, len) < 0 ? 0 : len;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t len = size * n;
    static const char name[] = "api-version:";
    if (len > sizeof(name) && !strncasecmp(p, name, sizeof(name) - 1)) {
        const char *v = p + sizeof(name) - 1;
        size_t vl = len - (sizeof(name) - 1);
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && isspace((unsigned char)v[vl - 1]))
            vl--;
        if (vl < sizeof(s->api_version)) {
            memcpy(s->api_version, v, vl);
            s->api_version[vl] = 0;
        }
    }
    return len;
}

/* The raw exchange: `url_path` is the whole path (version prefix included). */
int sbx__dk_engine_setup(sbx_dk_engine *e, void *curl, const char *url_path)
{
    CURL *c = curl;
    char *url = sbx__printf("%s%s", e->base, url_path);
    if (!url)
        return SBX_ENOMEM;
    curl_easy_setopt(c, CURLOPT_URL, url); /* curl copies it */
    free(url);
    if (e->socket)
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, e->socket);
    if (e->cert) {
        curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert);
        curl_easy_setopt(c, CURLOPT_SSLKEY, e->key);
    }
    if (e->ca)
        curl_easy_setopt(c, CURLOPT_CAINFO, e->ca);
    if (e->insecure) {
        /* The context's SkipTLSVerify, as the docker CLI's InsecureSkipVerify. */
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    return SBX_OK;
}

static int exchange(sbx_dk_engine *e, const char *method, const char *url_path, const char *body,
                    size_t body_len, const char *content_type, struct sink *s, long *status,
                    sbx_error **err)
{
    CURL *c = curl_easy_init();
    if (!c)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory (curl)");
    char *ct = sbx__printf("Content-Type: %s", content_type ? content_type : "application/json");
    struct curl_slist *hdr = NULL;
    if (ct)
        hdr = curl_slist_append(hdr, ct);
    free(ct);
    hdr = hdr ? curl_slist_append(hdr, "Expect:") : NULL;
    char ebuf[CURL_ERROR_SIZE] = "";
    if (!hdr || sbx__dk_engine_setup(e, c, url_path) < 0) {
        curl_slist_free_all(hdr);
        curl_easy_cleanup(c);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    } else if (!strcmp(method, "POST") || !strcmp(method, "PUT")) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    long ms = 0;
    if (request_bound(e, method, url_path, &ms, err) < 0) {
        curl_slist_free_all(hdr);
        curl_easy_cleanup(c);
        return SBX_ETIMEDOUT;
    }
    if (ms > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
    CURLcode cc = curl_easy_perform(c);
    long st = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    if (s->line && cc == CURLE_OK)
        stream_lines(s, true);
    if (s->stream_err)
        return SBX_OK; /* the caller reports it */
    if (s->too_big)
        return sbx__set_error(err, SBX_EPROVIDER,
                              "docker engine at %s: the answer to %s %s passed %zu MiB; refused",
                              e->host, method, url_path, ENGINE_MAX_BODY >> 20);
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return timed_out(e, method, url_path, err);
    if (cc == CURLE_PEER_FAILED_VERIFICATION && e->tls_hint)
        return sbx__set_error(err, SBX_EPROVIDER,
                              "docker engine at %s (%s %s): its TLS certificate did not verify "
                              "(%s); %s",
                              e->host, method, url_path, ebuf[0] ? ebuf : curl_easy_strerror(cc),
                              e->tls_hint);
    if (cc != CURLE_OK)
        return unreachable(e, method, url_path, ebuf[0] ? ebuf : curl_easy_strerror(cc), err);
    *status = st;
    return SBX_OK;
}

int sbx__dk_engine_version(sbx_dk_engine *e, const char **out, sbx_error **err)
{
    pthread_mutex_lock(&e->lock);
    if (e->version[0]) {
        pthread_mutex_unlock(&e->lock);
        *out = e->version;
        return SBX_OK;
    }
    struct sink s = {0};
    long st = 0;
    int rc = exchange(e, "GET", "/_ping", NULL, 0, NULL, &s, &st, err);
    if (rc == SBX_OK && st != 200)
        rc = sbx__set_error(err, SBX_EPROVIDER, "docker engine at %s: /_ping answered HTTP %ld",
                            e->host, st);
    if (rc == SBX_OK && !s.api_version[0]) {
        /* An engine without the header: /version's ApiVersion. */
        sbx__buf_free(&s.body);
        memset(&s, 0, sizeof(s));
        rc = exchange(e, "GET", "/version", NULL, 0, NULL, &s, &st, err);
        json_t *j = rc == SBX_OK ? json_loadb(s.body.data, s.body.len, 0, NULL) : NULL;
        const char *v = json_string_value(json_object_get(j, "ApiVersion"));
        if (v && strlen(v) < sizeof(s.api_version))
            snprintf(s.api_version, sizeof(s.api_version), "%s", v);
        json_decref(j);
    }
    sbx__buf_free(&s.body);
    if (rc == SBX_OK) {
        int have = sbx__dk_version_num(s.api_version);
        if (have < ENGINE_API_MIN)
            rc = sbx__set_error(err, SBX_EPROVIDER,
                                "docker engine at %s speaks API version '%s'; sbx needs 1.25 "
                                "or newer (Docker 1.13+, Podman 3+)",
                                e->host, s.api_version);
        else
            snprintf(e->version, sizeof(e->version), "%s",
                     have > sbx__dk_version_num(ENGINE_API_MAX) ? ENGINE_API_MAX : s.api_version);
    }
    pthread_mutex_unlock(&e->lock);
    if (rc == SBX_OK)
        *out = e->version;
    return rc;
}

int sbx__dk_request(sbx_dk_engine *e, const char *method, const char *path, json_t *body,
                    long *status, json_t **resp, sbx_error **err)
{
    _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return sbx__dk_request_raw(e, method, path, text, text ? strlen(text) : 0, NULL, status, resp,
                               err);
}

int sbx__dk_request_raw(sbx_dk_engine *e, const char *method, const char *path, const void *data,
                        size_t len, const char *content_type, long *status, json_t **resp,
                        sbx_error **err)
{
    const char *v;
    int rc = sbx__dk_engine_version(e, &v, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *url = sbx__printf("/v%s%s", v, path);
    if (!url)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    struct sink s = {0};
    rc = exchange(e, method, url, data, len, content_type, &s, status, err);
    if (rc == SBX_OK && resp) {
        *resp = s.body.len ? json_loadb(s.body.data, s.body.len, 0, NULL) : NULL;
        /* A non-JSON error body (a proxy, an old engine) still gives its text. */
        if (!*resp && s.body.len && *status >= 400) {
            _cleanup_free_ char *t = sbx__dk_error_text(s.body.data, s.body.len);
            *resp = json_pack("{s:s}", "message", t ? t : "");
        }
    }
    sbx__buf_free(&s.body);
    return rc;
}

/* --- the pull stream ---------------------------------------------------------- */

int sbx__dk_pull_line(const char *line, size_t len, json_t **obj, const char **status,
                      const char **id, long long *current, long long *total, char **errmsg)
{
    *obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
    *status = *id = NULL;
    *current = *total = 0;
    *errmsg = NULL;
    if (!json_is_object(*obj)) {
        json_decref(*obj);
        *obj = NULL;
        return -1;
    }
    json_t *er = json_object_get(*obj, "error");
    json_t *ed = json_object_get(json_object_get(*obj, "errorDetail"), "message");
    if (json_is_string(er) || json_is_string(ed)) {
        const char *m = json_is_string(er) ? json_string_value(er) : json_string_value(ed);
        *errmsg = sbx__dk_error_text(m, strlen(m));
        return 1;
    }
    *status = json_string_value(json_object_get(*obj, "status"));
    *id = json_string_value(json_object_get(*obj, "id"));
    json_t *pd = json_object_get(*obj, "progressDetail");
    json_t *cur = json_object_get(pd, "current"), *tot = json_object_get(pd, "total");
    if (json_is_integer(cur) && json_integer_value(cur) >= 0)
        *current = json_integer_value(cur);
    if (json_is_integer(tot) && json_integer_value(tot) >= 0)
        *total = json_integer_value(tot);
    return 0;
}

static void stream_lines(struct sink *s, bool final)
{
    size_t start = 0;
    for (;;) {
        char *nl = s->body.len > start ? memchr(s->body.data + start, '\n', s->body.len - start)
                                       : NULL;
        size_t end = nl ? (size_t)(nl - s->body.data) : (final ? s->body.len : start);
        if (end == start && !nl)
            break;
        json_t *obj;
        const char *status, *id;
        long long cur, tot;
        char *msg;
        int r = sbx__dk_pull_line(s->body.data + start, end - start, &obj, &status, &id, &cur,
                                  &tot, &msg);
        if (r == 1 && !s->stream_err)
            s->stream_err = msg;
        else
            free(msg);
        if (r == 0 && s->line)
            s->line(status, id, cur, tot, s->data);
        json_decref(obj);
        start = nl ? end + 1 : end;
        if (!nl || s->stream_err)
            break;
    }
    memmove(s->body.data, s->body.data + start, s->body.len - start);
    s->body.len -= start;
}

int sbx__dk_request_stream(sbx_dk_engine *e, const char *method, const char *path, long *status,
                           sbx_dk_line_fn line, void *data, sbx_error **err)
{
    const char *v;
    int rc = sbx__dk_engine_version(e, &v, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *url = sbx__printf("/v%s%s", v, path);
    if (!url)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    struct sink s = {.line = line, .data = data};
    rc = exchange(e, method, url, NULL, 0, NULL, &s, status, err);
    if (rc == SBX_OK && s.stream_err)
        rc = sbx__set_error(err, SBX_EPROVIDER, "%s", s.stream_err);
    else if (rc == SBX_OK && *status >= 400 && s.body.len) {
        /* An error status ends with the body unparsed as lines (no newline): its message. */
        _cleanup_free_ char *t = sbx__dk_error_text(s.body.data, s.body.len);
        rc = sbx__set_error(err, SBX_EPROVIDER, "HTTP %ld: %s", *status, t ? t : "");
    }
    free(s.stream_err);
    sbx__buf_free(&s.body);
    return rc;
}

/* --- errors -------------------------------------------------------------------- */

char *sbx__dk_error_text(const char *body, size_t len)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    const char *m = json_string_value(json_object_get(j, "message"));
    const char *src = m ? m : body;
    size_t n = m ? strlen(m) : len;
    if (n > 512)
        n = 512;
    char *out = malloc(n + 1);
    if (out) {
        /* Printable and one line: it goes into an error message the user reads. */
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)src[i];
            out[o++] = ch == '\n' || ch == '\r' || ch == '\t' ? ' '
                       : (ch < 0x20 || ch == 0x7f)              ? '?'
                                                                : (char)ch;
        }
        while (o && out[o - 1] == ' ')
            o--;
        out[o] = 0;
    }
    json_decref(j);
    return out;
}

int sbx__dk_error(sbx_error **err, int code, long status, const json_t *resp, const char *fmt,
                  ...)
{
    va_list ap;
    va_start(ap, fmt);
    char what[1024];
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    const char *m = json_string_value(json_object_get(resp, "message"));
    _cleanup_free_ char *t = m ? sbx__dk_error_text(m, strlen(m)) : NULL;
    return sbx__set_error(err, code, "%s: docker engine answered HTTP %ld%s%s", what, status,
                          t ? ": " : "", t ? t : "");
}

/* --- streamed bodies (the archive API) ------------------------------------------ */

struct fd_io {
    CURL *c;
    int in_fd, out_fd;
    const int *in_failed;
    /* Instead of out_fd: the body to a callback, and what is asked about stopping. */
    sbx_dk_chunk_fn out_fn;
    int (*stop_fn)(void *data);
    void *out_data;
    sbx_buf err_body; /* a failed answer's body, bounded */
    bool out_broke;
    char *path_stat;
};

static size_t fd_read(char *p, size_t size, size_t n, void *arg)
{
    struct fd_io *io = arg;
    for (;;) {
        ssize_t r = read(io->in_fd, p, size * n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return CURL_READFUNC_ABORT;
        /* The end: a writer that failed must not leave a short body looking whole. */
        if (r == 0 && io->in_failed && __atomic_load_n(io->in_failed, __ATOMIC_ACQUIRE))
            return CURL_READFUNC_ABORT;
        return (size_t)r;
    }
}

static size_t fd_write(char *p, size_t size, size_t n, void *arg)
{
    struct fd_io *io = arg;
    size_t len = size * n;
    long st = 0;
    curl_easy_getinfo(io->c, CURLINFO_RESPONSE_CODE, &st);
    if (st < 200 || st >= 300) {
        if (io->err_body.len + len > 65536)
            return len; /* the start of an error is enough */
        return sbx__buf_append(&io->err_body, p, len) < 0 ? 0 : len;
    }
    if (io->out_fn) {
        if (io->out_fn(p, len, io->out_data) != 0) {
            io->out_broke = true;
            return 0;
        }
        return len;
    }
    if (io->out_fd < 0)
        return len;
    const char *b = p;
    size_t left = len;
    while (left) {
        /* A socket pair: no SIGPIPE when the reader stopped early. */
        ssize_t w = send(io->out_fd, b, left, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            io->out_broke = true;
            return 0;
        }
        b += w;
        left -= (size_t)w;
    }
    return len;
}

static size_t fd_header(char *p, size_t size, size_t n, void *arg)
{
    struct fd_io *io = arg;
    size_t len = size * n;
    static const char name[] = "x-docker-container-path-stat:";
    if (len > sizeof(name) && len < 8192 && !strncasecmp(p, name, sizeof(name) - 1) &&
        !io->path_stat) {
        const char *v = p + sizeof(name) - 1;
        size_t vl = len - (sizeof(name) - 1);
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && isspace((unsigned char)v[vl - 1]))
            vl--;
        io->path_stat = strndup(v, vl);
    }
    return len;
}

/* Called about once a second however silent the engine is: the caller may want to stop. */
static int io_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    struct fd_io *io = arg;
    if (io->stop_fn && io->stop_fn(io->out_data)) {
        io->out_broke = true;
        return 1;
    }
    return 0;
}

/* One request of the archive or log kind (io says where the bodies go); `unbounded`: no timeout. */
static int request_io(sbx_dk_engine *e, const char *method, const char *path, struct fd_io *io,
                      bool unbounded, long *status, json_t **resp, char **path_stat,
                      sbx_error **err)
{
    const char *v;
    int rc = sbx__dk_engine_version(e, &v, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *url = sbx__printf("/v%s%s", v, path);
    CURL *c = url ? curl_easy_init() : NULL;
    struct curl_slist *hdr = c ? curl_slist_append(NULL, "Content-Type: application/x-tar") : NULL;
    hdr = hdr ? curl_slist_append(hdr, "Expect:") : NULL;
    if (!hdr || sbx__dk_engine_setup(e, c, url) < 0) {
        curl_slist_free_all(hdr);
        if (c)
            curl_easy_cleanup(c);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    io->c = c;
    char ebuf[CURL_ERROR_SIZE] = "";
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (io->in_fd >= 0) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L); /* no size: chunked */
        curl_easy_setopt(c, CURLOPT_READFUNCTION, fd_read);
        curl_easy_setopt(c, CURLOPT_READDATA, io);
        /* UPLOAD means PUT; the method given wins. */
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fd_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, io);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, fd_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, io);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    long ms = 0;
    if (io->stop_fn) {
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, io_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, io);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
    if (!unbounded && request_bound(e, method, path, &ms, err) < 0) {
        curl_slist_free_all(hdr);
        curl_easy_cleanup(c);
        sbx__buf_free(&io->err_body);
        return SBX_ETIMEDOUT;
    }
    if (ms > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
    CURLcode cc = curl_easy_perform(c);
    long st = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    if (cc == CURLE_OPERATION_TIMEDOUT)
        rc = timed_out(e, method, path, err);
    else if (io->out_fn && io->out_broke)
        rc = SBX_ECANCELED; /* the caller stopped it: it knows why */
    else if (cc == CURLE_ABORTED_BY_CALLBACK || (cc == CURLE_WRITE_ERROR && io->out_broke))
        rc = sbx__set_error(err, SBX_EIO, "docker engine at %s: %s %s stopped (the local side "
                                          "of the copy failed)",
                            e->host, method, path);
    else if (cc != CURLE_OK)
        rc = unreachable(e, method, path, ebuf[0] ? ebuf : curl_easy_strerror(cc), err);
    if (rc == SBX_OK) {
        *status = st;
        if (resp) {
            *resp = io->err_body.len ? json_loadb(io->err_body.data, io->err_body.len, 0, NULL)
                                    : NULL;
            if (!*resp && io->err_body.len) {
                _cleanup_free_ char *t = sbx__dk_error_text(io->err_body.data, io->err_body.len);
                *resp = json_pack("{s:s}", "message", t ? t : "");
            }
        }
        if (path_stat) {
            *path_stat = io->path_stat;
            io->path_stat = NULL;
        }
    }
    free(io->path_stat);
    sbx__buf_free(&io->err_body);
    return rc;
}

int sbx__dk_request_fd(sbx_dk_engine *e, const char *method, const char *path, int in_fd,
                       const int *in_failed, int out_fd, long *status, json_t **resp,
                       char **path_stat, sbx_error **err)
{
    struct fd_io io = { .in_fd = in_fd, .out_fd = out_fd, .in_failed = in_failed };
    return request_io(e, method, path, &io, false, status, resp, path_stat, err);
}

int sbx__dk_request_each(sbx_dk_engine *e, const char *path, sbx_dk_chunk_fn out,
                         int (*stop)(void *data), void *data, long *status, json_t **resp,
                         sbx_error **err)
{
    struct fd_io io = { .in_fd = -1, .out_fd = -1, .out_fn = out, .stop_fn = stop,
                        .out_data = data };
    return request_io(e, "GET", path, &io, true, status, resp, NULL, err);
}
