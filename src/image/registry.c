/*
 * The OCI distribution client (see registry.h). One pull:
 *
 *   1. ping GET /v2/ (https; plain http only for insecure or loopback
 *      registries whose https handshake failed), which also gives the
 *      WWW-Authenticate challenge;
 *   2. authenticate: a bearer token from the realm (with basic credentials
 *      from config.json when there are some), or basic;
 *   3. the manifest by tag or digest (an index: the platform's entry, by
 *      digest), every document bounded and checked against its digest;
 *   4. config and layers through curl multi, `parallel` at once, into the
 *      layout's blob writers (hash as they stream, resume from .partial);
 *   5. the manifest chain into the layout, the image manifest tagged with
 *      the canonical reference.
 */
#include "image/registry.h"
#include "image/auth.h"
#include "image/layout.h"
#include "image/manifest.h"
#include "image/ref.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#define TOKEN_MAX (1u << 20)
#define CA_MAX (4u << 20)
/* An error page in answer to a blob request is read this far, then the transfer stops. */
#define ERROR_BODY_MAX (64u << 10)
#define DEFAULT_PARALLEL 3
#define DEFAULT_RETRIES 5
#define USER_AGENT "sbx/0 (+oci-distribution)"

static const char *const ACCEPT_MANIFESTS =
    "Accept: " SBX_MT_OCI_INDEX ", " SBX_MT_DOCKER_LIST ", " SBX_MT_OCI_MANIFEST
    ", " SBX_MT_DOCKER_MANIFEST;

