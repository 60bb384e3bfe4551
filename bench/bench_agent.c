/*
 * The agent round trip: exec `true` through sbx-agent (client on the sbx
 * loop, agent as a local child process) against a bare fork+exec of the
 * same command, and file transfer through the agent against cp. Prints
 * numbers and ratios; never fails on them.
 *
 *   build/bench/bench_agent [iterations]
 */
#include "core/internal.h"
#include "kit/client.h"
#include "lib/bench.h"

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>

static sbx_provider *P;

struct waiter {
    pthread_mutex_t m;
    pthread_cond_t cv;
    int pending;
    int code;
    void *value;
};

static void done_one(struct waiter *w, int code, void *value)
{
    pthread_mutex_lock(&w->m);
    w->code = code ? code : w->code;
    if (w->value == NULL)
        w->value = value;
    else if (value)
        sbx_exec_result_free(value);
    w->pending--;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->m);
}

static void op_done(int code, sbx_error *err, void *value, void *data)
{
    sbx_error_free(err);
    done_one(data, code, value);
}

static void wait_all(struct waiter *w)
{
    pthread_mutex_lock(&w->m);
    while (w->pending > 0)
        pthread_cond_wait(&w->cv, &w->m);
    pthread_mutex_unlock(&w->m);
}

static void connect_cb(sbx_agent_conn *c, int code, sbx_error *err, void *data)
{
    sbx_error_free(err);
    done_one(data, code, c);
}

struct job {
    sbx_agent_conn *c;
    struct waiter *w;
    int n;
    const char *const *argv;
    const char *a, *b;
    int kind; /* 0 exec, 1 upload, 2 download */
    const char *sock;
};

static void do_connect(void *arg)
{
    struct job *j = arg;
    if (sbx__agent_connect(sbx__context_uv(P->ctx), j->sock, 10, connect_cb, j->w) < 0)
        done_one(j->w, SBX_EIO, NULL);
}

static void do_jobs(void *arg)
{
    struct job *j = arg;
    for (int i = 0; i < j->n; i++) {
        sbx_op *op = sbx__op_new(P, op_done, j->w);
        if (j->kind == 0)
            sbx__agent_exec(j->c, op, "true", j->argv, NULL, NULL);
        else if (j->kind == 1)
            sbx__agent_upload(j->c, op, j->a, j->b);
        else
            sbx__agent_download(j->c, op, j->a, j->b);
    }
}

static void do_close(void *arg)
{
    sbx__agent_close(arg);
}

/* Runs `n` ops of a kind, all submitted at once, and waits for every one. */
static void run(struct job *j, int n)
{
    struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, n, 0, NULL};
    j->w = &w;
    j->n = n;
    sbx__context_post(P->ctx, do_jobs, j);
    wait_all(&w);
    if (w.code)
        bench_die("an op failed");
    if (j->kind == 0)
        sbx_exec_result_free(w.value);
}

/* Seconds one transfer of `kind` (1 upload, 2 download) from a to b takes. */
static double timed_transfer(struct job *j, int kind, const char *a, const char *b)
{
    j->kind = kind;
    j->a = a;
    j->b = b;
    double t0 = bench_now();
    run(j, 1);
    return bench_now() - t0;
}

static int run_shell(const char *cmd)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 500;
    if (n < 1)
        n = 1;
    char exe[PATH_MAX], agent[PATH_MAX + 16];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0)
        bench_die("readlink");
    exe[len] = 0;
    snprintf(agent, sizeof(agent), "%s/sbx-agent", dirname(dirname(exe)));
    char dir[] = "/tmp/sbx-bench-agent-XXXXXX";
    if (!mkdtemp(dir))
        bench_die("mkdtemp");
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/agent.sock", dir);
    int rp[2];
    if (pipe2(rp, O_CLOEXEC) < 0)
        bench_die("pipe");
    pid_t apid = fork();
    if (apid == 0) {
        dup2(rp[1], 3);
        execl(agent, "sbx-agent", "init", "--listen", sock, "--ready-fd", "3", (char *)NULL);
        _exit(127);
    }
    close(rp[1]);
    char b;
    if (read(rp[0], &b, 1) != 1)
        bench_die("the agent did not start (run make first)");
    close(rp[0]);
    if (sbx_provider_new("{\"local\": {}}", &P, NULL) != SBX_OK)
        bench_die("provider");
    struct waiter cw = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0, NULL};
    struct job j = {.w = &cw, .sock = sock};
    sbx__context_post(P->ctx, do_connect, &j);
    wait_all(&cw);
    if (cw.code || !cw.value)
        bench_die("connect");
    j.c = cw.value;

    /* Warm-up, then one at a time. */
    run(&j, 20);
    double t0 = bench_now();
    for (int i = 0; i < n; i++)
        bench_fork_exec_true();
    double base = (bench_now() - t0) / n;
    const char *const targv[] = {"/bin/true", NULL};
    j.argv = targv;
    t0 = bench_now();
    for (int i = 0; i < n; i++)
        run(&j, 1);
    double via_argv = (bench_now() - t0) / n;
    j.argv = NULL;
    t0 = bench_now();
    for (int i = 0; i < n; i++)
        run(&j, 1);
    double via_sh = (bench_now() - t0) / n;
    printf("# agent exec round trip, %d sequential\n", n);
    printf("fork+exec /bin/true (host)   %8.1f us\n", base * 1e6);
    printf("agent exec argv /bin/true    %8.1f us   x%.2f\n", via_argv * 1e6, via_argv / base);
    printf("agent exec sh -c true        %8.1f us   x%.2f\n", via_sh * 1e6, via_sh / base);

    /* Many at once on one connection. */
    int conc = n < 300 ? n : 300;
    j.argv = targv;
    t0 = bench_now();
    run(&j, conc);
    double par = bench_now() - t0;
    printf("agent exec x%d concurrent     %8.1f us each (wall %.1f ms)\n", conc, par / conc * 1e6,
           par * 1e3);

    /* 256 MiB each way, against cp of the same file. */
    char src[256], in_box[256], back[256], cmd[1024];
    snprintf(src, sizeof(src), "%s/src.bin", dir);
    snprintf(in_box, sizeof(in_box), "%s/in-box.bin", dir);
    snprintf(back, sizeof(back), "%s/back.bin", dir);
    snprintf(cmd, sizeof(cmd), "head -c 268435456 /dev/urandom > %s", src);
    if (run_shell(cmd) != 0)
        bench_die("making the test file");
    snprintf(cmd, sizeof(cmd), "cp %s %s/cp.bin", src, dir);
    t0 = bench_now();
    run_shell(cmd);
    double cp = bench_now() - t0;
    double up = timed_transfer(&j, 1, src, in_box);
    double down = timed_transfer(&j, 2, in_box, back);
    printf("# 256 MiB file\n");
    printf("cp                           %8.1f ms   %6.0f MiB/s\n", cp * 1e3, 256 / cp);
    printf("agent upload                 %8.1f ms   %6.0f MiB/s  x%.2f\n", up * 1e3, 256 / up,
           up / cp);
    printf("agent download               %8.1f ms   %6.0f MiB/s  x%.2f\n", down * 1e3, 256 / down,
           down / cp);

    sbx__context_post(P->ctx, do_close, j.c);
    sbx__context_drain(P->ctx);
    sbx_provider_free(P);
    kill(apid, SIGTERM);
    waitpid(apid, NULL, 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    run_shell(cmd);
    return 0;
}
