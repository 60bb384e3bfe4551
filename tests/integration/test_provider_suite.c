/*
 * The provider-neutral behavioural suite: what a user expects of any
 * provider, run against local, linux and a plugin: hostbox (the kit's
 * example, from SBX_PLUGIN_PATH, default build/examples/provider), or the
 * plugin provider SBX_SUITE_PLUGIN names. SBX_SUITE_PROVIDERS (default
 * "local linux hostbox") picks which run; a provider's config comes from
 * SBX_SUITE_CONFIG_<name> (a JSON mapping) when set.
 *
 * Cases: exec (exit codes, stdout/stderr, cwd, env, stdin, timeout),
 * streaming (first bytes before the end, partial output on timeout),
 * upload/download round trip with modes, directories and bytes (through
 * the agent or, without one, the box's shell), status before/after stop, stop
 * twice, list with labels, stop by id, gc by label and by expiry, bad
 * input failing cleanly, service logs (or a clear "not kept"), and terminals
 * (input, size, resize, a signal, the exit status, pipe mode; or a clear
 * "unsupported"). A provider that cannot list must say so
 * (SBX_ENOTSUP), never answer wrongly.
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"

#include <sbx.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *prov; /* the provider under test */

static bool use_provider(const char *name)
{
    const char *list = getenv("SBX_SUITE_PROVIDERS");
    if (!list)
        return true; /* all three slots */
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' '))
            return true;
    return false;
}

/* Points the provider at private state in this test's temp dir, or skips. */
static sbx_provider *setup(const char *name)
{
    prov = name;
    if (!use_provider(name))
        TAP_SKIP("not in SBX_SUITE_PROVIDERS");
    tap_allow_fd_changes(); /* the loop's descriptors */
    char st[1024], cfg[2048], env[128];
    snprintf(st, sizeof(st), "%s/state", tap_tmpdir());
    setenv("SBX_STATE_DIR", st, 1);
    snprintf(env, sizeof(env), "SBX_SUITE_CONFIG_%s", name);
    const char *own = getenv(env);
    if (!strcmp(name, "linux")) {
        if (geteuid() != 0)
            TAP_SKIP("linux boxes need root");
        char *agent = getenv("SBX_AGENT") ? NULL : realpath("build/sbx-agent", NULL);
        if (agent)
            setenv("SBX_AGENT", agent, 1); /* the static agent, as linux_fixture.h does */
        free(agent);
    }
    if (!strcmp(name, "hostbox") && !getenv("SBX_PLUGIN_PATH")) {
        char *dir = realpath("build/examples/provider", NULL);
        if (!dir)
            TAP_FAIL("the hostbox plugin is not built (make examples)");
        setenv("SBX_PLUGIN_PATH", dir, 1);
        free(dir);
    }
    if (own)
        snprintf(cfg, sizeof(cfg), "{\"%s\": %s}", name, own);
    else if (!strcmp(name, "local"))
        snprintf(cfg, sizeof(cfg), "{\"local\": {\"workspace_root\": \"%s/ws\"}}", tap_tmpdir());
    else
        snprintf(cfg, sizeof(cfg), "{\"%s\": {}}", name);
    return provider_of(cfg);
}

/* --- cases ------------------------------------------------------------------ */

static void case_exec(sbx_provider *p)
{
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_env(spec, "SUITE_SPEC", "from-spec");
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);

    run_is(sb, "echo out; echo err >&2; exit 7", NULL, 7, "out\n", "err\n");

    /* env: the spec's, and the exec's over it */
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_env(o, "SUITE_EXEC", "from-exec");
    sbx_exec_result *r = run(sb, "echo $SUITE_SPEC $SUITE_EXEC", o);
    TAP_EQ_STR(stdout_of(r), "from-spec from-exec\n");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);

    /* cwd: a directory made in the box */
    r = run(sb, "mkdir -p suite-sub/inner && cd suite-sub/inner && pwd", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    char want[4096];
    snprintf(want, sizeof(want), "%s", stdout_of(r));
    sbx_exec_result_free(r);
    o = sbx_exec_opts_new();
    sbx_exec_opts_set_cwd(o, "suite-sub/inner");
    r = run(sb, "pwd", o);
    TAP_EQ_STR(stdout_of(r), want);
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);

    /* stdin */
    o = sbx_exec_opts_new();
    sbx_exec_opts_set_stdin(o, "line one\nline two\n", 18);
    r = run(sb, "wc -l", o);
    TAP_CONTAINS(stdout_of(r), "2");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);

    /* timeout: the reference's rc 125 and error_type "timeout" */
    sbx_exec_result_free(timed_out(sb, "sleep 30", 0.5));

    /* the box still works after a timeout */
    r = run(sb, "echo again", NULL);
    TAP_EQ_STR(stdout_of(r), "again\n");
    sbx_exec_result_free(r);
    stop_free(sb);
}

