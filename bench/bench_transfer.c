/*
 * Directory transfer against its baselines, measured in this one run on this
 * one machine: a tree of 10,000 small files (100 directories of 100 files,
 * 16-200 bytes each) into and out of a linux box.
 *
 *   sbx dir     sbx_sandbox_upload_dir / download_dir (the agent's tar
 *               built-ins; no shell or tar in the box)
 *   tar|exec    the old path: `tar -C src -cf - . | sbx exec ID -- tar -xf -
 *               -C dst` (host tar piped into the box's busybox tar through
 *               a streamed exec), and `tar -cf - -C dir .` out of the box into
 *               a host `tar -xf -`: what `tar | docker exec -i` does
 *   cp -a       a host `cp -a` of the same tree (the floor: no box at all)
 *
 * Ratios are sbx / baseline: below 1 sbx is faster. Nothing passes or fails
 * on a number. Needs root.
 *
 *   build/bench/bench_transfer [N [DIRS]]   (N repetitions, median reported;
 *                                           default 5; DIRS directories of
 *                                           100 files, default 100)
 *
 * test_bench_dies.sh kills it mid-run with DIRS 2: what it checks (the box
 * dies with the bench) needs no 10,000 files, whose transfers, looping until
 * the kill, took the CPU from the tests beside it.
 */
#include "lib/bench.h"

#include <sbx.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

static char tmp[256];
static int tree_dirs = 100;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void make_tree(const char *root)
{
    char path[1024];
    for (int d = 0; d < tree_dirs; d++) {
        snprintf(path, sizeof(path), "%s/d%02d", root, d);
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            bench_die("mkdir %s: %s", path, strerror(errno));
        for (int f = 0; f < 100; f++) {
            snprintf(path, sizeof(path), "%s/d%02d/f%03d.c", root, d, f);
            FILE *fp = fopen(path, "we");
            if (!fp)
                bench_die("create %s", path);
            int n = 16 + (d * 100 + f) % 185;
            for (int i = 0; i < n; i++)
                fputc('a' + (i + f) % 26, fp);
            fclose(fp);
        }
    }
}

/* Runs `cmd` in the box with stdin from host fd `in` and stdout to `out` (-1: none). */
static void box_exec(sbx_sandbox *sb, const char *cmd, int in, int out)
{
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, -1);
    if (in >= 0)
        sbx_exec_opts_set_stdin_fd(o, in);
    if (out >= 0) {
        sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, out);
        sbx_exec_opts_set_keep_output(o, 0);
        sbx_exec_opts_set_output_limit(o, SIZE_MAX);
    }
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_exec(sb, cmd, o, &r, &e) != SBX_OK)
        bench_die("exec %s: %s", cmd, sbx_error_message(e));
    if (sbx_exec_result_return_code(r) != 0)
        bench_die("%s exited %d: %s", cmd, sbx_exec_result_return_code(r),
            sbx_exec_result_stderr(r, NULL));
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
}

/* Host `tar` of `src` piped into the box's tar (the old path). */
static double old_upload(sbx_sandbox *sb, const char *src, const char *dst)
{
    double t0 = bench_now();
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        bench_die("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        execlp("tar", "tar", "-C", src, "-cf", "-", ".", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s && tar -xf - -C %s", dst, dst);
    box_exec(sb, cmd, p[0], -1);
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return bench_now() - t0;
}

static double old_download(sbx_sandbox *sb, const char *src, const char *dst)
{
    double t0 = bench_now();
    mkdir(dst, 0755);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        bench_die("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[0], 0);
        execlp("tar", "tar", "-C", dst, "-xf", "-", (char *)NULL);
        _exit(127);
    }
    close(p[0]);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "tar -cf - -C %s .", src);
    box_exec(sb, cmd, -1, p[1]);
    close(p[1]);
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        bench_die("host tar -x failed");
    return bench_now() - t0;
}

