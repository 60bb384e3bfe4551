/*
 * The linux provider against its baselines, all measured in this one run on
 * this one machine (the figures in docs/benchmarks.md come from it):
 *
 *   fork+exec   posix_spawn + wait of `/bin/sh -c true` on the host: the floor
 *               (a box's exec runs its command line through the shell too)
 *   bwrap       bwrap --unshare-all (namespaces, no supervisor, no agent)
 *   docker      `docker run` / `docker exec` / `docker cp` against a Docker
 *               engine, when one answers (DOCKER_HOST, else the private
 *               dockerd of scripts/test-dockerd.sh; SBX_BENCH_DOCKER=1 starts
 *               it, and the bench stops what it started)
 *
 * Rows: create->ready, a warm pool's claim, a one-shot box (create + exec
 * true + stop), the exec round trip, 50 concurrent execs on one box, 20 concurrent creates and
 * stops, a 256 MiB upload and download, and the memory of an idle box.
 * Ratios are linux / baseline: below 1 the linux provider is faster (or
 * smaller). Nothing here passes or fails on a number.
 *
 *   build/bench/bench_linux [N]          (N iterations per latency row, default 100)
 *   build/bench/bench_linux --many K     K boxes alive at once (default 1000): create rate,
 *                                        memory per box, kernel memory, stop of all at once
 *   build/bench/bench_linux --churn K [--inflight W] [--cmd CMD]
 *                                        K create/exec/stop lifecycles, W at a time (100):
 *                                        what the kernel keeps after them
 *   build/bench/bench_linux --memory MIB ... each box with a memory limit (its own memory cgroup)
 *   build/bench/bench_linux --userns ... boxes in user namespaces (idmapped layers)
 *   build/bench/bench_linux --memcg always ...   memory_cgroup "always" (default "limited": docs/scale.md)
 *   build/bench/bench_linux --shell sh   string commands through sh, not the default bash
 *
 * Needs root.
 */
#include "core/internal.h"
#include "lib/bench.h"
#include "lib/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

#define MIB (1024.0 * 1024.0)
#define IMG "sbx-bench/busybox"

static const char *state_root; /* SBX_STATE_DIR: bench_state_dir() */
static sbx_provider *P;
static sbx_spec *SPEC;

/* --- processes ------------------------------------------------------------ */

/* Starts argv with stdin/stdout/stderr on /dev/null (stdout to `out_fd` when >= 0). */
static pid_t spawn(const char *const argv[], int out_fd)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    /* posix_spawn's argv is char *const[] for history's sake; it does not write to it. */
    if (posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)(uintptr_t)argv, environ) != 0)
        pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

static int wait_pid(pid_t pid)
{
    int st = -1;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs argv to its end; returns the wall time in ms, or -1 when it failed. */
static double run_ms(const char *const argv[])
{
    double t0 = bench_now_ms();
    pid_t pid = spawn(argv, -1);
    if (pid < 0 || wait_pid(pid) != 0)
        return -1;
    return bench_now_ms() - t0;
}

/* Runs argv; its stdout (trimmed) into out. Returns the exit status. */
static int capture(const char *const argv[], char *out, size_t n)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = spawn(argv, p[1]);
    close(p[1]);
    size_t k = 0;
    ssize_t r;
    while ((r = read(p[0], out + k, n - 1 - k)) > 0 && k + (size_t)r < n - 1)
        k += (size_t)r;
    if (r > 0)
        k += (size_t)r;
    close(p[0]);
    out[k] = 0;
    while (k && (out[k - 1] == '\n' || out[k - 1] == ' '))
        out[--k] = 0;
    return pid < 0 ? -1 : wait_pid(pid);
}

/* Starts k copies of argv at once; the wall time until all ended (ms), -1 on a failure. */
static double run_concurrent(const char *const argv[], int k)
{
    pid_t *pids = calloc((size_t)k, sizeof(pid_t));
    double t0 = bench_now_ms();
    for (int i = 0; i < k; i++)
        pids[i] = spawn(argv, -1);
    bool ok = true;
    for (int i = 0; i < k; i++)
        ok &= pids[i] > 0 && wait_pid(pids[i]) == 0;
    free(pids);
    return ok ? bench_now_ms() - t0 : -1;
}

/* --- memory of a process tree ----------------------------------------------- */

static long long status_kb(pid_t pid, const char *file, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    FILE *f = fopen(path, "re");
    long long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, key, strlen(key))) {
            v = strtoll(line + strlen(key), NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return v;
}

static pid_t ppid_of(pid_t pid)
{
    pid_t pp;
    return proc_stat(pid, NULL, &pp, NULL) ? pp : -1;
}

/* RSS and PSS (bytes) of pid and all its descendants. */
static void tree_mem(pid_t root, double *rss, double *pss)
{
    *rss = *pss = 0;
    pid_t tree[256];
    int n = 0;
    tree[n++] = root;
    /* Breadth first: a process's children appear in /proc whatever their pid order. */
    for (int i = 0; i < n; i++) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        while (d && (de = readdir(d)) && n < 256) {
            pid_t pid = (pid_t)strtol(de->d_name, NULL, 10);
            if (pid > 0 && ppid_of(pid) == tree[i])
                tree[n++] = pid;
        }
        if (d)
            closedir(d);
    }
    for (int i = 0; i < n; i++) {
        long long r = status_kb(tree[i], "status", "VmRSS:");
        long long p = status_kb(tree[i], "smaps_rollup", "Pss:");
        *rss += r > 0 ? r * 1024.0 : 0;
        *pss += p > 0 ? p * 1024.0 : 0;
    }
}