const char *sbx__pull_state_name(sbx_pull_state s)
{
    static const char *const names[] = {"waiting", "downloading", "verifying",
                                        "done",    "cached",      "retrying"};
    return (unsigned)s < SBX_ARRAY_SIZE(names) ? names[s] : "?";
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct client {
    const sbx_pull_opts *o;
    char *name;   /* the registry as a reference names it ("docker.io", "h:5000") */
    char *host;   /* where to connect ("registry-1.docker.io", "h:5000") */
    char *base;   /* "https://host" or "http://host" */
    char *repo;
    char *auth;   /* "Authorization: ..." or NULL */
    char *user, *secret;
    int creds;    /* -1 not looked up, 0 none, 1 have */
    char *ca;     /* the system CAs and certs.d's *.crt, PEM */
    size_t ca_len;
    char *cert, *key; /* certs.d client pair */
    bool may_http;
};

static void client_free(struct client *c)
{
    free(c->name);
    free(c->host);
    free(c->base);
    free(c->repo);
    free(c->auth);
    free(c->user);
    free(c->secret);
    free(c->ca);
    free(c->cert);
    free(c->key);
}

static bool cancelled(const struct client *c)
{
    return c->o->cancelled && c->o->cancelled(c->o->data);
}

static void progress(const struct client *c, const char *digest, const char *kind,
                     uint64_t done, uint64_t total, sbx_pull_state st)
{
    if (c->o->progress)
        c->o->progress(digest, kind, done, total, st, c->o->data);
}

static bool host_in(char **list, const char *host)
{
    for (size_t i = 0; list && list[i]; i++)
        if (!strcmp(list[i], host))
            return true;
    return false;
}

/* 127.0.0.0/8, ::1 and localhost, with or without a port: Docker's implicit insecure set. */
static bool loopback(const char *host)
{
    char h[256];
    const char *end;
    if (host[0] == '[') {
        end = strchr(host, ']');
        if (!end || (size_t)(end - host - 1) >= sizeof(h))
            return false;
        memcpy(h, host + 1, (size_t)(end - host - 1));
        h[end - host - 1] = 0;
        return !strcmp(h, "::1");
    }
    end = strchr(host, ':');
    size_t n = end ? (size_t)(end - host) : strlen(host);
    if (n >= sizeof(h))
        return false;
    memcpy(h, host, n);
    h[n] = 0;
    if (!strcmp(h, "localhost"))
        return true;
    struct in_addr a;
    return inet_pton(AF_INET, h, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* --- TLS: the system CAs plus certs.d/<host>/ (Docker's layout) ---------- */

static int append_file(sbx_buf *b, const char *path, size_t max)
{
    char *d = NULL;
    size_t n = 0;
    if (sbx__read_file(path, &d, &n) < 0)
        return -1;
    int rc = b->len + n > max ? -1 : sbx__buf_append(b, d, n);
    if (rc == 0)
        sbx__buf_append(b, "\n", 1);
    free(d);
    return rc;
}

static int load_certs(struct client *c, sbx_error **err)
{
    static char *const defaults[] = {(char *)"/etc/sbx/certs.d", (char *)"/etc/docker/certs.d",
                                     NULL};
    char *const *dirs = c->o->certs_dirs ? c->o->certs_dirs : defaults;
    /* $SBX_CERTS_DIRS (dir:dir...) stands in for the defaults, as DOCKER_CONFIG does for config.json. */
    char *envdirs[17] = {0};
    _cleanup_free_ char *envcopy = NULL;
    const char *ev = getenv("SBX_CERTS_DIRS");
    if (!c->o->certs_dirs && ev && *ev && (envcopy = strdup(ev))) {
        size_t k = 0;
        char *save = NULL;
        for (char *t = strtok_r(envcopy, ":", &save); t && k < 16; t = strtok_r(NULL, ":", &save))
            envdirs[k++] = t;
        dirs = envdirs;
    }
    sbx_buf b = {0};
    bool extra = false;
    for (size_t i = 0; dirs[i]; i++) {
        _cleanup_free_ char *d = sbx__printf("%s/%s", dirs[i], c->name);
        DIR *dir = d ? opendir(d) : NULL;
        if (!dir)
            continue;
        struct dirent *de;
        while ((de = readdir(dir))) {
            size_t n = strlen(de->d_name);
            if (de->d_name[0] == '.')
                continue;
            _cleanup_free_ char *p = sbx__printf("%s/%s", d, de->d_name);
            if (!p)
                continue;
            if (n > 4 && !strcmp(de->d_name + n - 4, ".crt")) {
                if (append_file(&b, p, CA_MAX) < 0) {
                    closedir(dir);
                    sbx__buf_free(&b);
                    return sbx__set_error(err, SBX_EIO, "cannot read CA certificate %s", p);
                }
                extra = true;
            } else if (n > 5 && !strcmp(de->d_name + n - 5, ".cert") && !c->cert) {
                c->cert = steal_pointer(&p);
                /* Its key: the same name with .key, as Docker pairs them. */
                c->key = sbx__printf("%s/%.*s.key", d, (int)(n - 5), de->d_name);
                if (c->key && access(c->key, R_OK) < 0) {
                    closedir(dir);
                    sbx__buf_free(&b);
                    return sbx__set_error(err, SBX_EINVAL,
                                          "client certificate %s has no key %s next to it",
                                          c->cert, c->key);
                }
            }
        }
        closedir(dir);
        break; /* the first directory that has the registry wins */
    }
    if (extra) {
        /* certs.d adds to the system's CAs (Docker's behaviour), it does not replace them. */
        static const char *const sys[] = {"/etc/ssl/certs/ca-certificates.crt",
                                          "/etc/pki/tls/certs/ca-bundle.crt"};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(sys); i++)
            if (append_file(&b, sys[i], CA_MAX * 2) == 0)
                break;
        c->ca = b.data;
        c->ca_len = b.len;
    } else {
        sbx__buf_free(&b);
    }
    return SBX_OK;
}

/* --- requests ------------------------------------------------------------- */

struct resp {
    sbx_buf body;
    size_t max;
    bool too_big;
    char *content_type;
    char *www_auth;
    char *digest; /* Docker-Content-Digest */
};

static void resp_free(struct resp *r)
{
    sbx__buf_free(&r->body);
    free(r->content_type);
    free(r->www_auth);
    free(r->digest);
    memset(r, 0, sizeof(*r));
}

static size_t body_cb(char *p, size_t sz, size_t n, void *data)
{
    struct resp *r = data;
    (void)sz;
    if (r->body.len + n > r->max) {
        r->too_big = true;
        return 0;
    }
    return sbx__buf_append(&r->body, p, n) == 0 ? n : 0;
}

static char *header_value(const char *line, size_t n, const char *name)
{
    size_t k = strlen(name);
    if (n <= k + 1 || strncasecmp(line, name, k) || line[k] != ':')
        return NULL;
    const char *v = line + k + 1;
    const char *e = line + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
        e--;
    return strndup(v, (size_t)(e - v));
}

static size_t header_cb(char *p, size_t sz, size_t n, void *data)
{
    struct resp *r = data;
    (void)sz;
    /* A new response (a redirect, 100) starts over. */
    if (n >= 5 && !strncmp(p, "HTTP/", 5)) {
        free(r->content_type);
        free(r->www_auth);
        free(r->digest);
        r->content_type = r->www_auth = r->digest = NULL;
    }
    char *v;
    if (n > SBX_WWW_AUTH_MAX)
        return n;
    if ((v = header_value(p, n, "content-type"))) {
        free(r->content_type);
        r->content_type = v;
    } else if ((v = header_value(p, n, "www-authenticate"))) {
        /* The first challenge only; registries send one. */
        if (!r->www_auth)
            r->www_auth = v;
        else
            free(v);
    } else if ((v = header_value(p, n, "docker-content-digest"))) {
        free(r->digest);
        r->digest = v;
    }
    return n;
}

static struct curl_slist *headers_for(const char *accept, const char *auth)
{
    struct curl_slist *h = NULL, *t;
    if (accept && (t = curl_slist_append(h, accept)))
        h = t;
    if (auth && (t = curl_slist_append(h, auth)))
        h = t;
    return h;
}

static void setup(const struct client *c, CURL *e, const char *url)
{
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, USER_AGENT);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, c->base && !strncmp(c->base, "http:", 5)
                                                         ? "http,https"
                                                         : "https");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
    /* A stalled transfer (under 1 KiB/s for 60 s) is a broken connection: retried. */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, 60L);
    if (c->ca) {
        struct curl_blob blob = {.data = c->ca, .len = c->ca_len, .flags = CURL_BLOB_NOCOPY};
        curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &blob);
    }
    if (c->cert) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, c->cert);
        curl_easy_setopt(e, CURLOPT_SSLKEY, c->key);
    }
}

static bool retryable_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

static bool retryable_status(long st)
{
    return st == 429 || st == 502 || st == 503 || st == 504 || st == 500;
}

