/*
 * [svc-logs] Service logs of the linux provider against real boxes: the
 * entrypoint's stdout and stderr kept by the shim (service.log), read with
 * sbx_sandbox_logs (since, tail, follow), rotation, binary and flooding
 * output, and the service's end in status and the listing. Each test ends
 * with a census: nothing may be left on the host.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include <sbx.h>

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* Every entry sbx_sandbox_logs gave, in order. */
struct got {
    size_t n;
    int streams[4096];
    double times[4096];
    char *text; /* all entries' bytes, concatenated, NUL-ended */
    size_t len;
    char out[1 << 20], err[1 << 16]; /* stdout / stderr bytes, each NUL-ended (capped) */
    size_t out_len, err_len;
    atomic_int seen;
    const char *stop_at; /* a stdout entry equal to this stops the read */
};

static int collect(double t, int stream, const char *data, size_t len, void *user)
{
    struct got *g = user;
    if (g->n < 4096) {
        g->streams[g->n] = stream;
        g->times[g->n] = t;
    }
    g->n++;
    char *p = realloc(g->text, g->len + len + 1);
    if (!p)
        abort();
    memcpy(p + g->len, data, len);
    g->len += len;
    p[g->len] = 0;
    g->text = p;
    if (stream == SBX_STREAM_STDOUT && g->out_len + len < sizeof(g->out)) {
        memcpy(g->out + g->out_len, data, len);
        g->out[g->out_len += len] = 0;
    }
    if (stream == SBX_STREAM_STDERR && g->err_len + len < sizeof(g->err)) {
        memcpy(g->err + g->err_len, data, len);
        g->err[g->err_len += len] = 0;
    }
    atomic_store(&g->seen, 1);
    return g->stop_at && stream == SBX_STREAM_STDOUT && len == strlen(g->stop_at) &&
           !memcmp(data, g->stop_at, len);
}

static struct got *logs(sbx_sandbox *sb, double since, long long tail)
{
    struct got *g = calloc(1, sizeof(*g));
    TAP_OK(sbx_sandbox_logs(sb, since, tail, 0, collect, g, &e_));
    return g;
}

static void got_free(struct got *g)
{
    if (g)
        free(g->text);
    free(g);
}

static sbx_sandbox *start_service(sbx_provider *p, const char *script)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_workdir(s, "/work");
    const char *argv[] = { "sh", "-c", script, NULL };
    TAP_OK(sbx_spec_set_entrypoint(s, argv));
    sbx_sandbox *sb = start(p, s);
    sbx_spec_free(s);
    return sb;
}

/* Runs `cmd` in the box; its exit status. */
static int rc_of_cmd(sbx_sandbox *sb, const char *cmd)
{
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, cmd, NULL, &r, &e_));
    int rc = sbx_exec_result_return_code(r);
    sbx_exec_result_free(r);
    return rc;
}

/* Runs `cmd` in the box; its stdout (static buffer). */
static const char *out_of_cmd(sbx_sandbox *sb, const char *cmd)
{
    static char buf[4096];
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, cmd, NULL, &r, &e_));
    const char *o = sbx_exec_result_stdout(r, NULL);
    snprintf(buf, sizeof(buf), "%s", o ? o : "");
    sbx_exec_result_free(r);
    return buf;
}

static void nap(void)
{
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
}

/* Waits (up to 60 s: a bound against hanging, not a measurement) until stdout has `want`. */
static struct got *wait_for_out(sbx_sandbox *sb, const char *want)
{
    for (int i = 0; i < 1200; i++) {
        struct got *g = logs(sb, 0, -1);
        if (memmem(g->out, g->out_len, want, strlen(want)))
            return g;
        got_free(g);
        nap();
    }
    TAP_FAIL("the service log never showed \"%s\"", want);
    return NULL;
}

static sbx_status status_of(sbx_sandbox *sb)
{
    sbx_status st = SBX_STATUS_UNKNOWN;
    TAP_OK(sbx_sandbox_status(sb, &st, &e_));
    return st;
}

static void wait_status(sbx_sandbox *sb, sbx_status want)
{
    for (int i = 0; i < 1200 && status_of(sb) != want; i++)
        nap();
    TAP_EQ_INT(status_of(sb), want);
}

