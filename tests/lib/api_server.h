/*
 * The remote kit's API test server (tests/remote/api_server.py) for a test:
 * started on 127.0.0.1 (an ephemeral port) and a unix socket in the test's
 * temp dir, with TLS from a fresh self-signed certificate when asked.
 * Tests run from the source tree (tests/run.sh), where the script is.
 */
#ifndef SBX_TESTS_LIB_API_SERVER_H
#define SBX_TESTS_LIB_API_SERVER_H

#include <sbx.h>
#include <sbx/http.h>
#include <stdbool.h>
#include <sys/types.h>

struct api_server {
    pid_t pid;
    int port;
    char sock_path[600]; /* its unix socket */
    char ca_path[600];   /* with TLS: its certificate, the CA to trust */
};

/* Starts it and waits until it listens; fails the test when it cannot. */
void api_server_start(struct api_server *s, bool tls);
/* Stops it (SIGTERM: it removes its boxes) and reaps it. */
void api_server_stop(struct api_server *s);

/* A client of it named "testapi" (over https when tls; the caller sets the CA); fails the test if refused. */
sbx_http_client *api_server_client(const struct api_server *s, bool tls);

/* api_server_start(), then a new context in *ctx for the test's clients to run on. */
void api_server_start_ctx(struct api_server *s, bool tls, sbx_context **ctx);
/* Frees *ctx (leaving it NULL), then api_server_stop(). */
void api_server_stop_ctx(struct api_server *s, sbx_context **ctx);

#endif