static void backoff(const struct client *c, int attempt)
{
    /* 250 ms, 500 ms, 1 s, 2 s, 4 s: bounded, polled for cancellation. */
    long ms = 250L << (attempt < 5 ? attempt : 4);
    for (long t = 0; t < ms && !cancelled(c); t += 50) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/*
 * GET url into r (at most `max` bytes), retrying connection failures and
 * 5xx. Returns the HTTP status (>0) or a negative code with err set.
 */
static long get_once(struct client *c, const char *url, const char *accept, const char *auth,
                     size_t max, struct resp *r, CURLcode *ccode, sbx_error **err)
{
    int retries = c->o->retries > 0 ? c->o->retries : DEFAULT_RETRIES;
    for (int attempt = 0;; attempt++) {
        resp_free(r);
        r->max = max;
        if (cancelled(c))
            return sbx__set_error(err, SBX_ECANCELED, "pull cancelled");
        CURL *e = curl_easy_init();
        if (!e)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        struct curl_slist *h = headers_for(accept, auth);
        char ebuf[CURL_ERROR_SIZE] = "";
        setup(c, e, url);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_cb);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
        curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, ebuf);
        curl_easy_setopt(e, CURLOPT_TIMEOUT, 300L);
        CURLcode cc = curl_easy_perform(e);
        long st = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
        curl_easy_cleanup(e);
        curl_slist_free_all(h);
        if (ccode)
            *ccode = cc;
        if (r->too_big)
            return sbx__set_error(err, SBX_EIO, "%s: the response is larger than %zu bytes", url,
                                  max);
        if (cc == CURLE_OK && !retryable_status(st))
            return st;
        bool again = (cc == CURLE_OK ? true : retryable_curl(cc)) && attempt < retries;
        if (!again) {
            if (cc == CURLE_OK)
                return sbx__set_error(err, SBX_EIO, "%s: the registry answered HTTP %ld", url,
                                      st);
            return sbx__set_error(err, SBX_EIO, "%s: %s", url,
                                  ebuf[0] ? ebuf : curl_easy_strerror(cc));
        }
        backoff(c, attempt);
    }
}

/* --- auth ------------------------------------------------------------------ */

static int load_creds(struct client *c, sbx_error **err)
{
    if (c->creds >= 0)
        return SBX_OK;
    int rc = sbx__docker_credentials(c->o->docker_config, c->name, &c->user, &c->secret, err);
    if (rc < 0)
        return rc;
    c->creds = rc;
    return SBX_OK;
}

static char *basic_header(const char *user, const char *secret)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    _cleanup_free_ char *plain = sbx__printf("%s:%s", user, secret);
    if (!plain)
        return NULL;
    size_t n = strlen(plain);
    sbx_buf b = {0};
    sbx__buf_printf(&b, "Authorization: Basic ");
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)plain[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)plain[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)plain[i + 2];
        char q[4] = {t[(v >> 18) & 63], t[(v >> 12) & 63], i + 1 < n ? t[(v >> 6) & 63] : '=',
                     i + 2 < n ? t[v & 63] : '='};
        sbx__buf_append(&b, q, 4);
    }
    sbx__buf_append(&b, "", 1);
    return b.data;
}

static char *url_escape(const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    char *r = e ? strdup(e) : NULL;
    curl_free(e);
    return r;
}