/* The provider's listing entry's "service" for box `id`, as JSON text (static). */
static const char *listed_service(sbx_provider *p, const char *id)
{
    static char buf[256];
    char *text = NULL;
    TAP_OK(sbx_provider_list(p, NULL, &text, &e_));
    json_t *arr = json_loads(text, 0, NULL);
    free(text);
    size_t i;
    json_t *b;
    buf[0] = 0;
    json_array_foreach(arr, i, b)
    {
        if (strcmp(json_string_value(json_object_get(b, "id")), id))
            continue;
        char *s = json_dumps(json_object_get(json_object_get(b, "provider"), "service"),
                             JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        snprintf(buf, sizeof(buf), "%s %s", json_string_value(json_object_get(b, "status")),
                 s ? s : "?");
        free(s);
    }
    json_decref(arr);
    return buf;
}

/* --- tests ---------------------------------------------------------------- */

static void test_stdout_stderr_tail_since(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    /*
     * Each line waits for the one before it to be in the log: the order of
     * the two streams is then fixed (the shim reads two pipes; lines written
     * at the same moment to both come in the order of its reads).
     */
    sbx_sandbox *sb = start_service(
        p, "echo out1; while [ ! -e /tmp/a ]; do sleep 0.02; done; echo err1 >&2; "
           "while [ ! -e /tmp/b ]; do sleep 0.02; done; echo out2; sleep infinity");
    struct got *g = wait_for_out(sb, "out1\n");
    got_free(g);
    TAP_EQ_INT(rc_of_cmd(sb, "touch /tmp/a"), 0);
    for (int i = 0; i < 1200; i++) {
        g = logs(sb, 0, -1);
        bool has = strstr(g->err, "err1\n") != NULL;
        got_free(g);
        if (has)
            break;
        nap();
    }
    TAP_EQ_INT(rc_of_cmd(sb, "touch /tmp/b"), 0);
    g = wait_for_out(sb, "out2\n");
    /* Both streams, in the order written, each line its own entry. */
    TAP_EQ_STR(g->text, "out1\nerr1\nout2\n");
    TAP_EQ_INT((int)g->n, 3);
    TAP_EQ_INT(g->streams[0], SBX_STREAM_STDOUT);
    TAP_EQ_INT(g->streams[1], SBX_STREAM_STDERR);
    TAP_EQ_INT(g->streams[2], SBX_STREAM_STDOUT);
    TAP_TRUE(g->times[0] > 1e9 && g->times[0] <= g->times[2]);
    double t_last = g->times[2];
    got_free(g);
    /* tail: the last N entries. */
    g = logs(sb, 0, 2);
    TAP_EQ_STR(g->text, "err1\nout2\n");
    got_free(g);
    g = logs(sb, 0, 0);
    TAP_EQ_INT((int)g->n, 0);
    got_free(g);
    /* since: only entries read at or after it. */
    g = logs(sb, t_last, -1);
    TAP_EQ_STR(g->text, "out2\n");
    got_free(g);
    g = logs(sb, t_last + 3600, -1);
    TAP_EQ_INT((int)g->n, 0);
    got_free(g);
    TAP_EQ_INT(status_of(sb), SBX_STATUS_RUNNING);
    stop_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* tail counts lines: a line read in pieces counts once, and a window never starts mid-line. */
static void test_tail_counts_lines(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *sb = start_service(
        p, "echo first; printf 'par'; sleep 0.3; printf 'ti'; sleep 0.3; printf 'al\\n'; "
           "printf 'e-' >&2; sleep 0.3; echo last; sleep 0.3; echo rr >&2; sleep infinity");
    struct got *g = wait_for_out(sb, "first\npartial\nlast\n");
    got_free(g);
    for (int i = 0; i < 1200; i++) {
        g = logs(sb, 0, -1);
        bool has = strstr(g->err, "e-rr\n") != NULL;
        got_free(g);
        if (has)
            break;
        nap();
    }
    g = logs(sb, 0, -1);
    /* The pieces are entries of their own (one per read of the pipe). */
    TAP_TRUE(g->n >= 6);
    got_free(g);
    g = logs(sb, 0, 2);
    TAP_EQ_STR(g->out, "last\n");
    TAP_EQ_STR(g->err, "e-rr\n");
    got_free(g);
    g = logs(sb, 0, 3);
    TAP_EQ_STR(g->out, "partial\nlast\n");
    TAP_EQ_STR(g->err, "e-rr\n");
    got_free(g);
    /* Lines are ordered by where they begin: the last one is "last"; stderr's began before it. */
    g = logs(sb, 0, 1);
    TAP_EQ_STR(g->out, "last\n");
    TAP_EQ_STR(g->err, "");
    got_free(g);
    stop_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

struct follower {
    sbx_sandbox *sb;
    struct got g;
    int rc;
};

static void *follow_thread(void *arg)
{
    struct follower *f = arg;
    sbx_error *e = NULL;
    f->rc = sbx_sandbox_logs(f->sb, 0, -1, SBX_LOGS_FOLLOW, collect, &f->g, &e);
    sbx_error_free(e);
    return NULL;
}

/* -f: new lines as they come; the read ends when the service ends, or when the box is stopped. */
static void test_follow(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *sb = start_service(
        p, "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second; exit 0");
    struct follower *f = calloc(1, sizeof(*f));
    f->sb = sb;
    pthread_t th;
    TAP_EQ_INT(pthread_create(&th, NULL, follow_thread, f), 0);
    for (int i = 0; i < 1200 && !atomic_load(&f->g.seen); i++)
        nap();
    TAP_EQ_STR(f->g.text, "first\n");
    TAP_EQ_INT(rc_of_cmd(sb, "touch /tmp/go"), 0);
    /* The follow returns by itself: the service's end is the log's last record. */
    TAP_EQ_INT(pthread_join(th, NULL), 0);
    TAP_EQ_INT(f->rc, SBX_OK);
    TAP_EQ_STR(f->g.out, "first\nsecond\n");
    TAP_TRUE(f->g.n >= 3 && f->g.streams[f->g.n - 1] == SBX_STREAM_EVENT);
    TAP_CONTAINS(f->g.text, "exited 0");
    free(f->g.text);
    free(f);
    stop_free(sb);

    /* A service that runs on: the follow ends when the box is stopped. */
    sb = start_service(p, "echo alive; sleep infinity");
    f = calloc(1, sizeof(*f));
    f->sb = sb;
    TAP_EQ_INT(pthread_create(&th, NULL, follow_thread, f), 0);
    for (int i = 0; i < 1200 && !atomic_load(&f->g.seen); i++)
        nap();
    TAP_EQ_STR(f->g.text, "alive\n");
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    TAP_EQ_INT(pthread_join(th, NULL), 0);
    TAP_EQ_INT(f->rc, SBX_OK);
    free(f->g.text);
    free(f);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* Rotation at a small bound: at most twice the bound on disk, and the newest lines are read. */
static void test_rotation(void)
{
    need_boxes();
    sbx_provider *p = provider("{\"log_max_bytes\": 131072}");
    sbx_sandbox *sb = start_service(
        p, "seq 1 200000 | sed 's/^/line-/'; echo END; sleep infinity");
    struct got *g = wait_for_out(sb, "END\n");
    /* The last lines are all there, in order, up to END. */
    TAP_CONTAINS(g->out, "line-199999\nline-200000\nEND\n");
    TAP_TRUE(strstr(g->out, "\nline-1\n") == NULL && strncmp(g->out, "line-1\n", 7)); /* rotated */
    /* Consecutive from the first kept line on: nothing lost in the middle. */
    /* (The oldest kept record may begin inside a line: counted from the first whole one.) */
    const char *q = strstr(g->out, "\nline-");
    TAP_TRUE(q != NULL);
    q++;
    long first = strtol(q + 5, NULL, 10);
    TAP_TRUE(first > 1);
    for (long i = first; i <= 200000; i++) {
        char want[32];
        int n = snprintf(want, sizeof(want), "line-%ld\n", i);
        if (strncmp(q, want, (size_t)n) != 0)
            TAP_FAIL("line %ld missing at \"%.20s\"", i, q);
        q += n;
    }
    TAP_EQ_STR(q, "END\n");
    got_free(g);
    char path[1200];
    struct stat a, b;
    snprintf(path, sizeof(path), "%s/boxes/%s/service.log", state_dir, sbx_sandbox_id(sb));
    TAP_EQ_INT(stat(path, &a), 0);
    TAP_EQ_INT(a.st_mode & 0777, 0600);
    snprintf(path, sizeof(path), "%s/boxes/%s/service.log.1", state_dir, sbx_sandbox_id(sb));
    TAP_EQ_INT(stat(path, &b), 0);
    TAP_TRUE(a.st_size <= 131072 && b.st_size <= 131072);
    /* tail reads the newest file's end. */
    g = logs(sb, 0, 1);
    TAP_EQ_STR(g->text, "END\n");
    got_free(g);
    stop_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* Binary bytes and one huge line with no newline come back byte for byte. */
static void test_binary_and_huge_lines(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *sb = start_service(p, "head -c 300000 /dev/zero | tr '\\000' x; "
                                       "printf '\\000\\001\\377\\n'; echo; echo TAIL; "
                                       "sleep infinity");
    struct got *g = wait_for_out(sb, "TAIL\n");
    TAP_EQ_INT((int)g->out_len, 300000 + 4 + 1 + 5);
    for (size_t i = 0; i < 300000; i++)
        if (g->out[i] != 'x')
            TAP_FAIL("byte %zu is %d", i, g->out[i]);
    TAP_TRUE(!memcmp(g->out + 300000, "\0\1\377\n\nTAIL\n", 10));
    got_free(g);
    stop_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* A service writing far more than the bound finishes its work: the pipes never block it. */
static void test_flood_never_blocks(void)
{
    need_boxes();
    sbx_provider *p = provider("{\"log_max_bytes\": 131072}");
    sbx_sandbox *sb = start_service(p, "yes flood-flood-flood | head -c 64000000; "
                                       "yes err | head -c 8000000 >&2; "
                                       "echo finished > /tmp/finished; echo FIN; sleep infinity");
    struct got *g = wait_for_out(sb, "FIN\n");
    got_free(g);
    TAP_EQ_STR(out_of_cmd(sb, "cat /tmp/finished"), "finished\n");
    char path[1200];
    struct stat a, b;
    snprintf(path, sizeof(path), "%s/boxes/%s/service.log", state_dir, sbx_sandbox_id(sb));
    TAP_EQ_INT(stat(path, &a), 0);
    snprintf(path, sizeof(path), "%s/boxes/%s/service.log.1", state_dir, sbx_sandbox_id(sb));
    TAP_EQ_INT(stat(path, &b), 0);
    TAP_TRUE(a.st_size + b.st_size <= 2 * 131072);
    stop_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* A service that exits 3: status stopped, the listing says exited 3, and exec still works. */
static void test_service_exit_code(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *sb = start_service(p, "echo bye; exit 3");
    wait_status(sb, SBX_STATUS_STOPPED);
    TAP_EQ_STR(listed_service(p, sbx_sandbox_id(sb)), "stopped {\"code\":3,\"state\":\"exited\"}");
    TAP_EQ_STR(out_of_cmd(sb, "echo still here"), "still here\n");
    struct got *g = logs(sb, 0, -1);
    TAP_EQ_STR(g->out, "bye\n");
    TAP_CONTAINS(g->err, "sbx-agent: entrypoint exited with status 3");
    TAP_EQ_INT(g->streams[g->n - 1], SBX_STREAM_EVENT);
    TAP_CONTAINS(g->text, "exited 3");
    got_free(g);
    stop_free(sb);

    /* Killed by a signal. */
    sb = start_service(p, "kill -9 $$");
    wait_status(sb, SBX_STATUS_STOPPED);
    TAP_EQ_STR(listed_service(p, sbx_sandbox_id(sb)), "stopped {\"code\":9,\"state\":\"killed\"}");
    TAP_EQ_INT(rc_of_cmd(sb, "true"), 0);
    stop_free(sb);

    /* No entrypoint: no service, running. */
    sbx_spec *s = sbx_spec_new();
    sb = start(p, s);
    sbx_spec_free(s);
    /* (The record says "creating" until the shim has the creator's ack: polled.) */
    for (int i = 0; i < 1200 && strcmp(listed_service(p, sbx_sandbox_id(sb)), "running null"); i++)
        nap();
    TAP_EQ_STR(listed_service(p, sbx_sandbox_id(sb)), "running null");
    TAP_EQ_INT(status_of(sb), SBX_STATUS_RUNNING);
    stop_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* Torn and malformed records, and a log file someone else may write. */
static void test_hostile_file_refused(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *sb = start_service(p, "echo x; sleep infinity");
    struct got *g = wait_for_out(sb, "x\n");
    got_free(g);
    char path[1200];
    snprintf(path, sizeof(path), "%s/boxes/%s/service.log", state_dir, sbx_sandbox_id(sb));
    /* A torn record at the end (one being written): the entries before it, no error. */
    struct stat before;
    TAP_EQ_INT(stat(path, &before), 0);
    FILE *f = fopen(path, "ae");
    TAP_TRUE(f != NULL);
    fwrite("SL\001\000\005\000", 1, 6, f);
    fclose(f);
    g = logs(sb, 0, -1);
    TAP_EQ_STR(g->text, "x\n");
    got_free(g);
    /* A malformed one (bad magic): the entries before it, then SBX_EIO. */
    TAP_EQ_INT(truncate(path, before.st_size), 0);
    f = fopen(path, "ae");
    TAP_TRUE(f != NULL);
    fwrite("XXXXXXXXXXXXXXXXXXXX", 1, 20, f);
    fclose(f);
    g = calloc(1, sizeof(*g));
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_logs(sb, 0, -1, 0, collect, g, &e), SBX_EIO);
    TAP_CONTAINS(sbx_error_message(e), "malformed record");
    TAP_EQ_STR(g->text, "x\n");
    sbx_error_free(e);
    e = NULL;
    got_free(g);
    /* A file others may write is refused, not read. */
    TAP_EQ_INT(chmod(path, 0622), 0);
    g = calloc(1, sizeof(*g));
    TAP_EQ_INT(sbx_sandbox_logs(sb, 0, -1, 0, collect, g, &e), SBX_EPERM);
    TAP_CONTAINS(sbx_error_message(e), "refused");
    sbx_error_free(e);
    got_free(g);
    stop_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* [svc-logs] Startup files with modes: an 0755 script runs, an 0600 file stays 0600. */
static void check_file_modes(sbx_provider *p, const char *dir)
{
    char json[2048], path[1024], cmd[2048];
    snprintf(json, sizeof(json),
             "{\"workdir\": \"%s\", \"files\": {"
             "\"%s/run.sh\": {\"content\": \"#!/bin/sh\\necho ran\\n\", \"mode\": \"0755\"},"
             "\"%s/secret\": {\"content\": \"AP8=\", \"encoding\": \"base64\", \"mode\": \"0640\"},"
             "\"%s/plain\": \"text\"}}",
             dir, dir, dir, dir);
    sbx_spec *s = NULL;
    TAP_OK(sbx_spec_from_json(json, &s, &e_));
    snprintf(path, sizeof(path), "%s/c.sh", dir);
    TAP_OK(sbx_spec_add_file_mode(s, path, "#!/bin/sh\necho c\n", 17, 0700));
    sbx_sandbox *sb = start(p, s);
    sbx_spec_free(s);
    snprintf(cmd, sizeof(cmd), "%s/run.sh && %s/c.sh", dir, dir);
    TAP_EQ_STR(out_of_cmd(sb, cmd), "ran\nc\n");
    snprintf(cmd, sizeof(cmd), "cd %s && stat -c '%%n %%a %%s' run.sh secret plain c.sh", dir);
    TAP_EQ_STR(out_of_cmd(sb, cmd), "run.sh 755 19\nsecret 640 2\nplain 600 4\nc.sh 700 17\n");
    snprintf(cmd, sizeof(cmd), "od -An -tx1 %s/secret | tr -d ' \\n'", dir);
    TAP_EQ_STR(out_of_cmd(sb, cmd), "00ff");
    stop_free(sb);
}

static void test_file_modes(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    check_file_modes(p, "/w");
    sbx_provider_free(p);
    census_check(state_dir);
    /* The local provider writes them the same way (its paths are the host's: a private one). */
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/localbox", tap_tmpdir());
    sbx_provider *lp = NULL;
    TAP_OK(sbx_provider_new("{\"local\": {}}", &lp, &e_));
    check_file_modes(lp, dir);
    sbx_provider_free(lp);
}

/* When the box's agent dies, the shim's last event says so and a follow ends there. */
static void test_agent_death_ends_follow(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *sb = start_service(p, "echo up; sleep infinity");
    struct got *g = wait_for_out(sb, "up\n");
    got_free(g);
    char path[1200];
    snprintf(path, sizeof(path), "%s/boxes/%s/record.json", state_dir, sbx_sandbox_id(sb));
    json_t *rec = json_load_file(path, 0, NULL);
    json_int_t pid = json_integer_value(json_object_get(rec, "init_pid"));
    json_decref(rec);
    TAP_TRUE(pid > 1);
    TAP_EQ_INT(kill((pid_t)pid, SIGKILL), 0);
    g = calloc(1, sizeof(*g));
    TAP_OK(sbx_sandbox_logs(sb, 0, -1, SBX_LOGS_FOLLOW, collect, g, &e_));
    TAP_EQ_INT(g->streams[g->n - 1], SBX_STREAM_EVENT);
    TAP_TRUE(g->len >= 14 && !strcmp(g->text + g->len - 14, "agent killed 9"));
    got_free(g);
    wait_status(sb, SBX_STATUS_ERROR);
    stop_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* Boxes under ASan on a shared, loaded machine: room past the default 60 s (a hang guard). */
TAP_MAIN(TAP_T(test_stdout_stderr_tail_since, 120), TAP_T(test_tail_counts_lines, 120),
         TAP_T(test_follow, 120),
         TAP_T(test_rotation, 120), TAP_T(test_binary_and_huge_lines, 120),
         TAP_T(test_flood_never_blocks, 300), TAP_T(test_service_exit_code, 120),
         TAP_T(test_hostile_file_refused, 120), TAP_T(test_file_modes, 120),
         TAP_T(test_agent_death_ends_follow, 120))