/* The memory the cgroup of `pid` is charged (memory.current, or v1 usage_in_bytes); NAN if none. */
static double cgroup_mem(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(path, "re");
    double v = NAN;
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        char file[1200];
        *c2 = 0;
        /* Only the box's own group (memory_cgroup "limited" leaves it in its parent's). */
        if (!strstr(c2 + 1, "/sbx/"))
            continue;
        if (!strcmp(c1 + 1, "memory") || (line[0] == '0' && c1[1] == 0 && !isfinite(v))) {
            if (!strcmp(c1 + 1, "memory"))
                snprintf(file, sizeof(file), "/sys/fs/cgroup/memory%s/memory.usage_in_bytes",
                         c2 + 1);
            else
                snprintf(file, sizeof(file), "/sys/fs/cgroup%s/memory.current", c2 + 1);
            char *data = NULL;
            size_t len;
            if (sbx__read_file(file, &data, &len) == 0) {
                v = strtod(data, NULL);
                free(data);
            }
        }
    }
    if (f)
        fclose(f);
    return v;
}

/* --- the linux provider --------------------------------------------------- */

static sbx_sandbox *box_start(void)
{
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    sbx_sandbox_new(P, SPEC, &sb, NULL);
    if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
        bench_die("start: %s", sbx_error_message(e));
    return sb;
}

static void box_exec(sbx_sandbox *sb, const char *cmd)
{
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_exec(sb, cmd, NULL, &r, &e) != SBX_OK)
        bench_die("exec: %s", sbx_error_message(e));
    int rc = sbx_exec_result_return_code(r);
    sbx_exec_result_free(r);
    if (rc != 0)
        bench_die("exec %s: exit %d", cmd, rc);
}

/* The shim's and the agent's host pids, from the box record. */
static void box_pids(sbx_sandbox *sb, pid_t *shim, pid_t *init)
{
    _cleanup_free_ char *path =
        sbx__printf("%s/linux/boxes/%s/record.json", state_root, sbx_sandbox_id(sb));
    json_t *j = path ? json_load_file(path, 0, NULL) : NULL;
    *shim = (pid_t)json_integer_value(json_object_get(j, "shim_pid"));
    *init = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
    json_decref(j);
}

/* Adds box sb's memory: its shim's process tree to *rss and *pss, its cgroup's charge to *cg. */
static void add_box_mem(sbx_sandbox *sb, double *rss, double *pss, double *cg)
{
    pid_t shim, init;
    double r, p;
    box_pids(sb, &shim, &init);
    tree_mem(shim, &r, &p);
    *rss += r;
    *pss += p;
    *cg += cgroup_mem(init);
}

/* Completion times of async operations, stamped on the loop thread. */
struct stamp {
    double t0, *end;
};

static void stamp_cb(sbx_future *f, void *data)
{
    (void)f;
    struct stamp *s = data;
    *s->end = bench_now_ms() - s->t0;
}

/* Waits for every future; dies on an error. Frees them. */
static void wait_all(sbx_future **fs, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        sbx_error *e = NULL;
        if (sbx_future_wait(fs[i], -1, &e) != SBX_OK)
            bench_die("%s %d: %s", what, i, sbx_error_message(e));
        sbx_future_free(fs[i]);
    }
}

/* --- docker --------------------------------------------------------------- */

static bool docker_ok, docker_started;
/*
 * The label of this run's containers (sbx-bench=PID): whatever ends the
 * bench, bench_at_end() removes every container that carries it.
 */
static char docker_label[48];

static bool docker_answers(void)
{
    const char *argv[] = { "docker", "info", NULL };
    return run_ms(argv) >= 0;
}

/* Finds an engine (or starts the private one when SBX_BENCH_DOCKER=1) and imports the image. */
static void docker_setup(void)
{
    if (!getenv("DOCKER_HOST"))
        setenv("DOCKER_HOST", "unix:///run/sbx-test/docker.sock", 1);
    const char *which[] = { "sh", "-c", "command -v docker", NULL };
    if (run_ms(which) < 0)
        return;
    docker_ok = docker_answers();
    const char *want = getenv("SBX_BENCH_DOCKER");
    if (!docker_ok && want && !strcmp(want, "1")) {
        const char *start[] = { "scripts/test-dockerd.sh", "start", NULL };
        docker_ok = run_ms(start) >= 0 && docker_answers();
        docker_started = docker_ok;
    }
    if (!docker_ok)
        return;
    snprintf(docker_label, sizeof(docker_label), "sbx-bench=%d", (int)getpid());
    char gone[512];
    snprintf(gone, sizeof(gone),
             "docker ps -aq --filter label=%s | xargs -r docker rm -f >/dev/null 2>&1%s",
             docker_label, docker_started ? "; scripts/test-dockerd.sh stop >/dev/null 2>&1" : "");
    bench_at_end(gone);
    const char *has[] = { "docker", "image", "inspect", IMG, NULL };
    if (run_ms(has) >= 0)
        return;
    const char *imp[] = { "sh", "-c",
                          "set -e; t=$(mktemp); scripts/make-test-rootfs.sh $t; "
                          "docker import $t " IMG "; rm -f $t",
                          NULL };
    if (run_ms(imp) < 0) {
        fprintf(stderr, "bench_linux: cannot import the busybox image into docker; no docker rows\n");
        docker_ok = false;
    }
}

static void docker_rm(const char *id)
{
    const char *argv[] = { "docker", "rm", "-f", id, NULL };
    run_ms(argv);
}

/* docker run -d: returns when the container runs; its id in `id`. -1 on failure. */
static double docker_run_d(char *id, size_t n)
{
    const char *argv[] = { "docker", "run",  "-d",  "--label", docker_label, "--network",
                           "none",   IMG,    "sleep", "3600",  NULL };
    double t0 = bench_now_ms();
    if (capture(argv, id, n) != 0)
        return -1;
    return bench_now_ms() - t0;
}