/* Answers a challenge: sets c->auth. */
static int authenticate(struct client *c, const char *challenge, sbx_error **err)
{
    sbx_www_auth a;
    if (!challenge ||
        sbx__www_auth_parse(challenge, strlen(challenge), &a) < 0)
        return sbx__set_error(err, SBX_EIO,
                              "registry %s asked for authentication with a malformed "
                              "WWW-Authenticate header",
                              c->name);
    int rc = load_creds(c, err);
    if (rc < 0)
        goto out;
    if (!strcmp(a.scheme, "basic")) {
        if (c->creds != 1) {
            rc = sbx__set_error(err, SBX_EAUTH,
                                "registry %s requires credentials: add them to "
                                "$DOCKER_CONFIG/config.json or ~/.docker/config.json (auths, "
                                "or `docker login %s`)",
                                c->name, c->name);
            goto out;
        }
        free(c->auth);
        c->auth = basic_header(c->user, c->secret);
        rc = c->auth ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    if (strcmp(a.scheme, "bearer") || !a.realm ||
        (strncmp(a.realm, "https://", 8) && strncmp(a.realm, "http://", 7))) {
        rc = sbx__set_error(err, SBX_EIO,
                            "registry %s asked for authentication sbx does not speak (%.40s; "
                            "it speaks Basic and Bearer with an http(s) realm)",
                            c->name, a.scheme);
        goto out;
    }
    {
        _cleanup_free_ char *scope_raw = sbx__printf("repository:%s:pull", c->repo);
        _cleanup_free_ char *scope = scope_raw ? url_escape(scope_raw) : NULL;
        _cleanup_free_ char *service = a.service ? url_escape(a.service) : NULL;
        _cleanup_free_ char *url =
            sbx__printf("%s%sscope=%s%s%s", a.realm, strchr(a.realm, '?') ? "&" : "?",
                        scope ? scope : "", service ? "&service=" : "", service ? service : "");
        /*
         * The realm is the registry's word: its credentials go there only on
         * the registry's own host and over a scheme no weaker than its own
         * (sbx__realm_may_get_credentials); elsewhere the token is asked for
         * anonymously, which still serves public images.
         */
        bool withheld = c->creds == 1 && !sbx__realm_may_get_credentials(c->base, a.realm);
        if (withheld)
            sbx_log(SBX_LOG_WARNING,
                    "registry %s names the token realm %.200s, on another host or over a "
                    "weaker scheme than %s: its credentials are not sent there",
                    c->name, a.realm, c->base);
        _cleanup_free_ char *basic =
            c->creds == 1 && !withheld ? basic_header(c->user, c->secret) : NULL;
        if (!url || !scope || (c->creds == 1 && !withheld && !basic)) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            goto out;
        }
        struct resp r = {0};
        long st = get_once(c, url, NULL, basic, TOKEN_MAX, &r, NULL, err);
        if (st < 0) {
            rc = (int)st;
            resp_free(&r);
            goto out;
        }
        if ((st == 401 || st == 403) && withheld) {
            rc = sbx__set_error(err, SBX_EAUTH,
                                "the token service of registry %s refused anonymous access (HTTP "
                                "%ld); the credentials for %s were not sent to it because its "
                                "realm %.200s is not on %s over a scheme at least as strong: "
                                "the registry must name a realm on its own host (https for an "
                                "https registry)",
                                c->name, st, c->name, a.realm, c->base);
            resp_free(&r);
            goto out;
        }
        if (st == 401 || st == 403) {
            rc = sbx__set_error(err, SBX_EAUTH,
                                "the token service of registry %s refused %s (HTTP %ld); check "
                                "the credentials in the docker config",
                                c->name, c->creds == 1 ? "the credentials" : "anonymous access",
                                st);
            resp_free(&r);
            goto out;
        }
        json_error_t je;
        _cleanup_json_ json_t *j = st == 200 ? json_loadb(r.body.data ? r.body.data : "",
                                                          r.body.len, 0, &je)
                                             : NULL;
        resp_free(&r);
        const char *tok = json_string_value(json_object_get(j, "token"));
        if (!tok || !*tok)
            tok = json_string_value(json_object_get(j, "access_token"));
        if (!tok || !*tok || strlen(tok) > 64 * 1024 || strpbrk(tok, "\r\n")) {
            rc = sbx__set_error(err, SBX_EIO,
                                "the token service of registry %s answered HTTP %ld without a "
                                "usable token",
                                c->name, st);
            goto out;
        }
        free(c->auth);
        c->auth = sbx__printf("Authorization: Bearer %s", tok);
        rc = c->auth ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
out:
    sbx__www_auth_free(&a);
    return rc;
}

/* GET with authentication: one 401 is answered, a second is refusal. */
static long get(struct client *c, const char *url, const char *accept, size_t max,
                struct resp *r, sbx_error **err)
{
    long st = get_once(c, url, accept, c->auth, max, r, NULL, err);
    if (st != 401)
        return st;
    bool had = c->auth != NULL;
    _cleanup_free_ char *ch = steal_pointer(&r->www_auth);
    int rc = authenticate(c, ch, err);
    if (rc < 0)
        return rc;
    st = get_once(c, url, accept, c->auth, max, r, NULL, err);
    if (st == 401)
        return sbx__set_error(err, SBX_EAUTH,
                              "registry %s refused %s for %s (HTTP 401)%s", c->name,
                              c->creds == 1 ? "the credentials" : "anonymous access", c->repo,
                              c->creds == 1 ? "" : ": add credentials to the docker config");
    (void)had;
    return st;
}

/* --- connecting: scheme and ping ------------------------------------------- */

static int connect_registry(struct client *c, const char *host, sbx_error **err)
{
    free(c->host);
    free(c->base);
    free(c->auth);
    c->auth = NULL;
    c->base = NULL;
    /* A mirror given as a URL keeps its scheme. */
    bool forced_http = !strncmp(host, "http://", 7), forced_https = !strncmp(host, "https://", 8);
    const char *h = forced_http ? host + 7 : forced_https ? host + 8 : host;
    c->host = strndup(h, strcspn(h, "/"));
    if (!c->host)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    c->may_http = forced_http || host_in(c->o->insecure, c->host) || loopback(c->host);
    const char *schemes[2] = {forced_http ? "http" : "https", c->may_http && !forced_http ? "http" : NULL};
    sbx_error *first = NULL;
    for (int i = 0; i < 2 && schemes[i]; i++) {
        c->base = sbx__printf("%s://%s", schemes[i], c->host);
        _cleanup_free_ char *url = sbx__printf("%s/v2/", c->base);
        if (!c->base || !url)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        struct resp r = {0};
        CURLcode cc = CURLE_OK;
        sbx_error *e = NULL;
        long st = get_once(c, url, NULL, NULL, 64 * 1024, &r, &cc, &e);
        if (st == 401) {
            int rc = authenticate(c, r.www_auth, err);
            resp_free(&r);
            sbx_error_free(first);
            return rc;
        }
        resp_free(&r);
        if (st > 0 && st < 500) {
            /* 200 (anonymous) or anything that is a registry talking: go on. */
            sbx_error_free(first);
            return SBX_OK;
        }
        if (st == SBX_ECANCELED) {
            sbx_error_free(first);
            return sbx__fail(err, e);
        }
        /*
         * Only a failed TLS handshake (the server speaks plain HTTP) falls
         * back to http; a certificate that does not verify is refused.
         */
        bool handshake = cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_RECV_ERROR ||
                         cc == CURLE_GOT_NOTHING;
        if (!first)
            first = e;
        else
            sbx_error_free(e);
        if (i == 0 && !handshake)
            break;
        free(c->base);
        c->base = NULL;
    }
    sbx_error *e = first ? first : sbx_error_new(SBX_EIO, "cannot reach registry %s", c->host);
    if (strstr(sbx_error_message(e), "certificate") || strstr(sbx_error_message(e), "SSL"))
        sbx_error_prefix(e, "registry %s: TLS failed (put its CA in "
                            "/etc/sbx/certs.d/%s/ca.crt, or list it as insecure to use plain HTTP)",
                         c->name, c->name);
    return sbx__fail(err, e);
}

/* --- documents ------------------------------------------------------------- */

static void sha256_of(const void *d, size_t n, char out[SBX_DIGEST_LEN])
{
    struct sha256_ctx s;
    uint8_t h[SHA256_DIGEST_SIZE];
    sha256_init(&s);
    sha256_update(&s, n, d);
    sha256_digest(&s, sizeof(h), h);
    memcpy(out, "sha256:", 7);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", h[i]);
}

/* Fetches a manifest (by tag or digest); checks a digest when one is known. */
static int fetch_manifest(struct client *c, const char *layout, const char *reference,
                          const char *want_digest, sbx_manifest **m, char digest[SBX_DIGEST_LEN],
                          char **body, size_t *body_len, sbx_error **err)
{
    _cleanup_free_ char *url = sbx__printf("%s/v2/%s/manifests/%s", c->base, c->repo, reference);
    if (!url)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    struct resp r = {0};
    long st = get(c, url, ACCEPT_MANIFESTS, SBX_MANIFEST_MAX, &r, err);
    if (st < 0) {
        resp_free(&r);
        return (int)st;
    }
    if (st == 404) {
        resp_free(&r);
        return sbx__set_error(err, SBX_ENOENT, "registry %s has no image %s:%s", c->name,
                              c->repo, reference);
    }
    if (st != 200) {
        resp_free(&r);
        return sbx__set_error(err, SBX_EIO, "registry %s answered HTTP %ld for manifest %s:%s",
                              c->name, st, c->repo, reference);
    }
    sha256_of(r.body.data ? r.body.data : "", r.body.len, digest);
    if (want_digest && strcmp(digest, want_digest)) {
        resp_free(&r);
        return sbx__set_error(err, SBX_EIO,
                              "manifest %s from registry %s does not match its digest (got %s)",
                              want_digest, c->name, digest);
    }
    int rc = sbx__manifest_parse(r.body.data ? r.body.data : "", r.body.len, r.content_type, m,
                                 err);
    if (rc == SBX_OK) {
        char put[SBX_DIGEST_LEN];
        rc = sbx__layout_put_blob(layout, r.body.data ? r.body.data : "", r.body.len, put, err);
        progress(c, digest, "manifest", r.body.len, r.body.len, SBX_PULL_DONE);
    }
    if (rc == SBX_OK) {
        *body = steal_pointer(&r.body.data);
        *body_len = r.body.len;
    }
    resp_free(&r);
    return rc;
}

/* --- blobs: curl multi ----------------------------------------------------- */

struct xfer {
    struct client *c;
    const char *layout;
    const sbx_descriptor *d;
    const char *kind;
    sbx_blob_writer *w;
    CURL *e;
    struct curl_slist *h;
    uint64_t offset; /* where this request started */
    uint64_t done;
    long status;
    int attempts;
    double next_try;
    bool restart; /* the server ignored Range: start over */
    bool finished;
    bool transient; /* err is a broken connection or 5xx given up on: the partial may stay */
    size_t junk;    /* bytes of an error page so far */
    sbx_error *err; /* fatal */
    char ebuf[CURL_ERROR_SIZE];
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static size_t blob_cb(char *p, size_t sz, size_t n, void *data)
{
    struct xfer *x = data;
    (void)sz;
    if (!x->status) {
        curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &x->status);
        if (x->status == 200 && x->offset > 0) {
            x->restart = true;
            return 0;
        }
        /* A Content-Length past the declared size is a lie told up front. */
        curl_off_t cl = -1;
        if ((x->status == 200 || x->status == 206) &&
            curl_easy_getinfo(x->e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK &&
            cl >= 0 && (uint64_t)cl > x->d->size - x->offset) {
            x->err = sbx_error_new(SBX_EIO,
                                   "registry %s sends %llu bytes for blob %s of %s from byte "
                                   "%llu, past the %llu bytes its manifest declares: refused",
                                   x->c->name, (unsigned long long)cl, x->d->digest, x->c->repo,
                                   (unsigned long long)x->offset,
                                   (unsigned long long)x->d->size);
            return 0;
        }
    }
    if (x->status != 200 && x->status != 206) {
        /* An error page: discarded, judged at the end; an endless one is stopped. */
        x->junk += n;
        if (x->junk > ERROR_BODY_MAX) {
            x->err = sbx_error_new(SBX_EIO,
                                   "registry %s answered HTTP %ld for blob %s of %s with an "
                                   "error page longer than %u KiB: refused",
                                   x->c->name, x->status, x->d->digest, x->c->repo,
                                   ERROR_BODY_MAX >> 10);
            return 0;
        }
        return n;
    }
    if (x->done + n > x->d->size) {
        x->err = sbx_error_new(SBX_EIO,
                               "registry %s sends more than the %llu bytes its manifest declares "
                               "for blob %s of %s: refused (nothing of it is kept)",
                               x->c->name, (unsigned long long)x->d->size, x->d->digest,
                               x->c->repo);
        return 0;
    }
    sbx_error *e = NULL;
    if (sbx__blob_writer_write(x->w, p, n, &e) < 0) {
        x->err = e;
        return 0;
    }
    x->done += n;
    progress(x->c, x->d->digest, x->kind, x->done, x->d->size, SBX_PULL_DOWNLOADING);
    return n;
}

static void xfer_reset(struct xfer *x, CURLM *m)
{
    if (x->e) {
        curl_multi_remove_handle(m, x->e);
        curl_easy_cleanup(x->e);
        x->e = NULL;
    }
    curl_slist_free_all(x->h);
    x->h = NULL;
}

/* Commits a complete blob (verifying its digest). */
static void xfer_commit(struct xfer *x)
{
    progress(x->c, x->d->digest, x->kind, x->done, x->d->size, SBX_PULL_VERIFYING);
    sbx_error *e = NULL;
    sbx_blob_writer *w = steal_pointer(&x->w);
    if (sbx__blob_writer_commit(w, NULL, &e) < 0) {
        x->err = sbx_error_prefix(e, "registry %s, %s:", x->c->name, x->c->repo);
        return;
    }
    x->finished = true;
    progress(x->c, x->d->digest, x->kind, x->d->size, x->d->size, SBX_PULL_DONE);
}

/* Starts (or restarts) a transfer. Returns false when it needs no request (present, done). */
static bool xfer_start(struct xfer *x, CURLM *m, bool resume)
{
    sbx_error *e = NULL;
    int rc = sbx__blob_writer_begin(x->layout, x->d->digest, resume, &x->w, &e);
    if (rc < 0) {
        x->err = e;
        return false;
    }
    if (rc == 1) {
        x->finished = true;
        progress(x->c, x->d->digest, x->kind, x->d->size, x->d->size, SBX_PULL_CACHED);
        return false;
    }
    x->offset = x->done = sbx__blob_writer_size(x->w);
    if (x->offset > x->d->size) {
        sbx__blob_writer_abort(steal_pointer(&x->w), false);
        return xfer_start(x, m, false);
    }
    if (x->offset == x->d->size) {
        xfer_commit(x);
        return false;
    }
    _cleanup_free_ char *url =
        sbx__printf("%s/v2/%s/blobs/%s", x->c->base, x->c->repo, x->d->digest);
    x->e = curl_easy_init();
    if (!url || !x->e) {
        x->err = sbx_error_new(SBX_ENOMEM, "out of memory");
        return false;
    }
    x->status = 0;
    x->restart = false;
    x->junk = 0;
    x->ebuf[0] = 0;
    x->h = headers_for(NULL, x->c->auth);
    setup(x->c, x->e, url);
    curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, x->h);
    curl_easy_setopt(x->e, CURLOPT_WRITEFUNCTION, blob_cb);
    curl_easy_setopt(x->e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->e, CURLOPT_ERRORBUFFER, x->ebuf);
    if (x->offset)
        curl_easy_setopt(x->e, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)x->offset);
    curl_multi_add_handle(m, x->e);
    progress(x->c, x->d->digest, x->kind, x->done, x->d->size, SBX_PULL_DOWNLOADING);
    return true;
}