/*
 * Streaming exec: a provider that says "exec-stream" hands over the first
 * bytes while the command still runs (it waits on a gate file the test makes
 * only after reading them: no timing); any provider delivers every byte to
 * the caller's fd by completion; a timed-out command keeps its partial output.
 */
static void case_stream(sbx_provider *p)
{
    sbx_sandbox *sb = start(p, NULL);
    int po[2];
    TAP_EQ_INT(pipe2(po, O_CLOEXEC), 0);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_EQ_INT(sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, po[1]), SBX_OK);
    sbx_future *f = NULL;
    bool streams = sbx_provider_supports(p, "exec-stream");
    const char *cmd = streams ? "rm -f suite-gate; echo first; "
                                "while [ ! -e suite-gate ]; do sleep 0.01; done; echo second"
                              : "echo first; echo second";
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, cmd, o, &f, NULL), SBX_OK);
    char *seen = read_fd_until(po[0], "first\n", 60);
    if (streams) {
        TAP_TRUE(!sbx_future_done(f)); /* it waits for the gate: the bytes came early */
        sbx_exec_result_free(run(sb, "touch suite-gate", NULL));
    }
    sbx_error *e = NULL;
    if (sbx_future_wait(f, 60, &e) != SBX_OK)
        TAP_FAIL("%s: streamed exec: %s", prov, sbx_error_message(e));
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_future_take_exec_result(f, &r, &e), SBX_OK);
    TAP_EQ_STR(stdout_of(r), "first\nsecond\n"); /* the result keeps it too */
    sbx_exec_result_free(r);
    sbx_future_free(f);
    close(po[1]);
    /* What came to the fd, in all: both lines, once each (a non-streaming provider's come at once). */
    char all[128] = {0};
    snprintf(all, sizeof(all), "%s", seen);
    free(seen);
    size_t have = strlen(all);
    ssize_t n;
    while (have < sizeof(all) - 1 && (n = read(po[0], all + have, sizeof(all) - 1 - have)) > 0)
        have += (size_t)n;
    close(po[0]);
    TAP_EQ_STR(all, "first\nsecond\n");
    sbx_exec_opts_free(o);

    /* a timeout returns what the command printed before it */
    r = timed_out(sb, "echo partial; sleep 30", 0.5);
    TAP_EQ_STR(stdout_of(r), "partial\n");
    sbx_exec_result_free(r);
    stop_free(sb);
}

