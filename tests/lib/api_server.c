/* The API test server for a test (api_server.h). */
#include "lib/api_server.h"

#include "common.h"
#include "tap.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

void api_server_start(struct api_server *s, bool tls)
{
    char pf[600], key[600];
    snprintf(pf, sizeof(pf), "%s/port", tap_tmpdir());
    snprintf(s->sock_path, sizeof(s->sock_path), "%s/api.sock", tap_tmpdir());
    snprintf(s->ca_path, sizeof(s->ca_path), "%s/cert.pem", tap_tmpdir());
    snprintf(key, sizeof(key), "%s/key.pem", tap_tmpdir());
    if (tls) {
        char out[2000];
        TAP_EQ_INT(run_cmd(out, sizeof(out),
                           "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                           "-nodes -keyout %s -out %s -subj /CN=127.0.0.1 -addext "
                           "subjectAltName=IP:127.0.0.1 -days 1 >/dev/null 2>&1",
                           key, s->ca_path),
                   0);
    }
    const char *src = "tests/remote/api_server.py";
    s->port = 0;
    s->pid = fork();
    TAP_TRUE(s->pid >= 0);
    if (s->pid == 0) {
        if (tls)
            execl("/usr/bin/python3", "python3", src, "--port-file", pf, "--unix", s->sock_path,
                  "--tls-cert", s->ca_path, "--tls-key", key, (char *)NULL);
        else
            execl("/usr/bin/python3", "python3", src, "--port-file", pf, "--unix", s->sock_path,
                  (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 3000; i++) { /* the alarm bounds it */
        FILE *f = fopen(pf, "re");
        if (f) {
            TAP_EQ_INT(fscanf(f, "%d", &s->port), 1);
            fclose(f);
            break;
        }
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid)
            TAP_FAIL("the API server exited (is python3-aiohttp installed? make deps)");
        usleep(10 * 1000);
    }
    TAP_TRUE(s->port > 0);
}

void api_server_stop(struct api_server *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

void api_server_start_ctx(struct api_server *s, bool tls, sbx_context **ctx)
{
    api_server_start(s, tls);
    TAP_OK(sbx_context_new(ctx, &e_));
}

void api_server_stop_ctx(struct api_server *s, sbx_context **ctx)
{
    sbx_context_free(*ctx);
    *ctx = NULL;
    api_server_stop(s);
}

sbx_http_client *api_server_client(const struct api_server *s, bool tls)
{
    char url[64];
    snprintf(url, sizeof(url), "%s://127.0.0.1:%d", tls ? "https" : "http", s->port);
    sbx_http_client *c = NULL;
    TAP_OK(sbx_http_client_new("testapi", url, &c, &e_));
    return c;
}