/* A transfer ended: done, retry later, or a fatal error in x->err. */
static void xfer_end(struct xfer *x, CURLM *m, CURLcode cc, int retries)
{
    long st = x->status;
    if (!st)
        curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &st);
    _cleanup_free_ char *why = cc != CURLE_OK ? strdup(x->ebuf[0] ? x->ebuf : curl_easy_strerror(cc))
                                              : NULL;
    xfer_reset(x, m);
    if (x->err) {
        /* A lie (more than declared), an endless error page, a failed write: nothing kept. */
        if (x->w)
            sbx__blob_writer_abort(steal_pointer(&x->w), false);
        return;
    }
    if (x->restart) {
        sbx__blob_writer_abort(steal_pointer(&x->w), false);
        x->next_try = 0;
        return;
    }
    if (cc == CURLE_OK && (st == 200 || st == 206) && x->done == x->d->size) {
        xfer_commit(x);
        return;
    }
    bool retry = cc != CURLE_OK ? retryable_curl(cc)
                                : retryable_status(st) || st == 200 || st == 206;
    /* Kept for a resume after a broken transfer; a refusal (401, 404, ...) keeps nothing. */
    if (x->w)
        sbx__blob_writer_abort(steal_pointer(&x->w), retry);
    if (!retry || ++x->attempts > retries) {
        x->transient = retry;
        if (cc != CURLE_OK)
            x->err = sbx_error_new(SBX_EIO, "registry %s: blob %s of %s: %s%s", x->c->name,
                                   x->d->digest, x->c->repo, why ? why : "failed",
                                   retry ? " (gave up after retries; pull again to resume)" : "");
        else if (st == 401 || st == 403)
            x->err = sbx_error_new(SBX_EAUTH, "registry %s refused blob %s of %s (HTTP %ld)",
                                   x->c->name, x->d->digest, x->c->repo, st);
        else if (st == 404)
            x->err = sbx_error_new(SBX_ENOENT, "registry %s has no blob %s for %s", x->c->name,
                                   x->d->digest, x->c->repo);
        else
            x->err = sbx_error_new(SBX_EIO, "registry %s answered HTTP %ld for blob %s of %s",
                                   x->c->name, st, x->d->digest, x->c->repo);
        return;
    }
    progress(x->c, x->d->digest, x->kind, x->done, x->d->size, SBX_PULL_RETRYING);
    x->next_try = now_s() + 0.25 * (double)(1 << (x->attempts < 5 ? x->attempts : 5));
}