static void case_transfer(sbx_provider *p)
{
    sbx_sandbox *sb = start(p, NULL);
    char src[1024], back[1024];
    snprintf(src, sizeof(src), "%s/src.sh", tap_tmpdir());
    snprintf(back, sizeof(back), "%s/back/dir/file.sh", tap_tmpdir());
    TAP_EQ_INT(write_text(src, "#!/bin/sh\necho ran\n"), 0);
    chmod(src, 0751);
    sbx_error *e = NULL;
    if (sbx_sandbox_upload(sb, src, "up/d/run.sh", &e) != SBX_OK)
        TAP_FAIL("%s: upload: %s", prov, sbx_error_message(e));
    sbx_exec_result *r = run(sb, "./up/d/run.sh && stat -c %a up/d/run.sh", NULL);
    TAP_EQ_STR(stdout_of(r), "ran\n751\n");
    sbx_exec_result_free(r);
    r = run(sb, "printf 'made in the box' > made.txt && chmod 640 made.txt", NULL);
    sbx_exec_result_free(r);
    if (sbx_sandbox_download(sb, "made.txt", back, &e) != SBX_OK)
        TAP_FAIL("%s: download: %s", prov, sbx_error_message(e));
    char got[128] = "";
    FILE *f = fopen(back, "r");
    TAP_TRUE(f != NULL);
    TAP_TRUE(fgets(got, sizeof(got), f) != NULL);
    fclose(f);
    TAP_EQ_STR(got, "made in the box");
    struct stat st;
    TAP_EQ_INT(stat(back, &st), 0);
    TAP_EQ_INT(st.st_mode & 0777, 0640);
    /* missing files on either side: SBX_ENOENT, the box unharmed */
    TAP_EQ_INT(sbx_sandbox_download(sb, "no-such-file", back, &e), SBX_ENOENT);
    sbx_error_free(e);
    e = NULL;
    snprintf(src, sizeof(src), "%s/no-such-file", tap_tmpdir());
    TAP_EQ_INT(sbx_sandbox_upload(sb, src, "x", &e), SBX_ENOENT);
    sbx_error_free(e);
    e = NULL;

    /*
     * Directories and bytes, on every provider: through the agent's built-ins
     * where the provider declares SBX_CAP_AGENT, else through its file ops
     * and the box's shell (tar, test, chmod: docs/transfer.md).
     */
    char dir[900], dback[900];
    snprintf(dir, sizeof(dir), "%s/tree", tap_tmpdir());
    snprintf(dback, sizeof(dback), "%s/tree-back", tap_tmpdir());
    TAP_EQ_INT(mkdir(dir, 0755), 0);
    snprintf(src, sizeof(src), "%s/sub", dir);
    TAP_EQ_INT(mkdir(src, 0750), 0);
    snprintf(src, sizeof(src), "%s/sub/a.txt", dir);
    TAP_EQ_INT(write_text(src, "in a tree\n"), 0);
    chmod(src, 0604);
    snprintf(src, sizeof(src), "%s/sub/it's here", dir);
    TAP_EQ_INT(write_text(src, "a name to quote\n"), 0);
    if (sbx_sandbox_upload_dir(sb, dir, "tree", 0, &e) != SBX_OK)
        TAP_FAIL("%s: upload_dir: %s", prov, sbx_error_message(e));
    r = run(sb, "cat tree/sub/a.txt \"tree/sub/it's here\" && stat -c %a tree/sub tree/sub/a.txt",
            NULL);
    TAP_EQ_STR(stdout_of(r), "in a tree\na name to quote\n750\n604\n");
    sbx_exec_result_free(r);
    const char *kind = "?";
    TAP_OK(sbx_sandbox_remote_kind(sb, "tree", &kind, &e_));
    TAP_EQ_STR(kind, "dir");
    TAP_OK(sbx_sandbox_remote_kind(sb, "tree/sub/a.txt", &kind, &e_));
    TAP_EQ_STR(kind, "file");
    TAP_OK(sbx_sandbox_remote_kind(sb, "tree/nothing", &kind, &e_));
    TAP_NULL(kind);
    if (sbx_sandbox_download_dir(sb, "tree", dback, 0, &e) != SBX_OK)
        TAP_FAIL("%s: download_dir: %s", prov, sbx_error_message(e));
    snprintf(src, sizeof(src), "%s/sub/a.txt", dback);
    char *t = read_text(src);
    TAP_EQ_STR(t, "in a tree\n");
    free(t);
    TAP_EQ_INT(stat(src, &st), 0);
    TAP_EQ_INT(st.st_mode & 0777, 0604);
    snprintf(src, sizeof(src), "%s/sub/it's here", dback);
    t = read_text(src);
    TAP_EQ_STR(t, "a name to quote\n");
    free(t);
    /* A directory that is not there: an error naming it, nothing made on the host. */
    snprintf(src, sizeof(src), "%s/nothing-back", tap_tmpdir());
    TAP_TRUE(sbx_sandbox_download_dir(sb, "no-such-dir", src, 0, &e) < 0);
    TAP_CONTAINS(sbx_error_message(e), "no-such-dir");
    sbx_error_free(e);
    e = NULL;
    TAP_OK(sbx_sandbox_write_file(sb, "bytes/b.bin", "\0\1two", 5, 0640, &e_));
    r = run(sb, "stat -c %a bytes/b.bin", NULL);
    TAP_EQ_STR(stdout_of(r), "640\n");
    sbx_exec_result_free(r);
    char *data = NULL;
    size_t len = 0;
    TAP_OK(sbx_sandbox_read_file(sb, "bytes/b.bin", 0, &data, &len, &e_));
    TAP_EQ_INT((int)len, 5);
    TAP_TRUE(!memcmp(data, "\0\1two", 5));
    free(data);
    /* Held to max_bytes: more is an error, not a cut. */
    TAP_EQ_INT(sbx_sandbox_read_file(sb, "bytes/b.bin", 4, &data, &len, &e), SBX_ETRANSFER);
    TAP_CONTAINS(sbx_error_message(e), "it holds 5 bytes, more than the limit of 4");
    sbx_error_free(e);
    e = NULL;
    stop_free(sb);
}