static void row(const char *what, double sbx, double old, double cp)
{
    printf("%-34s %9.1f ms   tar|exec %9.1f ms (%5.2fx)   cp -a %9.1f ms (%5.2fx)\n", what,
           sbx * 1e3, old * 1e3, old > 0 ? sbx / old : 0, cp * 1e3, cp > 0 ? sbx / cp : 0);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 5;
    if (n < 1)
        n = 1;
    if (argc > 2)
        tree_dirs = atoi(argv[2]);
    if (tree_dirs < 1 || tree_dirs > 100)
        bench_die("DIRS (%s) must be 1 to 100", argv[2]);
    if (geteuid() != 0) {
        printf("bench_transfer: needs root (linux boxes); skipped\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmp, sizeof(tmp), "/tmp/sbx-bench-transfer-XXXXXX");
    if (!mkdtemp(tmp))
        bench_die("mkdtemp");
    if (sh("set -e; mkdir -p %s/img/bin %s/img/etc %s/src; cp /bin/busybox %s/img/bin/; "
           "for a in sh tar mkdir; do ln -s busybox %s/img/bin/$a; done; "
           "echo 'root:x:0:0:root:/root:/bin/sh' > %s/img/etc/passwd; "
           "echo 'root:x:0:' > %s/img/etc/group",
           tmp, tmp, tmp, tmp, tmp, tmp, tmp) != 0)
        bench_die("building the busybox image (needs /bin/busybox)");
    char src[512], img[512];
    snprintf(src, sizeof(src), "%s/src", tmp);
    snprintf(img, sizeof(img), "%s/img", tmp);
    make_tree(src);

    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new("{\"linux\": {}}", &p, &e) != SBX_OK)
        bench_die("provider: %s", sbx_error_message(e));
    sbx_spec *spec = bench_spec(NULL);
    sbx_spec_set_image(spec, img);
    sbx_spec_set_workdir(spec, "/work");
    sbx_sandbox *sb = NULL;
    sbx_sandbox_new(p, spec, &sb, NULL);
    if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
        bench_die("start: %s", sbx_error_message(e));

    double *up = calloc((size_t)n, sizeof(double)), *down = calloc((size_t)n, sizeof(double));
    double *oup = calloc((size_t)n, sizeof(double)), *odown = calloc((size_t)n, sizeof(double));
    double *cp = calloc((size_t)n, sizeof(double));
    for (int i = 0; i < n; i++) {
        char dst[64], local[600];
        snprintf(dst, sizeof(dst), "/work/new%d", i);
        double t0 = bench_now();
        if (sbx_sandbox_upload_dir(sb, src, dst, 0, &e) != SBX_OK)
            bench_die("upload_dir: %s", sbx_error_message(e));
        up[i] = bench_now() - t0;
        snprintf(local, sizeof(local), "%s/back-new%d", tmp, i);
        t0 = bench_now();
        if (sbx_sandbox_download_dir(sb, dst, local, 0, &e) != SBX_OK)
            bench_die("download_dir: %s", sbx_error_message(e));
        down[i] = bench_now() - t0;
        snprintf(dst, sizeof(dst), "/work/old%d", i);
        oup[i] = old_upload(sb, src, dst);
        snprintf(local, sizeof(local), "%s/back-old%d", tmp, i);
        odown[i] = old_download(sb, dst, local);
        t0 = bench_now();
        if (sh("cp -a %s %s/cp%d", src, tmp, i) != 0)
            bench_die("cp -a");
        cp[i] = bench_now() - t0;
        if (i == 0 && sh("diff -r %s %s/back-new0 >/dev/null && diff -r %s %s/back-old0 >/dev/null",
                         src, tmp, src, tmp) != 0)
            bench_die("a round trip differs from the source");
    }
    printf("\n# directory transfer: %d files (%d dirs x 100, 16-200 B), median of %d, "
           "linux box (busybox image for the tar|exec baseline)\n",
           tree_dirs * 100, tree_dirs, n);
    double cpm = bench_pct(cp, n, 50);
    row("upload_dir (host -> box)", bench_pct(up, n, 50), bench_pct(oup, n, 50), cpm);
    row("download_dir (box -> host)", bench_pct(down, n, 50), bench_pct(odown, n, 50), cpm);
    sbx_sandbox_stop(sb, NULL);
    sbx_sandbox_free(sb);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    sh("rm -rf %s", tmp);
    free(up);
    free(down);
    free(oup);
    free(odown);
    free(cp);
    return 0;
}
