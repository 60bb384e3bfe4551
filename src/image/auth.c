/* WWW-Authenticate parsing and Docker config.json credentials (see auth.h). */
#include "image/auth.h"

#include <ctype.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#define CONFIG_MAX (1u << 20)
#define HELPER_OUT_MAX (64u << 10)
#define HELPER_TIMEOUT_MS 30000

extern char **environ;

void sbx__www_auth_free(sbx_www_auth *a)
{
    if (!a)
        return;
    free(a->scheme);
    free(a->realm);
    free(a->service);
    free(a->scope);
    free(a->error);
    memset(a, 0, sizeof(*a));
}

static bool tchar(char c)
{
    return isalnum((unsigned char)c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/*
 * RFC 7235: challenge = auth-scheme [ 1*SP ( token68 / #auth-param ) ],
 * auth-param = token BWS "=" BWS ( token / quoted-string ). Only the first
 * challenge is read; a second one starts at a token not followed by '='.
 */
int sbx__www_auth_parse(const char *v, size_t len, sbx_www_auth *out)
{
    if (!v || len > SBX_WWW_AUTH_MAX)
        return -1;
    sbx_www_auth a = {0};
    size_t i = 0;
    while (i < len && (v[i] == ' ' || v[i] == '\t'))
        i++;
    size_t s0 = i;
    while (i < len && tchar(v[i]))
        i++;
    if (i == s0)
        return -1;
    a.scheme = strndup(v + s0, i - s0);
    if (!a.scheme)
        return -1;
    for (char *p = a.scheme; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    char val[SBX_WWW_AUTH_MAX + 1];
    for (;;) {
        while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        if (i >= len)
            break;
        size_t k0 = i;
        while (i < len && tchar(v[i]))
            i++;
        size_t kn = i - k0;
        if (kn == 0)
            goto bad;
        size_t j = i;
        while (j < len && (v[j] == ' ' || v[j] == '\t'))
            j++;
        if (j >= len || v[j] != '=') {
            if (j < len && v[j] != ',' && k0 == s0)
                goto bad;
            break; /* the next challenge's scheme */
        }
        i = j + 1;
        while (i < len && (v[i] == ' ' || v[i] == '\t'))
            i++;
        size_t vn = 0;
        if (i < len && v[i] == '"') {
            i++;
            bool closed = false;
            while (i < len) {
                char c = v[i++];
                if (c == '"') {
                    closed = true;
                    break;
                }
                if (c == '\\') {
                    if (i >= len)
                        goto bad;
                    c = v[i++];
                }
                if ((unsigned char)c < 0x20 && c != '\t')
                    goto bad;
                val[vn++] = c;
            }
            if (!closed)
                goto bad;
        } else {
            size_t v0 = i;
            while (i < len && (tchar(v[i]) || v[i] == '/' || v[i] == ':' || v[i] == '='))
                i++;
            vn = i - v0;
            memcpy(val, v + v0, vn);
        }
        val[vn] = 0;
        if (memchr(val, 0, vn))
            goto bad;
        char **dst = NULL;
#define KEY(name) (kn == sizeof(name) - 1 && !strncasecmp(v + k0, name, kn))
        if (KEY("realm"))
            dst = &a.realm;
        else if (KEY("service"))
            dst = &a.service;
        else if (KEY("scope"))
            dst = &a.scope;
        else if (KEY("error"))
            dst = &a.error;
#undef KEY
        if (dst) {
            free(*dst);
            *dst = strdup(val);
            if (!*dst)
                goto bad;
        }
    }
    *out = a;
    return 0;
bad:
    sbx__www_auth_free(&a);
    return -1;
}

/* --- where credentials may go ------------------------------------------------ */

/*
 * Splits an http(s) URL into its scheme and lower-case host (no port, no
 * brackets). Anything a URL parser could read two ways is refused: user
 * info ('@'), a backslash, a percent sign or any byte but letters, digits,
 * '-', '.' (and ':' inside brackets) in the host, a port that is not digits.
 */
static bool url_host(const char *url, bool *https, char host[256])
{
    size_t skip;
    if (!strncasecmp(url, "https://", 8)) {
        *https = true;
        skip = 8;
    } else if (!strncasecmp(url, "http://", 7)) {
        *https = false;
        skip = 7;
    } else {
        return false;
    }
    const char *a = url + skip;
    size_t n = strcspn(a, "/?#");
    if (n == 0 || memchr(a, '@', n) || memchr(a, '\\', n) || memchr(a, '%', n))
        return false;
    const char *h = a, *end = a + n, *port = NULL;
    size_t hn;
    bool v6 = *h == '[';
    if (v6) {
        const char *close = memchr(h, ']', n);
        if (!close)
            return false;
        h++;
        hn = (size_t)(close - h);
        port = close + 1 < end ? close + 1 : NULL;
        if (port && *port != ':')
            return false;
    } else {
        const char *colon = memchr(h, ':', n);
        hn = colon ? (size_t)(colon - h) : n;
        port = colon;
    }
    if (port) {
        if (port + 1 >= end)
            return false;
        for (const char *p = port + 1; p < end; p++)
            if (!isdigit((unsigned char)*p))
                return false;
    }
    if (hn == 0 || hn >= 256)
        return false;
    for (size_t i = 0; i < hn; i++) {
        char c = h[i];
        if (!(isalnum((unsigned char)c) || c == '-' || c == '.' || (v6 && c == ':')))
            return false;
        host[i] = (char)tolower((unsigned char)c);
    }
    host[hn] = 0;
    return true;
}

bool sbx__realm_may_get_credentials(const char *registry_base, const char *realm)
{
    char rh[256], th[256];
    bool r_https, t_https;
    /* '@' or '\\' anywhere: parsers disagree on where such a URL's host ends
     * (WHATWG reads a backslash as '/'), so none is trusted, in its path either. */
    if (!registry_base || !realm || strpbrk(realm, "@\\") ||
        !url_host(registry_base, &r_https, rh) || !url_host(realm, &t_https, th))
        return false;
    /* Never a weaker scheme than the registry's: https credentials stay on TLS. */
    if (r_https && !t_https)
        return false;
    if (!strcmp(rh, th))
        return true;
    /* Docker Hub serves tokens from another host of its own. */
    return !strcmp(th, "auth.docker.io") &&
           (!strcmp(rh, "registry-1.docker.io") || !strcmp(rh, "index.docker.io"));
}

/* --- config.json ----------------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_decode(const char *s, size_t *n_out)
{
    size_t n = strlen(s);
    char *out = malloc(n / 4 * 3 + 4);
    if (!out)
        return NULL;
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=')
            break;
        const char *p = strchr(b64, s[i]);
        if (!p || !s[i]) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)(p - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[o] = 0;
    *n_out = o;
    return out;
}

/* The host part of a config key: "https://host:port/v1/" -> "host:port". */
static bool key_matches(const char *key, const char *registry)
{
    const char *k = key;
    if (!strncmp(k, "https://", 8))
        k += 8;
    else if (!strncmp(k, "http://", 7))
        k += 7;
    size_t kl = strcspn(k, "/");
    if (!strcmp(registry, "docker.io"))
        return (kl == 15 && !strncmp(k, "index.docker.io", 15)) ||
               (kl == 9 && !strncmp(k, "docker.io", 9)) ||
               (kl == 20 && !strncmp(k, "registry-1.docker.io", 20));
    return kl == strlen(registry) && !strncmp(k, registry, kl);
}

static bool helper_name_ok(const char *n)
{
    if (!n || !*n || strlen(n) > 64)
        return false;
    for (const char *p = n; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return false;
    return n[0] != '.';
}

/* Runs `docker-credential-NAME get` with the server on stdin, as Docker does. */
static int run_helper(const char *name, const char *server, char **user, char **secret,
                      sbx_error **err)
{
    if (!helper_name_ok(name))
        return sbx__set_error(err, SBX_EINVAL,
                              "docker config: credential helper name '%s' is not a plain name",
                              name);
    _cleanup_free_ char *prog = sbx__printf("docker-credential-%s", name);
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (!prog || pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
        int e = errno;
        if (in[0] >= 0) {
            close(in[0]);
            close(in[1]);
        }
        return sbx__set_errno(err, SBX_EIO, e, "cannot run %s", prog ? prog : "helper");
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = {prog, (char *)"get", NULL};
    pid_t pid;
    int src = posix_spawnp(&pid, prog, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    if (src != 0) {
        close(in[1]);
        close(out[0]);
        return sbx__set_errno(err, SBX_EIO, src,
                              "docker config names credential helper %s, which cannot be run "
                              "(is %s on PATH?)",
                              name, prog);
    }
    /* The server name is short: one write fits a pipe; EPIPE is the helper's exit. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigaction(SIGPIPE, &ign, &old);
    ssize_t wn = write(in[1], server, strlen(server));
    (void)wn;
    sigaction(SIGPIPE, &old, NULL);
    close(in[1]);
    sbx_buf b = {0};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool timed_out = false, too_big = false;
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long ms = HELPER_TIMEOUT_MS - ((t.tv_sec - t0.tv_sec) * 1000 +
                                       (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (ms <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        int pr = poll(&p, 1, (int)ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            timed_out = pr == 0;
            break;
        }
        char chunk[4096];
        ssize_t r = read(out[0], chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (b.len + (size_t)r > HELPER_OUT_MAX) {
            too_big = true;
            break;
        }
        sbx__buf_append(&b, chunk, (size_t)r);
    }
    close(out[0]);
    if (timed_out || too_big)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = SBX_OK;
    if (timed_out)
        rc = sbx__set_error(err, SBX_ETIMEDOUT, "credential helper %s did not answer in %d s",
                            prog, HELPER_TIMEOUT_MS / 1000);
    else if (too_big)
        rc = sbx__set_error(err, SBX_EIO, "credential helper %s wrote more than %u KiB", prog,
                            HELPER_OUT_MAX >> 10);
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        /* "credentials not found in native keychain": none, as Docker treats it. */
        rc = 0;
    } else {
        json_error_t je;
        _cleanup_json_ json_t *j = b.data ? json_loadb(b.data, b.len, 0, &je) : NULL;
        const char *u = json_string_value(json_object_get(j, "Username"));
        const char *s = json_string_value(json_object_get(j, "Secret"));
        if (!u || !s)
            rc = sbx__set_error(err, SBX_EIO,
                                "credential helper %s answered without Username and Secret", prog);
        else if ((*user = strdup(u)) && (*secret = strdup(s)))
            rc = 1;
        else
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    sbx__buf_free(&b);
    return rc;
}

int sbx__docker_credentials(const char *config_dir, const char *registry, char **user,
                            char **secret, sbx_error **err)
{
    _cleanup_free_ char *dir = NULL;
    if (config_dir && *config_dir)
        dir = strdup(config_dir);
    else if (getenv("DOCKER_CONFIG") && *getenv("DOCKER_CONFIG"))
        dir = strdup(getenv("DOCKER_CONFIG"));
    else if (getenv("HOME"))
        dir = sbx__printf("%s/.docker", getenv("HOME"));
    if (!dir)
        return 0;
    _cleanup_free_ char *path = sbx__printf("%s/config.json", dir);
    char *text = NULL;
    size_t n = 0;
    if (!path || sbx__read_file(path, &text, &n) < 0)
        return 0; /* no config: anonymous */
    if (n > CONFIG_MAX) {
        free(text);
        return sbx__set_error(err, SBX_EINVAL, "%s is larger than %u KiB", path,
                              CONFIG_MAX >> 10);
    }
    json_error_t je;
    _cleanup_json_ json_t *j = json_loadb(text, n, 0, &je);
    free(text);
    if (!json_is_object(j))
        return sbx__set_error(err, SBX_EINVAL, "%s is not a JSON object: %s", path, je.text);
    const char *server = !strcmp(registry, "docker.io") ? "https://index.docker.io/v1/" : registry;
    /* credHelpers for this registry first, then auths, then credsStore (Docker's order). */
    json_t *helpers = json_object_get(j, "credHelpers");
    const char *k;
    json_t *v;
    json_object_foreach(helpers, k, v)
    {
        if (key_matches(k, registry) && json_is_string(v))
            return run_helper(json_string_value(v), server, user, secret, err);
    }
    json_object_foreach(json_object_get(j, "auths"), k, v)
    {
        if (!key_matches(k, registry) || !json_is_object(v))
            continue;
        const char *a = json_string_value(json_object_get(v, "auth"));
        const char *u = json_string_value(json_object_get(v, "username"));
        const char *p = json_string_value(json_object_get(v, "password"));
        if (a && *a) {
            size_t dl = 0;
            _cleanup_free_ char *dec = b64_decode(a, &dl);
            char *colon = dec && strlen(dec) == dl ? strchr(dec, ':') : NULL;
            if (!colon)
                return sbx__set_error(err, SBX_EINVAL,
                                      "%s: auths.%s.auth is not base64 of user:password", path, k);
            *colon = 0;
            *user = strdup(dec);
            *secret = strdup(colon + 1);
        } else if (u && p) {
            *user = strdup(u);
            *secret = strdup(p);
        } else {
            continue; /* an entry without credentials: the store may have them */
        }
        if (!*user || !*secret) {
            free(*user);
            free(*secret);
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
        return 1;
    }
    const char *store = json_string_value(json_object_get(j, "credsStore"));
    if (store && *store)
        return run_helper(store, server, user, secret, err);
    return 0;
}