static void case_status_stop(sbx_provider *p)
{
    sbx_sandbox *sb = NULL;
    sbx_status s;
    sbx_spec *spec = sbx_spec_new();
    TAP_OK(sbx_sandbox_new(p, spec, &sb, NULL));
    sbx_spec_free(spec);
    TAP_OK(sbx_sandbox_status(sb, &s, NULL));
    TAP_EQ_INT(s, SBX_STATUS_UNKNOWN);
    sbx_error *e = NULL;
    if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
        TAP_FAIL("%s: start: %s", prov, sbx_error_message(e));
    TAP_OK(sbx_sandbox_status(sb, &s, NULL));
    TAP_EQ_INT(s, SBX_STATUS_RUNNING);
    TAP_OK(sbx_sandbox_stop(sb, NULL));
    TAP_OK(sbx_sandbox_stop(sb, NULL)); /* twice: idempotent */
    TAP_OK(sbx_sandbox_status(sb, &s, NULL));
    TAP_EQ_INT(s, SBX_STATUS_STOPPED);
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "true", NULL, &r, &e), SBX_ESTATE);
    sbx_error_free(e);
    sbx_sandbox_free(sb);
}

/* The list's entry for `id` as text, or NULL. */
static char *listed(sbx_provider *p, const char *filter, const char *id)
{
    char *text = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_list(p, filter, &text, &e) != SBX_OK)
        TAP_FAIL("%s: list: %s", prov, sbx_error_message(e));
    char key[256];
    snprintf(key, sizeof(key), "\"%s\"", id);
    char *at = strstr(text, key);
    char *copy = NULL;
    if (at) {
        /* the object around it */
        char *open = at;
        while (open > text && *open != '{')
            open--;
        int depth = 0;
        char *end = open;
        for (; *end; end++) {
            depth += *end == '{' ? 1 : *end == '}' ? -1 : 0;
            if (!depth)
                break;
        }
        copy = strndup(open, (size_t)(end - open + 1));
        /* spacing is the provider's: compare without it */
        char *w = copy;
        for (char *c = copy; c && *c; c++)
            if (*c != ' ')
                *w++ = *c;
        if (w)
            *w = 0;
    }
    free(text);
    return copy;
}

static bool can_list(sbx_provider *p)
{
    if (sbx_provider_supports(p, "list"))
        return true;
    /* Not listing: said so, as the documented error. */
    char *text = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_list(p, NULL, &text, &e), SBX_ENOTSUP);
    TAP_NULL(text);
    sbx_error_free(e);
    return false;
}

static sbx_sandbox *labelled(sbx_provider *p, const char *run, double ttl)
{
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_metadata(spec, "suite-run", run);
    if (ttl > 0)
        sbx_spec_set_ttl(spec, ttl);
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    return sb;
}