/* --- output ----------------------------------------------------------------- */

/* Columns: linux, fork+exec, bwrap, docker; NAN prints "-". */
static void row(const char *what, double lx, double fe, double bw, double dk)
{
    double v[4] = { lx, fe, bw, dk };
    printf("%-34s", what);
    for (int i = 0; i < 4; i++)
        isfinite(v[i]) ? printf(" %10.2f", v[i]) : printf(" %10s", "-");
    printf("   |");
    for (int i = 1; i < 4; i++)
        isfinite(v[i]) && isfinite(lx) && v[i] > 0 ? printf(" %9.2fx", lx / v[i])
                                                   : printf(" %10s", "-");
    printf("\n");
}

static void header(const char *title)
{
    printf("\n%-34s %10s %10s %10s %10s   | %10s %10s %10s\n", title, "linux", "fork+exec",
           "bwrap", "docker", "/fork+exec", "/bwrap", "/docker");
}

/* --- the main comparison -------------------------------------------------------- */

static const char *BWRAP_TRUE[] = { "bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc",
                                    "/proc", "--dev", "/dev", "/bin/true", NULL };
static const char *BWRAP_SLEEP[] = { "bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc",
                                     "/proc", "--dev", "/dev", "sleep", "3600", NULL };
/* The floor runs what a box's exec runs: the shell, for a command line. */
static const char *TRUE_[] = { "/bin/sh", "-c", "true", NULL };

