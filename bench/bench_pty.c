/*
 * The pty exec facade's round trip (sbx_sandbox_pty_exec of `true` in the
 * default shell session: the NGPTY marker protocol over the box's agent)
 * against a plain exec of `true` on the same box, in the same run, on the
 * local provider and, as root, on linux. Prints numbers and their ratio
 * (pty / plain: above 1 the session round trip is slower); never fails on
 * them.
 *
 *   build/bench/bench_pty [iterations]   (default 200)
 */
#include <sbx.h>
#include "lib/bench.h"

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what, sbx_error *e)
{
    fprintf(stderr, "bench_pty: %s: %s\n", what, e ? sbx_error_message(e) : "failed");
    sbx_error_free(e);
    return -1;
}

/* The helpers of this build tree (build/bench/.. holds sbx-agent and sbx-shim), unless set. */
static void use_built_helpers(void)
{
    char self[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return;
    self[n] = 0;
    for (int up = 0; up < 2; up++) {
        char *sl = strrchr(self, '/');
        if (!sl)
            return;
        *sl = 0;
    }
    static const char *const helpers[][2] = {{"sbx-agent", "SBX_AGENT"}, {"sbx-shim", "SBX_SHIM"}};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", self, helpers[i][0]);
        if (!getenv(helpers[i][1]) && access(path, X_OK) == 0)
            setenv(helpers[i][1], path, 1);
    }
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int bench(const char *label, const char *cfg, int n)
{
    sbx_error *e = NULL;
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_pty *shell = NULL;
    int rc = -1;
    if (sbx_provider_new(cfg, &p, &e))
        return fail("provider", e);
    sbx_spec *spec = bench_spec(NULL);
    int started = sbx_sandbox_new(p, spec, &sb, &e) || sbx_sandbox_start(sb, NULL, &e);
    sbx_spec_free(spec);
    if (started) {
        fail("start", e);
        goto out;
    }
    /* The default session: the facade's implicit path from here on. */
    if (sbx_pty_open(sb, NULL, &shell, &e)) {
        fail("pty open", e);
        goto out;
    }
    double plain = 0, pty = 0;
    /* Interleaved rounds, so that drift on a shared machine hits both alike. */
    for (int i = 0; i < n; i++) {
        sbx_exec_result *r = NULL;
        double t0 = bench_now();
        if (sbx_sandbox_exec(sb, "true", NULL, &r, &e)) {
            fail("exec", e);
            goto out;
        }
        double t1 = bench_now();
        sbx_exec_result_free(r);
        if (sbx_sandbox_pty_exec(sb, "true", NULL, &r, &e)) {
            fail("pty exec", e);
            goto out;
        }
        double t2 = bench_now();
        if (sbx_exec_result_return_code(r) != 0) {
            fprintf(stderr, "bench_pty: pty exec 'true' returned %d\n",
                    sbx_exec_result_return_code(r));
            sbx_exec_result_free(r);
            goto out;
        }
        sbx_exec_result_free(r);
        plain += t1 - t0;
        pty += t2 - t1;
    }
    printf("%-6s exec 'true'          %8.1f us each  (%d)\n", label, plain / n * 1e6, n);
    printf("%-6s pty exec 'true'      %8.1f us each  (default session)  ratio %.2f\n", label,
           pty / n * 1e6, pty / plain);
    rc = 0;
out:
    sbx_pty_free(shell);
    if (sb && sbx_sandbox_stop(sb, &e))
        fail("stop", e);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    return rc;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 200;
    if (n < 1)
        n = 1;
    use_built_helpers();
    char root[] = "/tmp/sbx-bench-pty-XXXXXX";
    if (!mkdtemp(root))
        return 1;
    char cfg[512];
    printf("# pty exec round trip vs plain exec (ratio: pty / plain)\n");
    fflush(stdout);
    snprintf(cfg, sizeof(cfg),
             "{\"local\": {\"workspace_root\": \"%s\", \"state_dir\": \"%s/state\"}}", root, root);
    int rc = bench("local", cfg, n);
    if (geteuid() == 0) {
        char st[600];
        snprintf(st, sizeof(st), "%s/linux-state", root);
        setenv("SBX_STATE_DIR", st, 1);
        rc |= bench("linux", "{\"linux\": {}}", n);
    } else {
        printf("linux  (skipped: needs root)\n");
    }
    if (nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "bench_pty: could not remove %s\n", root);
    return rc ? 1 : 0;
}