static void case_list_stop_id(sbx_provider *p)
{
    if (!can_list(p))
        return;
    sbx_sandbox *a = labelled(p, "r1", 0), *b = labelled(p, "r2", 0);
    char *ea = listed(p, NULL, sbx_sandbox_id(a));
    TAP_TRUE(ea != NULL);
    TAP_CONTAINS(ea, "\"suite-run\":\"r1\"");
    TAP_CONTAINS(ea, "\"status\":\"running\"");
    free(ea);
    /* a label filter keeps only the matching box */
    char *fa = listed(p, "{\"labels\": {\"suite-run\": \"r1\"}}", sbx_sandbox_id(a));
    char *fb = listed(p, "{\"labels\": {\"suite-run\": \"r1\"}}", sbx_sandbox_id(b));
    TAP_TRUE(fa != NULL);
    TAP_NULL(fb);
    free(fa);
    /* stop by id: gone from the list; an unknown id is SBX_ENOENT */
    sbx_error *e = NULL;
    if (sbx_provider_stop_box(p, sbx_sandbox_id(b), &e) != SBX_OK)
        TAP_FAIL("%s: stop_box: %s", prov, sbx_error_message(e));
    char *gone = listed(p, NULL, sbx_sandbox_id(b));
    TAP_NULL(gone);
    TAP_EQ_INT(sbx_provider_stop_box(p, "no-such-box-0", &e), SBX_ENOENT);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_provider_stop_box(p, "../escape", &e) < 0, 1);
    sbx_error_free(e);
    sbx_sandbox_free(b); /* its box is gone already: freeing must not fail or hang */
    stop_free(a);
}

static void case_gc(sbx_provider *p)
{
    if (!can_list(p))
        return;
    sbx_sandbox *keep = labelled(p, "keep", 0), *mine = labelled(p, "gc-me", 0),
                *old = labelled(p, "old", 0.5);
    /* dry run: reports, removes nothing */
    char *ids = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_gc(p, "{\"labels\": {\"suite-run\": \"gc-me\"}, \"dry_run\": true}", &ids,
                        &e) != SBX_OK)
        TAP_FAIL("%s: gc: %s", prov, sbx_error_message(e));
    TAP_CONTAINS(ids, sbx_sandbox_id(mine));
    free(ids);
    char *still = listed(p, NULL, sbx_sandbox_id(mine));
    TAP_TRUE(still != NULL);
    free(still);
    /* by label */
    TAP_OK(sbx_provider_gc(p, "{\"labels\": {\"suite-run\": \"gc-me\"}}", &ids, NULL));
    TAP_CONTAINS(ids, sbx_sandbox_id(mine));
    TAP_TRUE(strstr(ids, sbx_sandbox_id(keep)) == NULL);
    free(ids);
    TAP_NULL(listed(p, NULL, sbx_sandbox_id(mine)));
    /* by expiry: once its 0.5 s TTL has passed, a plain gc collects it and only it */
    sleep(1);
    TAP_OK(sbx_provider_gc(p, NULL, &ids, NULL));
    TAP_TRUE(strstr(ids, sbx_sandbox_id(keep)) == NULL);
    free(ids);
    TAP_NULL(listed(p, NULL, sbx_sandbox_id(old)));
    char *k = listed(p, NULL, sbx_sandbox_id(keep));
    TAP_TRUE(k != NULL);
    free(k);
    sbx_sandbox_free(mine);
    sbx_sandbox_free(old);
    stop_free(keep);
}

static void case_bad_input(sbx_provider *p)
{
    /* a bad list filter and bad gc options: SBX_EINVAL, nothing removed */
    if (sbx_provider_supports(p, "list")) {
        sbx_sandbox *sb = labelled(p, "bad", 0);
        char *text = NULL;
        sbx_error *e = NULL;
        TAP_EQ_INT(sbx_provider_list(p, "[1,2]", &text, &e), SBX_EINVAL);
        sbx_error_free(e);
        e = NULL;
        TAP_EQ_INT(sbx_provider_gc(p, "{\"labels\": {\"suite-run\": 3}}", &text, &e), SBX_EINVAL);
        sbx_error_free(e);
        char *still = listed(p, NULL, sbx_sandbox_id(sb));
        TAP_TRUE(still != NULL);
        free(still);
        stop_free(sb);
    }
    /* an exec option out of range is refused before anything runs */
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_TRUE(sbx_exec_opts_set_timeout(o, 2e9) < 0);
    sbx_exec_opts_free(o);
    /* after every box stopped: nothing left in the listing */
    if (sbx_provider_supports(p, "list")) {
        char *text = NULL;
        TAP_OK(sbx_provider_list(p, NULL, &text, NULL));
        TAP_EQ_STR(text, "[]");
        free(text);
    }
}