static int fetch_blobs(struct client *c, const char *layout, const sbx_descriptor *descs,
                       const char *const *kinds, size_t n, sbx_error **err)
{
    int parallel = c->o->parallel > 0 ? c->o->parallel : DEFAULT_PARALLEL;
    int retries = c->o->retries > 0 ? c->o->retries : DEFAULT_RETRIES;
    struct xfer *xs = calloc(n, sizeof(*xs));
    CURLM *m = curl_multi_init();
    if (!xs || !m) {
        free(xs);
        if (m)
            curl_multi_cleanup(m);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        xs[i] = (struct xfer){.c = c, .layout = layout, .d = &descs[i], .kind = kinds[i]};
        progress(c, descs[i].digest, kinds[i], 0, descs[i].size, SBX_PULL_WAITING);
    }
    int rc = SBX_OK;
    /*
     * What the other transfers leave when one fails: kept for the next pull
     * after a cancel or a broken connection, removed after a refusal or a lie.
     */
    bool keep = true;
    for (;;) {
        if (cancelled(c)) {
            rc = sbx__set_error(err, SBX_ECANCELED, "pull cancelled (partial blobs are kept "
                                                    "for the next pull)");
            break;
        }
        int active = 0;
        size_t left = 0;
        for (size_t i = 0; i < n; i++) {
            active += xs[i].e != NULL;
            left += !xs[i].finished;
        }
        struct xfer *failed = NULL;
        for (size_t i = 0; i < n && !failed; i++)
            if (xs[i].err)
                failed = &xs[i];
        if (failed) {
            keep = failed->transient;
            rc = sbx__fail(err, steal_pointer(&failed->err));
            break;
        }
        if (left == 0)
            break;
        double now = now_s();
        for (size_t i = 0; i < n && active < parallel; i++) {
            struct xfer *x = &xs[i];
            if (x->finished || x->e || x->err || x->next_try > now)
                continue;
            if (xfer_start(x, m, true))
                active++;
        }
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int q;
        while ((msg = curl_multi_info_read(m, &q))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct xfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            xfer_end(x, m, msg->data.result, retries);
        }
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        xfer_reset(&xs[i], m);
        if (xs[i].w)
            sbx__blob_writer_abort(xs[i].w, keep);
        sbx_error_free(xs[i].err);
    }
    curl_multi_cleanup(m);
    free(xs);
    return rc;
}

