/*
 * libFuzzer target for the host side's dispatcher (src/kit/client.c): the
 * bytes are what a box's agent — hostile, since the box is — sends back. A
 * real client connection on a real sbx loop reads them from a socket pair,
 * with four operations in flight as a user would start them: an exec
 * (channel 1), an upload (2), a download into a private temporary directory
 * (3) and a ping. The input then ends (EOF), and every operation must
 * complete, whatever was said: a crash, a leak, or an operation that never
 * completes (libFuzzer's -timeout) is a finding.
 */
#include "core/internal.h"
#include "kit/client.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sbx_provider *P;
static char dir[64], up_path[96], down_path[96];

struct run {
    pthread_mutex_t m;
    pthread_cond_t cv;
    int pending; /* the connect, then each operation */
    int host_fd;
    sbx_agent_conn *conn;
    sbx_exec_opts *opts;
};

static void finish_one(struct run *r)
{
    pthread_mutex_lock(&r->m);
    r->pending--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->m);
}

static void exec_done(int code, sbx_error *err, void *value, void *data)
{
    if (code == SBX_OK)
        sbx_exec_result_free(value);
    sbx_error_free(err);
    finish_one(data);
}

static void other_done(int code, sbx_error *err, void *value, void *data)
{
    (void)code, (void)value;
    sbx_error_free(err);
    finish_one(data);
}

static void connected(sbx_agent_conn *conn, int code, sbx_error *err, void *data)
{
    struct run *r = data;
    sbx_error_free(err);
    if (code == SBX_OK) {
        r->conn = conn;
        pthread_mutex_lock(&r->m);
        r->pending += 4;
        pthread_mutex_unlock(&r->m);
        /* In this order, the channels are 1, 2 and 3 (the corpus speaks to them). */
        sbx__agent_exec(conn, sbx__op_new(P, exec_done, r), "true", NULL, r->opts, NULL);
        sbx__agent_upload(conn, sbx__op_new(P, other_done, r), up_path, "/up.txt");
        sbx__agent_download(conn, sbx__op_new(P, other_done, r), "/file", down_path);
        sbx__agent_ping(conn, sbx__op_new(P, other_done, r));
    }
    finish_one(r);
}

static void start(void *data)
{
    struct run *r = data;
    if (sbx__agent_connect_fd(sbx__context_uv(P->ctx), r->host_fd, 10.0, connected, r) < 0) {
        close(r->host_fd);
        finish_one(r);
    }
}

static void stop(void *data)
{
    struct run *r = data;
    if (r->conn)
        sbx__agent_close(r->conn);
    finish_one(r);
}

static void wait_all(struct run *r)
{
    pthread_mutex_lock(&r->m);
    while (r->pending > 0)
        pthread_cond_wait(&r->cv, &r->m);
    pthread_mutex_unlock(&r->m);
}

static void remove_dir(void)
{
    unlink(up_path);
    unlink(down_path);
    rmdir(dir);
}

static void setup(void)
{
    if (P)
        return;
    if (sbx_provider_new("{\"local\": {}}", &P, NULL) != SBX_OK)
        abort();
    snprintf(dir, sizeof(dir), "%s/sbx-fuzz-client.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        abort();
    snprintf(up_path, sizeof(up_path), "%s/up.txt", dir);
    snprintf(down_path, sizeof(down_path), "%s/down.txt", dir);
    FILE *f = fopen(up_path, "w");
    if (!f)
        abort();
    fputs("uploaded\n", f);
    fclose(f);
    atexit(remove_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    struct run r = { .pending = 1, .host_fd = sv[0], .opts = sbx_exec_opts_new() };
    pthread_mutex_init(&r.m, NULL);
    pthread_cond_init(&r.cv, NULL);
    if (sbx__context_post(P->ctx, start, &r) < 0)
        abort();
    /* The fake agent says its piece, then hangs up its sending side. */
    for (size_t off = 0; off < size;) {
        struct pollfd pf = { .fd = sv[1], .events = POLLOUT };
        if (poll(&pf, 1, 2000) <= 0)
            break; /* the client stopped reading: the rest is never heard */
        ssize_t n = send(sv[1], data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            break;
        off += (size_t)n;
    }
    shutdown(sv[1], SHUT_WR);
    wait_all(&r);
    r.pending = 1;
    if (sbx__context_post(P->ctx, stop, &r) < 0)
        abort();
    wait_all(&r);
    close(sv[1]);
    sbx_exec_opts_free(r.opts);
    pthread_mutex_destroy(&r.m);
    pthread_cond_destroy(&r.cv);
    unlink(down_path);
    /* A failed download leaves no temporary file behind. */
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] != '.' && strcmp(de->d_name, "up.txt") != 0)
            abort();
    if (d)
        closedir(d);
    return 0;
}