static void bench_all(int n)
{
    struct stat st;
    bool have_bwrap = stat("/usr/bin/bwrap", &st) == 0;
    docker_setup();
    int nd = n < 20 ? n : 20; /* docker runs cost ~0.1-1 s each */
    double *a = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
    double *c = calloc((size_t)n, sizeof(double)), *d = calloc((size_t)n, sizeof(double));
    double *e = calloc((size_t)n, sizeof(double)), *f = calloc((size_t)n, sizeof(double));

    /* Warm-up: the none image's skeleton, the seccomp cache, the page cache. */
    for (int i = 0; i < 3; i++)
        sbx_sandbox_free(box_start());

    /* 1. create->ready, and a one-shot box (create, exec true, stop). */
    for (int i = 0; i < n; i++) {
        sbx_sandbox *sb = NULL;
        sbx_sandbox_new(P, SPEC, &sb, NULL);
        double t0 = bench_now_ms();
        sbx_error *err = NULL;
        if (sbx_sandbox_start(sb, NULL, &err) != SBX_OK)
            bench_die("start: %s", sbx_error_message(err));
        a[i] = bench_now_ms() - t0;
        box_exec(sb, "true");
        sbx_sandbox_stop(sb, NULL);
        b[i] = bench_now_ms() - t0;
        sbx_sandbox_free(sb);
        c[i] = run_ms(TRUE_);
        d[i] = have_bwrap ? run_ms(BWRAP_TRUE) : NAN;
    }
    int ndr = 0;
    for (int i = 0; docker_ok && i < nd; i++) {
        char id[128];
        e[i] = docker_run_d(id, sizeof(id));
        if (e[i] >= 0)
            docker_rm(id), ndr++;
        const char *argv[] = { "docker", "run", "--rm", "--label", docker_label, "--network",
                               "none",   IMG,   "true", NULL };
        f[i] = run_ms(argv);
    }
    header("create->ready (ms)");
    double fe50 = bench_pct(c, n, 50), fe90 = bench_pct(c, n, 90), fe99 = bench_pct(c, n, 99);
    double bw50 = have_bwrap ? bench_pct(d, n, 50) : NAN, bw90 = have_bwrap ? bench_pct(d, n, 90) : NAN,
           bw99 = have_bwrap ? bench_pct(d, n, 99) : NAN;
    row("  p50", bench_pct(a, n, 50), fe50, bw50, bench_pct(e, ndr, 50));
    row("  p90", bench_pct(a, n, 90), fe90, bw90, bench_pct(e, ndr, 90));
    row("  p99", bench_pct(a, n, 99), fe99, bw99, bench_pct(e, ndr, 99));
    header("one-shot: create+exec+stop (ms)");
    row("  p50", bench_pct(b, n, 50), fe50, bw50, docker_ok ? bench_pct(f, nd, 50) : NAN);
    row("  p99", bench_pct(b, n, 99), fe99, bw99, docker_ok ? bench_pct(f, nd, 99) : NAN);

    /*
     * 1b. A warm pool's claim (sbx_warm_pool_claim, docs/scale.md): a box of
     * the same spec already started, handed out; timed from the claim to a
     * started sandbox. Before each claim the pool is let refill (not timed),
     * so every claim is served by a started box, as with a pool sized for
     * the caller's rate. Against the cold create->ready above, same run.
     */
    {
        sbx_warm_pool *wp = NULL;
        sbx_error *err = NULL;
        if (sbx_warm_pool_new(P, SPEC, 2, &wp, &err) != SBX_OK)
            bench_die("warm pool: %s", sbx_error_message(err));
        double *g = calloc((size_t)n, sizeof(double));
        if (!g)
            bench_die("out of memory");
        for (int i = 0; i < n; i++) {
            unsigned ready = 0;
            while (sbx_warm_pool_stats(wp, &ready, NULL, NULL, NULL) == SBX_OK && ready < 1)
                usleep(1000);
            sbx_sandbox *sb = NULL;
            double t0 = bench_now_ms();
            if (sbx_warm_pool_claim(wp, &sb, &err) != SBX_OK)
                bench_die("claim: %s", sbx_error_message(err));
            g[i] = bench_now_ms() - t0;
            sbx_sandbox_stop(sb, NULL);
            sbx_sandbox_free(sb);
        }
        sbx_warm_pool_free(wp);
        header("warm pool claim->ready (ms)");
        row("  p50", bench_pct(g, n, 50), fe50, bw50, NAN);
        row("  p99", bench_pct(g, n, 99), fe99, bw99, NAN);
        printf("  cold create->ready / claim: p50 %.0fx\n", bench_pct(a, n, 50) / bench_pct(g, n, 50));
        free(g);
    }

    /* 2. exec round trip in a warm box. */
    sbx_sandbox *warm = box_start();
    char ctr[128] = "";
    if (docker_ok && docker_run_d(ctr, sizeof(ctr)) < 0)
        ctr[0] = 0;
    /*
     * [direct] `true` is plain words: the agent execs it without the shell.
     * `true;` is the same command through the shell (what every string
     * command cost before): alternated with it in the same loop, their
     * ratio is what skipping the shell saves, whatever the machine's load.
     */
    double *sh = calloc((size_t)n, sizeof(double));
    if (!sh)
        bench_die("out of memory");
    for (int i = 0; i < n; i++) {
        double t0 = bench_now_ms();
        box_exec(warm, "true");
        a[i] = bench_now_ms() - t0;
        c[i] = run_ms(TRUE_);
        t0 = bench_now_ms();
        box_exec(warm, "true;");
        sh[i] = bench_now_ms() - t0;
    }
    int nde = 0;
    for (int i = 0; ctr[0] && i < (n < 50 ? n : 50); i++) {
        const char *argv[] = { "docker", "exec", ctr, "true", NULL };
        e[nde++] = run_ms(argv);
    }
    header("exec true round trip (ms)");
    row("  p50", bench_pct(a, n, 50), bench_pct(c, n, 50), NAN, bench_pct(e, nde, 50));
    row("  p99", bench_pct(a, n, 99), bench_pct(c, n, 99), NAN, bench_pct(e, nde, 99));
    printf("  through the shell (`true;`): p50 %.2f ms, p99 %.2f ms; plain words / shell: "
           "p50 %.2fx, p99 %.2fx\n",
           bench_pct(sh, n, 50), bench_pct(sh, n, 99), bench_pct(a, n, 50) / bench_pct(sh, n, 50),
           bench_pct(a, n, 99) / bench_pct(sh, n, 99));
    free(sh);

    /* 3. 50 concurrent execs on one box: wall time for all, and each one's latency. */
    enum { K = 50, ROUNDS = 3 };
    double lat[K * ROUNDS], wall[ROUNDS], fwall[ROUNDS], dwall[ROUNDS];
    int ndw = 0;
    for (int r = 0; r < ROUNDS; r++) {
        sbx_future *fs[K];
        struct stamp sp[K];
        double t0 = bench_now_ms();
        for (int i = 0; i < K; i++) {
            sp[i] = (struct stamp){ t0, &lat[r * K + i] };
            if (sbx_sandbox_exec_async(warm, "true", NULL, &fs[i], NULL) != SBX_OK)
                bench_die("exec_async");
            sbx_future_then(fs[i], stamp_cb, &sp[i]);
        }
        wait_all(fs, K, "concurrent exec");
        wall[r] = bench_now_ms() - t0;
        fwall[r] = run_concurrent(TRUE_, K);
        if (ctr[0]) {
            const char *argv[] = { "docker", "exec", ctr, "true", NULL };
            double w = run_concurrent(argv, K);
            if (w >= 0)
                dwall[ndw++] = w;
        }
    }
    header("50 concurrent execs, one box (ms)");
    row("  all done, p50 of 3 rounds", bench_pct(wall, ROUNDS, 50), bench_pct(fwall, ROUNDS, 50), NAN,
        bench_pct(dwall, ndw, 50));
    row("  each exec p50", bench_pct(lat, K * ROUNDS, 50), NAN, NAN, NAN);
    row("  each exec p99", bench_pct(lat, K * ROUNDS, 99), NAN, NAN, NAN);

    /* 4. upload / download 256 MiB. */
    const size_t big = 256u << 20;
    _cleanup_free_ char *src = sbx__printf("%s/big.in", state_root);
    _cleanup_free_ char *dst = sbx__printf("%s/big.out", state_root);
    _cleanup_free_ char *cpd = sbx__printf("%s/big.cp", state_root);
    {
        int fd = open(src, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        unsigned char *buf = malloc(1 << 20);
        sbx__random_hex((char *)buf, 512);
        for (size_t i = 1024; i < (1u << 20); i++) /* cheap, not constant: no sparse shortcut */
            buf[i] = (unsigned char)(buf[i - 1024] * 31 + i);
        for (size_t off = 0; off < big; off += 1 << 20)
            if (write(fd, buf, 1 << 20) != 1 << 20)
                bench_die("writing %s", src);
        free(buf);
        close(fd);
    }
    double up, down, cp, dup = NAN, ddown = NAN;
    sbx_error *err = NULL;
    double t0 = bench_now_ms();
    if (sbx_sandbox_upload(warm, src, "/tmp/big", &err) != SBX_OK)
        bench_die("upload: %s", sbx_error_message(err));
    up = bench_now_ms() - t0;
    t0 = bench_now_ms();
    if (sbx_sandbox_download(warm, "/tmp/big", dst, &err) != SBX_OK)
        bench_die("download: %s", sbx_error_message(err));
    down = bench_now_ms() - t0;
    if (stat(dst, &st) != 0 || (size_t)st.st_size != big)
        bench_die("download: wrong size");
    box_exec(warm, "rm /tmp/big");
    const char *cpv[] = { "cp", src, cpd, NULL };
    cp = run_ms(cpv);
    if (ctr[0]) {
        char to[256];
        snprintf(to, sizeof(to), "%s:/tmp/big", ctr);
        const char *in[] = { "docker", "cp", src, to, NULL };
        const char *out[] = { "docker", "cp", to, cpd, NULL };
        unlink(cpd);
        dup = run_ms(in);
        ddown = run_ms(out);
    }
    unlink(src);
    unlink(dst);
    unlink(cpd);
    header("256 MiB transfer (ms)");
    row("  upload (host cp / docker cp in)", up, cp, NAN, dup);
    row("  download (host cp / docker cp out)", down, cp, NAN, ddown);
    printf("  (linux: upload %.0f MiB/s, download %.0f MiB/s)\n", 256 / (up / 1e3),
           256 / (down / 1e3));

    /* 5. 20 concurrent creates, then 20 concurrent stops; the boxes' idle memory meanwhile. */
    enum { C = 20 };
    sbx_sandbox *sbs[C];
    sbx_future *fs[C];
    t0 = bench_now_ms();
    for (int i = 0; i < C; i++) {
        sbx_sandbox_new(P, SPEC, &sbs[i], NULL);
        if (sbx_sandbox_start_async(sbs[i], NULL, &fs[i], NULL) != SBX_OK)
            bench_die("start_async");
    }
    wait_all(fs, C, "concurrent create");
    double cwall = bench_now_ms() - t0;
    usleep(200 * 1000); /* idle */
    double rss = 0, pss = 0, cg = 0;
    for (int i = 0; i < C; i++)
        add_box_mem(sbs[i], &rss, &pss, &cg);
    t0 = bench_now_ms();
    for (int i = 0; i < C; i++)
        if (sbx_sandbox_stop_async(sbs[i], &fs[i], NULL) != SBX_OK)
            bench_die("stop_async");
    wait_all(fs, C, "concurrent stop");
    double swall = bench_now_ms() - t0;
    for (int i = 0; i < C; i++)
        sbx_sandbox_free(sbs[i]);

    /* The baselines: 20 bwrap at once; 20 docker run -d at once, then 20 docker rm -f. */
    double bcw = have_bwrap ? run_concurrent(BWRAP_TRUE, C) : NAN;
    double fcw = run_concurrent(TRUE_, C);
    double dcw = NAN, dsw = NAN, drss = NAN, dpss = NAN, dcg = NAN;
    double brss = NAN, bpss = NAN, frss = NAN, fpss = NAN;
    if (docker_ok) {
        char many[256], rm_many[256];
        snprintf(many, sizeof(many),
                 "for i in $(seq 20); do docker run -d --network none --label %s " IMG
                 " sleep 3600 & done; wait",
                 docker_label);
        const char *runv[] = { "sh", "-c", many, NULL };
        dcw = run_ms(runv);
        usleep(200 * 1000);
        char ids[8192];
        char filter[64];
        snprintf(filter, sizeof(filter), "label=%s", docker_label);
        const char *ps[] = { "docker", "ps", "-q", "--filter", filter, NULL };
        capture(ps, ids, sizeof(ids));
        int k = 0;
        drss = dpss = dcg = 0;
        for (char *id = ids, *nl; *id; id = nl ? nl + 1 : id + strlen(id)) {
            if ((nl = strchr(id, '\n')))
                *nl = 0;
            char pidbuf[32];
            const char *insp[] = { "docker", "inspect", "-f", "{{.State.Pid}}", id, NULL };
            if (capture(insp, pidbuf, sizeof(pidbuf)) != 0)
                continue;
            pid_t cpid = (pid_t)strtol(pidbuf, NULL, 10);
            double r, p;
            /* The container's supervisor is its containerd-shim, the init's parent. */
            tree_mem(ppid_of(cpid), &r, &p);
            drss += r;
            dpss += p;
            dcg += cgroup_mem(cpid);
            k++;
        }
        drss /= k ? k : 1;
        dpss /= k ? k : 1;
        dcg = k ? dcg / k : NAN;
        snprintf(rm_many, sizeof(rm_many),
                 "for c in $(docker ps -aq --filter label=%s); do docker rm -f $c & done; wait",
                 docker_label);
        const char *rmv[] = { "sh", "-c", rm_many, NULL };
        dsw = run_ms(rmv);
    }
    /* An idle bwrap box (bwrap + sleep) and a bare idle process (sleep). */
    if (have_bwrap) {
        pid_t pid = spawn(BWRAP_SLEEP, -1);
        usleep(200 * 1000);
        tree_mem(pid, &brss, &bpss);
        kill(pid, SIGKILL);
        wait_pid(pid);
    }
    const char *sleepv[] = { "sleep", "3600", NULL };
    pid_t pid = spawn(sleepv, -1);
    usleep(100 * 1000);
    tree_mem(pid, &frss, &fpss);
    kill(pid, SIGKILL);
    wait_pid(pid);

    header("20 concurrent boxes (ms)");
    row("  20 creates, all ready", cwall, fcw, bcw, dcw);
    row("  20 stops, all removed", swall, NAN, NAN, dsw);
    header("idle box memory (MiB per box)");
    row("  RSS (linux: shim+agent)", rss / C / MIB, frss / MIB, brss / MIB, drss / MIB);
    row("  PSS (shared pages split)", pss / C / MIB, fpss / MIB, bpss / MIB, dpss / MIB);
    row("  cgroup memory charged", cg / C / MIB, NAN, NAN, dcg / MIB);

    if (ctr[0])
        docker_rm(ctr);
    sbx_sandbox_free(warm);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    free(f);
}

/* --- many boxes at once ----------------------------------------------------- */

static double mem_available(void)
{
    char line[256];
    FILE *f = fopen("/proc/meminfo", "re");
    double v = NAN;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "MemAvailable:", 13))
            v = strtod(line + 13, NULL) * 1024.0;
    if (f)
        fclose(f);
    return v;
}