/* The CLI of this build tree (build/tests/integration/x -> build/sbx). */
static const char *cli_path(void)
{
    static char path[1200];
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        TAP_FAIL("cannot read /proc/self/exe");
    self[n] = 0;
    for (int up = 0; up < 3; up++)
        *strrchr(self, '/') = 0;
    snprintf(path, sizeof(path), "%s/sbx", self);
    if (access(path, X_OK) != 0)
        TAP_FAIL("the CLI is not built at %s (make)", path);
    return path;
}

/* `sbx ls`, `sbx stop ID` and `sbx gc --label` see and end this provider's boxes. */
static void case_cli(sbx_provider *p)
{
    if (!can_list(p))
        return;
    setenv("SBX_PROVIDER", prov, 1);
    const char *sbx = cli_path();
    sbx_sandbox *a = labelled(p, "cli-a", 0), *b = labelled(p, "cli-b", 0);
    char out[8192];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s ls", sbx), 0);
    TAP_CONTAINS(out, sbx_sandbox_id(a));
    TAP_CONTAINS(out, sbx_sandbox_id(b));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s ls -q --label suite-run=cli-b", sbx), 0);
    TAP_CONTAINS(out, sbx_sandbox_id(b));
    TAP_TRUE(strstr(out, sbx_sandbox_id(a)) == NULL);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s stop %s", sbx, sbx_sandbox_id(a)), 0);
    TAP_NULL(listed(p, NULL, sbx_sandbox_id(a)));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s stop %s", sbx, sbx_sandbox_id(a)), 3);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s gc --label suite-run=cli-b", sbx), 0);
    TAP_CONTAINS(out, sbx_sandbox_id(b));
    TAP_NULL(listed(p, NULL, sbx_sandbox_id(b)));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s ls -q", sbx), 0);
    TAP_EQ_STR(out, "");
    sbx_sandbox_free(a);
    sbx_sandbox_free(b);
}

/*
 * hostbox only: a box whose maker died (killed, no cleanup) lists as error,
 * and a plain gc collects it with its files; no agent stays behind.
 */
/* What sbx_sandbox_logs gave, per stream (bounded), and how many entries. */
struct slog {
    char out[4096], err[4096];
    size_t n;
};

static int slog_cb(double t, int stream, const char *data, size_t len, void *user)
{
    (void)t;
    struct slog *g = user;
    char *dst = stream == SBX_STREAM_STDOUT ? g->out : stream == SBX_STREAM_STDERR ? g->err : NULL;
    size_t have = dst ? strlen(dst) : 0;
    if (dst && have + len < sizeof(g->out)) {
        memcpy(dst + have, data, len);
        dst[have + len] = 0;
    }
    g->n++;
    return 0;
}

/*
 * Service logs: a provider that keeps them gives the entrypoint's stdout
 * and stderr apart, and the last line alone with a tail of 1; one that
 * keeps none says so (SBX_ENOTSUP), and one that runs no entrypoint
 * refuses it, saying so: never an empty log that looks kept.
 */
static void case_service_logs(sbx_provider *p)
{
    sbx_spec *spec = sbx_spec_new();
    const char *const ep[] = { "sh", "-c",
                               "echo suite-out; echo suite-err >&2; exec sleep 100000", NULL };
    TAP_OK(sbx_spec_set_entrypoint(spec, ep));
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    TAP_OK(sbx_sandbox_new(p, spec, &sb, &e_));
    sbx_spec_free(spec);
    if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK) {
        TAP_CONTAINS(sbx_error_message(e), "entrypoint");
        sbx_error_free(e);
        sbx_sandbox_free(sb);
        return;
    }
    struct slog *g = calloc(1, sizeof(*g));
    /* Until both lines are there (bounded at 60 s against a hang, not a measurement). */
    for (int i = 0; i < 600; i++) {
        memset(g, 0, sizeof(*g));
        int rc = sbx_sandbox_logs(sb, 0, -1, 0, slog_cb, g, &e);
        if (rc == SBX_ENOTSUP) {
            TAP_CONTAINS(sbx_error_message(e), "does not keep service logs");
            sbx_error_free(e);
            free(g);
            stop_free(sb);
            return;
        }
        if (rc != SBX_OK)
            TAP_FAIL("%s: logs: %s", prov, sbx_error_message(e));
        if (strstr(g->out, "suite-out\n") && strstr(g->err, "suite-err\n"))
            break;
        usleep(100 * 1000);
    }
    TAP_EQ_STR(g->out, "suite-out\n");
    TAP_CONTAINS(g->err, "suite-err\n");
    memset(g, 0, sizeof(*g));
    TAP_OK(sbx_sandbox_logs(sb, 0, 1, 0, slog_cb, g, &e_));
    TAP_EQ_INT((int)g->n, 1);
    free(g);
    stop_free(sb);
}