/* --- the pull -------------------------------------------------------------- */

/* "1.5 GiB": a size for an error message, next to the exact count. */
static const char *human(uint64_t n, char buf[32])
{
    return sbx__human_bytes(n, buf, 32);
}

/* Bytes a blob still needs: 0 when present, less what a partial of it holds. */
static uint64_t still_needed(const char *layout, const sbx_descriptor *d)
{
    if (sbx__layout_has_blob(layout, d->digest))
        return 0;
    _cleanup_free_ char *p = sbx__printf("%s/blobs/sha256/%s.partial", layout, d->digest + 7);
    struct stat st;
    if (p && lstat(p, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= d->size)
        return d->size - (uint64_t)st.st_size;
    return d->size;
}

/*
 * The sizes a manifest declares are the registry's word, and the only
 * bound a blob's stream has (blob_cb stops at it): before a byte is
 * fetched, each blob and their sum must be within opts->max_bytes, and what
 * is still to fetch within the free space of the layout's filesystem.
 */
static int check_sizes(const struct client *c, const char *layout, const sbx_descriptor *all,
                       const char *const *kinds, size_t n, const char *canonical,
                       sbx_error **err)
{
    uint64_t max = c->o->max_bytes, sum = 0, need = 0;
    const char *hint = c->o->max_bytes_hint ? c->o->max_bytes_hint : "";
    const char *sep = *hint ? "; " : "";
    char h1[32], h2[32];
    size_t biggest = n;
    uint64_t biggest_need = 0;
    for (size_t i = 0; i < n; i++) {
        if (max && all[i].size > max)
            return sbx__set_error(err, SBX_EIO,
                                  "registry %s: %s %s of %s declares %llu bytes (%s), more "
                                  "than the %llu bytes (%s) an image may have%s%s",
                                  c->name, kinds[i], all[i].digest, canonical,
                                  (unsigned long long)all[i].size, human(all[i].size, h1),
                                  (unsigned long long)max, human(max, h2), sep, hint);
        sum += all[i].size; /* at most 1001 blobs of at most 1 TiB each: no overflow */
        uint64_t k = still_needed(layout, &all[i]);
        need += k;
        if (k > biggest_need) {
            biggest_need = k;
            biggest = i;
        }
    }
    if (max && sum > max)
        return sbx__set_error(err, SBX_EIO,
                              "registry %s: the config and %zu layers of %s declare %llu bytes "
                              "(%s) together, more than the %llu bytes (%s) an image may have%s%s",
                              c->name, n - 1, canonical, (unsigned long long)sum,
                              human(sum, h1), (unsigned long long)max, human(max, h2), sep,
                              hint);
    struct statvfs vfs;
    if (need == 0 || statvfs(layout, &vfs) < 0)
        return SBX_OK;
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (biggest < n && biggest_need > avail)
        return sbx__set_error(err, SBX_EIO,
                              "registry %s: %s %s of %s declares %llu bytes (%s), more than the "
                              "%llu bytes (%s) free on the filesystem of %s: free space there "
                              "or move the image store",
                              c->name, kinds[biggest], all[biggest].digest, canonical,
                              (unsigned long long)all[biggest].size,
                              human(all[biggest].size, h1), (unsigned long long)avail,
                              human(avail, h2), layout);
    if (need > avail)
        return sbx__set_error(err, SBX_EIO,
                              "registry %s: the blobs of %s still to fetch declare %llu bytes "
                              "(%s) together, more than the %llu bytes (%s) free on the "
                              "filesystem of %s: free space there or move the image store",
                              c->name, canonical, (unsigned long long)need, human(need, h1),
                              (unsigned long long)avail, human(avail, h2), layout);
    return SBX_OK;
}

static int pull_from(struct client *c, const char *layout, const sbx_image_ref *ref,
                     const char *canonical, sbx_error **err)
{
    sbx_manifest *top = NULL, *img = NULL;
    char top_digest[SBX_DIGEST_LEN], img_digest[SBX_DIGEST_LEN];
    _cleanup_free_ char *top_body = NULL, *img_body = NULL;
    size_t top_len = 0, img_len = 0;
    int rc = fetch_manifest(c, layout, sbx__image_ref_reference(ref), ref->digest, &top,
                            top_digest, &top_body, &top_len, err);
    if (rc < 0)
        return rc;
    const char *mt = top->media_type;
    const char *dg = top_digest;
    uint64_t sz = top_len;
    if (top->is_index) {
        size_t which = 0;
        rc = sbx__manifest_select(top, c->o->platform, &which, err);
        if (rc == SBX_OK)
            rc = fetch_manifest(c, layout, top->manifests[which].digest,
                                top->manifests[which].digest, &img, img_digest, &img_body,
                                &img_len, err);
        if (rc == SBX_OK && img->is_index)
            rc = sbx__set_error(err, SBX_EIO, "registry %s: an index inside an index for %s",
                                c->name, canonical);
        if (rc < 0)
            goto out;
        mt = img->media_type;
        dg = img_digest;
        sz = img_len;
    } else {
        img = steal_pointer(&top);
        if (c->o->platform && *c->o->platform)
            sbx_log(SBX_LOG_DEBUG, "%s is a single-platform image; --platform %s not checked",
                    canonical, c->o->platform);
    }
    {
        size_t n = img->n_layers + 1;
        sbx_descriptor *all = calloc(n, sizeof(*all));
        const char **kinds = calloc(n, sizeof(*kinds));
        if (!all || !kinds) {
            free(all);
            free(kinds);
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            goto out;
        }
        all[0] = img->config;
        kinds[0] = "config";
        for (size_t i = 0; i < img->n_layers; i++) {
            all[i + 1] = img->layers[i];
            kinds[i + 1] = "layer";
        }
        rc = check_sizes(c, layout, all, kinds, n, canonical, err);
        if (rc == SBX_OK)
            rc = fetch_blobs(c, layout, all, kinds, n, err);
        free(all);
        free(kinds);
    }
    if (rc == SBX_OK)
        rc = sbx__layout_tag(layout, canonical, mt, dg, sz, err);
out:
    sbx__manifest_free(top);
    sbx__manifest_free(img);
    return rc;
}

int sbx__registry_pull(const char *layout, const char *ref_text, const sbx_pull_opts *o,
                       char **canonical_out, sbx_error **err)
{
    static const sbx_pull_opts none = {0};
    if (!o)
        o = &none;
    pthread_once(&curl_once, curl_init);
    sbx_image_ref ref;
    int rc = sbx__image_ref_parse(ref_text, &ref, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *canonical = sbx__image_ref_canonical(&ref);
    struct client c = {.o = o, .creds = -1};
    c.name = strdup(ref.registry);
    c.repo = strdup(ref.repository);
    if (!canonical || !c.name || !c.repo) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    rc = sbx__layout_init(layout, err);
    if (rc < 0)
        goto out;
    rc = load_certs(&c, err);
    if (rc < 0)
        goto out;
    /* docker.io: its mirrors first, each failure logged, then the hub itself. */
    if (!strcmp(c.name, "docker.io")) {
        for (size_t i = 0; o->mirrors && o->mirrors[i]; i++) {
            sbx_error *e = NULL;
            rc = connect_registry(&c, o->mirrors[i], &e);
            if (rc == SBX_OK)
                rc = pull_from(&c, layout, &ref, canonical, &e);
            if (rc == SBX_OK || rc == SBX_ECANCELED) {
                if (rc < 0)
                    sbx__fail(err, e);
                goto out;
            }
            sbx_log(SBX_LOG_WARNING, "mirror %s: %s; trying the next", o->mirrors[i],
                    sbx_error_message(e));
            sbx_error_free(e);
        }
    }
    rc = connect_registry(&c, !strcmp(c.name, "docker.io") ? "registry-1.docker.io" : c.name,
                          err);
    if (rc == SBX_OK)
        rc = pull_from(&c, layout, &ref, canonical, err);
out:
    if (rc == SBX_OK && canonical_out)
        *canonical_out = steal_pointer(&canonical);
    if (rc < 0 && err && *err && !strstr(sbx_error_message(*err), ref_text))
        sbx_error_prefix(*err, "pulling %s", ref_text);
    client_free(&c);
    sbx__image_ref_free(&ref);
    return rc;
}