/* Kernel memory and counts that grow with boxes or with churn. */
struct kmem {
    double unreclaim, slab, avail; /* bytes, /proc/meminfo */
    long memcg;                    /* memory cgroups, /proc/cgroups (dying ones too) */
    long memcg_live;               /* of them, the directories that exist */
    long nr_threads;               /* processes and threads on the host */
};

static double meminfo_field(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) * 1024.0 : NAN;
}

/* Directories under a cgroup directory, itself included. */
static long count_dirs(int dfd)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    long n = 1;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_type == DT_DIR && de->d_name[0] != '.') {
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (sub >= 0)
                n += count_dirs(sub);
        }
    closedir(d);
    return n;
}

static void kmem_read(struct kmem *k)
{
    char buf[8192];
    memset(k, 0, sizeof(*k));
    FILE *f = fopen("/proc/meminfo", "re");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    k->unreclaim = meminfo_field(buf, "\nSUnreclaim:");
    k->slab = meminfo_field(buf, "\nSlab:");
    k->avail = meminfo_field(buf, "\nMemAvailable:");
    f = fopen("/proc/cgroups", "re");
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        char name[64];
        long hier, num;
        if (sscanf(line, "%63s %ld %ld", name, &hier, &num) == 3 && !strcmp(name, "memory"))
            k->memcg = num;
    }
    if (f)
        fclose(f);
    /* The memory hierarchy: v1's own mount, else the unified one. */
    int mfd = open("/sys/fs/cgroup/memory", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (mfd < 0)
        mfd = open("/sys/fs/cgroup", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    k->memcg_live = mfd >= 0 ? count_dirs(mfd) : -1;
    f = fopen("/proc/loadavg", "re");
    long running = 0;
    if (f && fscanf(f, "%*s %*s %*s %ld/%ld", &running, &k->nr_threads) != 2)
        k->nr_threads = -1;
    if (f)
        fclose(f);
}

static void kmem_print(const char *what, const struct kmem *a, const struct kmem *b, int per)
{
    long dying_a = a->memcg - a->memcg_live, dying_b = b->memcg - b->memcg_live;
    printf("  kernel %s: dying memory cgroups %ld -> %ld (%+ld), memory cgroups %ld -> %ld "
           "(%+ld), SUnreclaim %.0f -> %.0f MiB (%+.1f), Slab %+.1f MiB, threads %ld -> %ld",
           what, dying_a, dying_b, dying_b - dying_a, a->memcg, b->memcg, b->memcg - a->memcg,
           a->unreclaim / MIB, b->unreclaim / MIB, (b->unreclaim - a->unreclaim) / MIB,
           (b->slab - a->slab) / MIB, a->nr_threads, b->nr_threads);
    if (per > 0)
        printf("; per box: SUnreclaim %.0f KiB, Slab %.0f KiB",
               (b->unreclaim - a->unreclaim) / 1024 / per, (b->slab - a->slab) / 1024 / per);
    printf("\n");
}

/* /proc/slabinfo: bytes held per cache (active objects x object size). */
struct slabs {
    char name[400][64];
    double bytes[400];
    int n;
};

static void slabs_read(struct slabs *sl)
{
    sl->n = 0;
    FILE *f = fopen("/proc/slabinfo", "re");
    char line[512];
    while (f && fgets(line, sizeof(line), f) && sl->n < 400) {
        char name[64];
        long active, total, size;
        if (line[0] == '#' || !strncmp(line, "slabinfo", 8) ||
            sscanf(line, "%63s %ld %ld %ld", name, &active, &total, &size) != 4)
            continue;
        snprintf(sl->name[sl->n], sizeof(sl->name[0]), "%s", name);
        sl->bytes[sl->n++] = (double)active * (double)size;
    }
    if (f)
        fclose(f);
}

/* The caches that grew most between a and b, per box. */
static void slabs_print(const struct slabs *a, const struct slabs *b, int per)
{
    double d[400];
    for (int i = 0; i < b->n; i++) {
        d[i] = b->bytes[i];
        for (int j = 0; j < a->n; j++)
            if (!strcmp(a->name[j], b->name[i]))
                d[i] -= a->bytes[j];
    }
    double sum = 0;
    for (int i = 0; i < b->n; i++)
        sum += d[i] > 0 ? d[i] : 0;
    printf("  slab caches grew %.0f KiB per box; most:", sum / 1024 / (per > 0 ? per : 1));
    for (int k = 0; k < 12; k++) {
        int best = -1;
        for (int i = 0; i < b->n; i++)
            if (d[i] > 0 && (best < 0 || d[i] > d[best]))
                best = i;
        if (best < 0)
            break;
        printf(" %s %.1f KiB%s", b->name[best], d[best] / 1024 / (per > 0 ? per : 1),
               k < 11 ? "," : "");
        d[best] = 0;
    }
    printf("\n");
}

static void bench_many(int n)
{
    static struct slabs sl0, sl1;
    printf("%d linux boxes alive at once (none image, net none)\n", n);
    /*
     * The limit is left as it is: the provider keeps at most
     * max_agent_connections (256) agent connections open, not one per box.
     */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    printf("  fd limit of this process: %llu (hard %llu)\n", (unsigned long long)rl.rlim_cur,
           (unsigned long long)rl.rlim_max);
    sbx_sandbox **sbs = calloc((size_t)n, sizeof(*sbs));
    sbx_future **fs = calloc((size_t)n, sizeof(*fs));
    struct kmem k0, k1, k2;
    kmem_read(&k0);
    slabs_read(&sl0);
    double avail0 = mem_available();
    double t0 = bench_now_ms();
    int made = 0;
    /* In waves of 50: the creates of one wave overlap; a failure stops the ramp. */
    const char *fail = NULL;
    _cleanup_free_ char *why = NULL;
    for (int base = 0; base < n && !fail; base += 50) {
        int end = base + 50 < n ? base + 50 : n;
        for (int i = base; i < end; i++) {
            sbx_sandbox_new(P, SPEC, &sbs[i], NULL);
            if (sbx_sandbox_start_async(sbs[i], NULL, &fs[i], NULL) != SBX_OK)
                bench_die("start_async");
        }
        for (int i = base; i < end; i++) {
            sbx_error *e = NULL;
            if (sbx_future_wait(fs[i], -1, &e) != SBX_OK && !fail) {
                why = sbx__printf("box %d: %s", i, sbx_error_message(e));
                fail = why;
            }
            sbx_error_free(e);
            sbx_future_free(fs[i]);
            if (!fail)
                made = i + 1;
        }
    }
    double create = bench_now_ms() - t0;
    printf("  created %d in %.1f s (%.1f boxes/s)%s%s\n", made, create / 1e3,
           made / (create / 1e3), fail ? "; stopped at: " : "", fail ? fail : "");
    printf("  descriptors open in this process: %d\n", open_fds());
    usleep(500 * 1000);
    double avail1 = mem_available();
    double rss = 0, pss = 0, cg = 0;
    int counted = 0;
    for (int i = 0; i < made; i += made / 20 > 0 ? made / 20 : 1) {
        add_box_mem(sbs[i], &rss, &pss, &cg);
        counted++;
    }
    printf("  host memory used: %.0f MiB (%.2f MiB per box, MemAvailable before/after)\n",
           (avail0 - avail1) / MIB, made ? (avail0 - avail1) / MIB / made : 0);
    kmem_read(&k1);
    slabs_read(&sl1);
    kmem_print("with the boxes alive", &k0, &k1, made);
    slabs_print(&sl0, &sl1, made);
    if (counted)
        printf("  per box (sample of %d): RSS %.2f MiB, PSS %.2f MiB, cgroup %.2f MiB\n", counted,
               rss / counted / MIB, pss / counted / MIB, cg / counted / MIB);
    t0 = bench_now_ms();
    int answered = 0;
    for (int base = 0; base < made; base += 100) {
        int end = base + 100 < made ? base + 100 : made;
        for (int i = base; i < end; i++)
            if (sbx_sandbox_exec_async(sbs[i], "true", NULL, &fs[i], NULL) != SBX_OK)
                fs[i] = NULL;
        for (int i = base; i < end; i++) {
            sbx_exec_result *r = NULL;
            if (fs[i] && sbx_future_wait(fs[i], -1, NULL) == SBX_OK &&
                sbx_future_take_exec_result(fs[i], &r, NULL) == SBX_OK &&
                sbx_exec_result_return_code(r) == 0)
                answered++;
            sbx_exec_result_free(r);
            sbx_future_free(fs[i]);
        }
    }
    printf("  %d of %d answered an exec of true, in %.1f s; descriptors open after: %d\n",
           answered, made, (bench_now_ms() - t0) / 1e3, open_fds());
    t0 = bench_now_ms();
    for (int i = 0; i < made; i++)
        if (sbx_sandbox_stop_async(sbs[i], &fs[i], NULL) != SBX_OK)
            fs[i] = NULL;
    int stopped = 0;
    _cleanup_free_ char *stop_err = NULL;
    for (int i = 0; i < made; i++) {
        sbx_error *e = NULL;
        if (fs[i] && sbx_future_wait(fs[i], -1, &e) == SBX_OK)
            stopped++;
        else if (!stop_err)
            stop_err = sbx__printf("%s", e ? sbx_error_message(e) : "stop_async refused");
        sbx_error_free(e);
        sbx_future_free(fs[i]);
        sbx_sandbox_free(sbs[i]);
    }
    for (int i = made; i < n; i++)
        sbx_sandbox_free(sbs[i]);
    double stop_s = (bench_now_ms() - t0) / 1e3;
    printf("  stop of all at once: %d of %d reported success in %.1f s (%.0f stops/s)%s%s\n",
           stopped, made, stop_s, stop_s > 0 ? made / stop_s : 0,
           stop_err ? "; first failure: " : "", stop_err ? stop_err : "");
    /* What the kernel frees after the boxes goes asynchronously: give it a moment. */
    sleep(5);
    kmem_read(&k2);
    kmem_print("after the stop (+5 s)", &k0, &k2, 0);
    free(sbs);
    free(fs);
}

/* --- churn: create, exec, stop, over and over ---------------------------- */

static void bench_churn(int total, int inflight, const char *cmd)
{
    printf("churn: %d create/exec/stop lifecycles, %d in flight (none image, net none), exec: %s\n",
           total, inflight, cmd);
    sbx_sandbox **sbs = calloc((size_t)inflight, sizeof(*sbs));
    sbx_future **fs = calloc((size_t)inflight, sizeof(*fs));
    bool *ok = calloc((size_t)inflight, sizeof(*ok));
    struct kmem k0, k1;
    kmem_read(&k0);
    double t0 = bench_now_ms();
    int done = 0, failed = 0;
    _cleanup_free_ char *why = NULL;
    while (done + failed < total) {
        int w = total - done - failed < inflight ? total - done - failed : inflight;
        for (int i = 0; i < w; i++) {
            sbx_sandbox_new(P, SPEC, &sbs[i], NULL);
            if (sbx_sandbox_start_async(sbs[i], NULL, &fs[i], NULL) != SBX_OK)
                bench_die("start_async");
        }
        for (int i = 0; i < w; i++) {
            sbx_error *e = NULL;
            ok[i] = sbx_future_wait(fs[i], -1, &e) == SBX_OK;
            if (!ok[i] && !why)
                why = sbx__printf("create: %s", sbx_error_message(e));
            sbx_error_free(e);
            sbx_future_free(fs[i]);
            fs[i] = NULL;
            if (ok[i] && sbx_sandbox_exec_async(sbs[i], cmd, NULL, &fs[i], NULL) != SBX_OK)
                ok[i] = false;
        }
        for (int i = 0; i < w; i++) {
            if (fs[i] && sbx_future_wait(fs[i], -1, NULL) != SBX_OK)
                ok[i] = false;
            sbx_future_free(fs[i]);
            fs[i] = NULL;
            if (sbx_sandbox_stop_async(sbs[i], &fs[i], NULL) != SBX_OK)
                fs[i] = NULL;
        }
        int before = done + failed;
        for (int i = 0; i < w; i++) {
            sbx_error *e = NULL;
            if (!fs[i] || sbx_future_wait(fs[i], -1, &e) != SBX_OK) {
                if (ok[i] && !why)
                    why = sbx__printf("stop: %s", e ? sbx_error_message(e) : "refused");
                ok[i] = false;
            }
            sbx_error_free(e);
            sbx_future_free(fs[i]);
            sbx_sandbox_free(sbs[i]);
            ok[i] ? done++ : failed++;
        }
        /* A line per 10,000: a long churn shows it is moving, and how the kernel fares. */
        if ((done + failed) / 10000 != before / 10000) {
            struct kmem kn;
            kmem_read(&kn);
            printf("  %d lifecycles (%d failed), %.0f s: SUnreclaim %+.1f MiB, dying memory "
                   "cgroups %+ld\n",
                   done + failed, failed, (bench_now_ms() - t0) / 1e3,
                   (kn.unreclaim - k0.unreclaim) / 1048576,
                   (kn.memcg - kn.memcg_live) - (k0.memcg - k0.memcg_live));
            fflush(stdout);
        }
    }
    double el = (bench_now_ms() - t0) / 1e3;
    printf("  %d lifecycles ended cleanly, %d failed, in %.1f s (%.1f/s)%s%s\n", done, failed, el,
           (done + failed) / el, why ? "; first failure: " : "", why ? why : "");
    sleep(5);
    kmem_read(&k1);
    kmem_print("after the churn (+5 s)", &k0, &k1, 0);
    printf("  per lifecycle: dying memory cgroups %+.3f, SUnreclaim %+.1f KiB\n",
           (double)((k1.memcg - k1.memcg_live) - (k0.memcg - k0.memcg_live)) / total,
           (k1.unreclaim - k0.unreclaim) / 1024 / total);
    free(sbs);
    free(fs);
    free(ok);
}

int main(int argc, char **argv)
{
    int n = 100, many = 0, churn = 0, inflight = 100, memory_mib = 0;
    const char *churn_cmd = "true", *memcg = "limited"; /* the provider's default */
    bool userns = false;
    const char *shell = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--many"))
            many = i + 1 < argc ? (int)strtol(argv[++i], NULL, 10) : 1000;
        else if (!strcmp(argv[i], "--churn"))
            churn = i + 1 < argc ? (int)strtol(argv[++i], NULL, 10) : 2000;
        else if (!strcmp(argv[i], "--cmd") && i + 1 < argc)
            churn_cmd = argv[++i];
        else if (!strcmp(argv[i], "--inflight") && i + 1 < argc)
            inflight = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--memory") && i + 1 < argc)
            memory_mib = (int)strtol(argv[++i], NULL, 10); /* each box's memory limit */
        else if (!strcmp(argv[i], "--memcg") && i + 1 < argc)
            memcg = argv[++i]; /* the provider's memory_cgroup: always | limited */
        else if (!strcmp(argv[i], "--userns"))
            userns = true;
        else if (!strcmp(argv[i], "--shell") && i + 1 < argc)
            shell = argv[++i]; /* the provider's `shell` (default: auto, bash when present) */
        else
            n = (int)strtol(argv[i], NULL, 10);
    }
    if (n < 10)
        n = 10;
    if (geteuid() != 0) {
        fprintf(stderr, "bench_linux: needs root (namespaces, cgroups)\n");
        return 77;
    }
    state_root = bench_state_dir();
    sbx_error *e = NULL;
    char cfg[512];
    snprintf(cfg, sizeof(cfg), "{\"linux\": {\"userns\": %s, \"memory_cgroup\": \"%s\"%s%s%s}}",
             userns ? "true" : "false", memcg, shell ? ", \"shell\": \"" : "", shell ? shell : "",
             shell ? "\"" : "");
    if (sbx_provider_new(cfg, &P, &e) != SBX_OK)
        bench_die("provider: %s", sbx_error_message(e));
    SPEC = bench_spec(NULL);
    if (memory_mib > 0)
        sbx_spec_set_memory_mib(SPEC, memory_mib);
    if (inflight < 1)
        inflight = 1;
    if (churn > 0) {
        bench_churn(churn, inflight, churn_cmd);
    } else if (many > 0) {
        bench_many(many);
    } else {
        printf("linux provider against its baselines: %d iterations per latency row, none image "
               "(cached), net none%s\nratios are linux / baseline (below 1: linux is faster or "
               "smaller)\n",
               n, userns ? ", user namespaces" : "");
        bench_all(n);
    }
    sbx_spec_free(SPEC);
    sbx_provider_free(P);
    bench_state_end();
    if (docker_started) {
        const char *stop[] = { "scripts/test-dockerd.sh", "stop", NULL };
        run_ms(stop);
    }
    return 0;
}