static void case_dead_maker(sbx_provider *p)
{
    if (strcmp(prov, "hostbox") != 0)
        return;
    setenv("SBX_PROVIDER", prov, 1);
    const char *sbx = cli_path();
    char out[8192];
    /* The command (hostbox runs on the host) kills its ancestor: the CLI that made the box. */
    char script[1200];
    snprintf(script, sizeof(script), "%s/kill-maker.sh", tap_tmpdir());
    TAP_EQ_INT(write_text(script,
                          "p=$$\n"
                          "while [ \"$p\" -gt 1 ] && [ \"$(ps -o comm= -p $p)\" != sbx ]; do\n"
                          "  p=$(ps -o ppid= -p $p | tr -d ' ')\n"
                          "done\n"
                          "[ \"$p\" -gt 1 ] && kill -KILL $p\n"),
               0);
    run_cmd(out, sizeof(out), "%s run -- sh %s", sbx, script);
    /* The agent sees end-of-file and exits: wait for that (bounded), then look. */
    char *text = NULL;
    for (int i = 0; i < 1000; i++) {
        free(text);
        TAP_OK(sbx_provider_list(p, NULL, &text, NULL));
        if (strstr(text, "\"status\":\"error\""))
            break;
        usleep(10 * 1000);
    }
    TAP_CONTAINS(text, "\"status\":\"error\"");
    free(text);
    char *ids = NULL;
    TAP_OK(sbx_provider_gc(p, NULL, &ids, NULL));
    TAP_CONTAINS(ids, "hb-");
    free(ids);
    TAP_OK(sbx_provider_list(p, NULL, &text, NULL));
    TAP_EQ_STR(text, "[]");
    free(text);
    char st[1200];
    snprintf(st, sizeof(st), "%s/state/hostbox/boxes", tap_tmpdir());
    TAP_EQ_INT(count_dir_entries(st), 0);
}

/*
 * Terminals: a provider that says "pty" (through its agent, or opening
 * them itself: provider ABI 3's pty_open) runs a command on a terminal of
 * the size asked, with input, resize, a signal to the foreground job and
 * its exit status; pipe mode keeps stderr apart. One that does not says so.
 */
/*
 * Reads `stream` until `want` shows; what came after it is kept for the
 * next call (one read may carry several lines).
 */
static void pty_read_until(sbx_pty *t, int stream, const char *want)
{
    static char got[2][16384];
    static size_t have[2];
    char *g = got[stream == SBX_STREAM_STDERR];
    size_t *h = &have[stream == SBX_STREAM_STDERR];
    char *at = NULL;
    for (int i = 0; i < 300 && !(at = strstr(g, want)); i++) {
        size_t n = 0;
        sbx_error *e = NULL;
        int rc = sbx_pty_read(t, stream, g + *h, sizeof(got[0]) - 1 - *h, 0.1, &n, NULL, &e);
        sbx_error_free(e);
        if (rc == SBX_ETIMEDOUT)
            continue;
        if (rc < 0 || n == 0 || *h + n >= sizeof(got[0]) - 1)
            break;
        *h += n;
        g[*h] = 0;
    }
    if (!at)
        TAP_FAIL("%s: the terminal never showed '%s'; it showed '%s'", prov, want, g);
    size_t used = (size_t)(at - g) + strlen(want);
    memmove(g, g + used, *h - used + 1);
    *h -= used;
}

static void case_terminal(sbx_provider *p)
{
    sbx_sandbox *sb = start(p, NULL);
    sbx_pty *t = NULL;
    sbx_error *e = NULL;
    if (!sbx_provider_supports(p, "pty")) {
        TAP_EQ_INT(sbx_pty_open(sb, NULL, &t, &e), SBX_ENOTSUP);
        sbx_error_free(e);
        stop_free(sb);
        return;
    }
    sbx_pty_opts *o = sbx_pty_opts_new();
    sbx_pty_opts_set_size(o, 30, 100);
    sbx_pty_opts_set_env(o, "SUITE_PTY", "env-ok");
    sbx_pty_opts_set_command(o, "echo ready $SUITE_PTY; read a; echo \"got:$a\"; stty size; "
                                "read b; stty size; trap 'echo trapped; exit 9' INT; "
                                "echo armed; while :; do sleep 0.1; done");
    TAP_OK(sbx_pty_open(sb, o, &t, &e_));
    sbx_pty_opts_free(o);
    TAP_TRUE(sbx_pty_id(t) > 0);
    pty_read_until(t, SBX_STREAM_STDOUT, "ready env-ok");
    TAP_OK(sbx_pty_write(t, "hello\n", 6, &e_));
    pty_read_until(t, SBX_STREAM_STDOUT, "30 100");
    TAP_OK(sbx_pty_resize(t, 40, 120, &e_));
    TAP_OK(sbx_pty_write(t, "\n", 1, &e_));
    pty_read_until(t, SBX_STREAM_STDOUT, "40 120");
    pty_read_until(t, SBX_STREAM_STDOUT, "armed");
    TAP_OK(sbx_pty_signal(t, "INT", &e_));
    pty_read_until(t, SBX_STREAM_STDOUT, "trapped");
    int code = -1;
    TAP_OK(sbx_pty_wait(t, 30, &code, &e_));
    TAP_EQ_INT(code, 9);
    TAP_OK(sbx_pty_close(t, &e_));

    /* Pipe mode: stdout and stderr apart, no terminal. */
    o = sbx_pty_opts_new();
    sbx_pty_opts_set_pipes(o, 1);
    sbx_pty_opts_set_command(o, "echo to-out; echo to-err >&2; exit 4");
    TAP_OK(sbx_pty_open(sb, o, &t, &e_));
    sbx_pty_opts_free(o);
    pty_read_until(t, SBX_STREAM_STDOUT, "to-out");
    pty_read_until(t, SBX_STREAM_STDERR, "to-err");
    TAP_OK(sbx_pty_wait(t, 30, &code, &e_));
    TAP_EQ_INT(code, 4);
    TAP_OK(sbx_pty_close(t, &e_));
    stop_free(sb);
}

#define SUITE(name)                                                                                \
    static void name##_exec(void)                                                                  \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_exec(p);                                                                              \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_stream(void)                                                                \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_stream(p);                                                                            \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_transfer(void)                                                              \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_transfer(p);                                                                          \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_status_stop(void)                                                           \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_status_stop(p);                                                                       \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_list_stop_id(void)                                                          \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_list_stop_id(p);                                                                      \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_gc(void)                                                                    \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_gc(p);                                                                                \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_cli(void)                                                                   \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_cli(p);                                                                               \
        case_dead_maker(p);                                                                        \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_bad_input(void)                                                             \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_bad_input(p);                                                                         \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_service_logs(void)                                                          \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_service_logs(p);                                                                      \
        sbx_provider_free(p);                                                                      \
    }                                                                                              \
    static void name##_terminal(void)                                                              \
    {                                                                                              \
        sbx_provider *p = setup(strcmp(#name, "plugin") ? #name : plugin_name());                  \
        case_terminal(p);                                                                          \
        sbx_provider_free(p);                                                                      \
    }

#define SUITE_TESTS(name)                                                                          \
    TAP_T(name##_exec, 120), TAP_T(name##_stream, 120), TAP_T(name##_transfer, 120),               \
        TAP_T(name##_status_stop, 120), TAP_T(name##_list_stop_id, 120), TAP_T(name##_gc, 120),    \
        TAP_T(name##_cli, 120), TAP_T(name##_bad_input, 120), TAP_T(name##_service_logs, 120),    \
        TAP_T(name##_terminal, 120)

/* The plugin slot: hostbox, or the provider SBX_SUITE_PLUGIN names (see docs/provider-guide.md). */
static const char *plugin_name(void)
{
    const char *n = getenv("SBX_SUITE_PLUGIN");
    return n && *n ? n : "hostbox";
}

SUITE(local)
SUITE(linux)
SUITE(plugin)

TAP_MAIN(SUITE_TESTS(local), SUITE_TESTS(linux), SUITE_TESTS(plugin))
