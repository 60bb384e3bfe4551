/*
 * The box-provider kit (<sbx/box.h>) beyond what the hostbox plugin shows in
 * test_provider_suite: an agent reached over a unix socket with the peer-pid
 * check, the pool closing idle socket connections past its cap and
 * reopening them, and the record store refusing what it must not believe.
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"

#include <sbx.h>
#include <sbx/box.h>
#include <sbx/provider.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* --- a test provider: sbx-agent init --listen SOCK, reached by path ------------ */

struct ks {
    sbx_box_pool *pool;
    int max;
    int n;
    pid_t wrong_peer; /* > 0: claim this pid as the agent's (the check must refuse it) */
};

struct kbox {
    char id[32];
    char sock[512];
    pid_t pid;
    sbx_box_agent *agent;
};

static struct ks *the_state;

static int ks_init(const char *cfg, void **state, sbx_error **err)
{
    (void)cfg;
    (void)err;
    struct ks *s = calloc(1, sizeof(*s));
    s->max = 1;
    s->pool = sbx_box_pool_new(s->max);
    *state = the_state = s;
    return SBX_OK;
}

static void ks_release(void *state)
{
    struct ks *s = state;
    sbx_box_pool_free(s->pool);
    free(s);
}

struct kcreate {
    sbx_op *op;
    struct kbox *b;
};

static void stop_work(sbx_op *op, void *data)
{
    struct kbox *b = data;
    sbx_box_stop_pid(b->pid, sbx_box_pid_start(b->pid), 5, NULL);
    unlink(b->sock);
    free(b);
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

static void ks_opened(sbx_box_agent *agent, int code, sbx_error *err, void *data)
{
    struct kcreate *k = data;
    sbx_op *op = k->op;
    struct kbox *b = k->b;
    free(k);
    if (!agent) {
        kill(b->pid, SIGKILL);
        waitpid(b->pid, NULL, 0);
        unlink(b->sock);
        free(b);
        sbx_op_complete(op, code, err, NULL);
        return;
    }
    b->agent = agent;
    sbx_op_complete(op, SBX_OK, NULL, b);
}

static void ks_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    (void)spec;
    struct ks *s = state;
    struct kbox *b = calloc(1, sizeof(*b));
    struct kcreate *k = calloc(1, sizeof(*k));
    snprintf(b->id, sizeof(b->id), "ks-%d", s->n++);
    snprintf(b->sock, sizeof(b->sock), "%s/%s.sock", tap_tmpdir(), b->id);
    char *agent = sbx_box_find_agent();
    if (!agent)
        TAP_FAIL("sbx-agent is not built");
    char init[] = "init", listen[] = "--listen";
    char *argv[] = {agent, init, listen, b->sock, NULL};
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
    if (posix_spawn(&b->pid, agent, NULL, &at, argv, environ) != 0)
        TAP_FAIL("cannot start %s", agent);
    posix_spawnattr_destroy(&at);
    free(agent);
    k->op = op;
    k->b = b;
    /* The socket appears once the agent listens: open_socket retries until then. */
    sbx_box_agent_open_socket(op, s->pool, b->sock, s->wrong_peer > 0 ? s->wrong_peer : b->pid, 10,
                              NULL, ks_opened, k);
}

static void ks_exec(sbx_op *op, void *state, void *box, const char *cmd, const sbx_exec_opts *o)
{
    (void)state;
    sbx_box_exec(op, ((struct kbox *)box)->agent, cmd, o, NULL);
}

static void ks_upload(sbx_op *op, void *state, void *box, const char *l, const char *r)
{
    (void)state;
    sbx_box_upload(op, ((struct kbox *)box)->agent, l, r);
}

static void ks_download(sbx_op *op, void *state, void *box, const char *r, const char *l)
{
    (void)state;
    sbx_box_download(op, ((struct kbox *)box)->agent, r, l);
}

static void ks_status(sbx_op *op, void *state, void *box)
{
    (void)state;
    sbx_box_ping(op, ((struct kbox *)box)->agent);
}

static void ks_close(sbx_op *op, void *state, void *box, int owned)
{
    (void)state;
    (void)owned;
    struct kbox *b = box;
    sbx_box_agent_free(b->agent);
    b->agent = NULL;
    struct kbox *copy = malloc(sizeof(*copy));
    *copy = *b;
    if (sbx_op_run_blocking(op, stop_work, copy) < 0)
        TAP_FAIL("run_blocking");
}

static const char *ks_id(const void *box)
{
    return ((const struct kbox *)box)->id;
}

static void ks_free(void *box)
{
    struct kbox *b = box;
    sbx_box_agent_free(b->agent);
    free(b);
}

static const struct sbx_provider_ops ks_ops = {
    SBX_PROVIDER_OPS_HEADER,  .name = "kitsock",
    .init = ks_init,          .release = ks_release,
    .create = ks_create,      .exec = ks_exec,
    .upload_file = ks_upload, .download_file = ks_download,
    .status = ks_status,      .close = ks_close,
    .box_id = ks_id,          .box_free = ks_free,
};

static sbx_provider *kitsock(void)
{
    tap_allow_fd_changes();
    if (!getenv("SBX_AGENT")) {
        char *agent = realpath("build/sbx-agent", NULL);
        if (agent)
            setenv("SBX_AGENT", agent, 1);
        free(agent);
    }
    sbx_error *e = NULL;
    if (sbx_register_provider(&ks_ops, 1, &e) != SBX_OK)
        TAP_FAIL("register: %s", sbx_error_message(e));
    return provider_of("{\"kitsock\": {}}");
}

static void expect_echo(sbx_sandbox *sb, const char *word)
{
    char cmd[64], want[64];
    snprintf(cmd, sizeof(cmd), "echo %s", word);
    snprintf(want, sizeof(want), "%s\n", word);
    sbx_exec_result *r = run(sb, cmd, NULL);
    TAP_EQ_STR(stdout_of(r), want);
    sbx_exec_result_free(r);
}

/* Three socket agents through a pool of one: each op reopens its box's connection. */
static void test_socket_agents_pooled(void)
{
    sbx_provider *p = kitsock();
    sbx_sandbox *sb[3];
    for (int i = 0; i < 3; i++)
        sb[i] = start(p, NULL);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 3; i++) {
            expect_echo(sb[i], i == 0 ? "zero" : i == 1 ? "one" : "two");
            /* After the op, the pool is back at its cap: one connection. */
            TAP_EQ_INT(sbx_box_pool_count(the_state->pool), 1);
        }
    sbx_status st;
    TAP_OK(sbx_sandbox_status(sb[0], &st, NULL));
    for (int i = 0; i < 3; i++) {
        TAP_OK(sbx_sandbox_stop(sb[i], NULL));
        sbx_sandbox_free(sb[i]);
    }
    TAP_EQ_INT(sbx_box_pool_count(the_state->pool), 0);
    sbx_provider_free(p);
}

/*
 * A box whose agent died (killed under it, as a TTL or a crash does): exec
 * returns the reference's result for a container no longer running, rc 125
 * and error_type "sandbox", not an error; a transfer fails saying why.
 */
static void test_exec_after_agent_died(void)
{
    sbx_provider *p = kitsock();
    sbx_sandbox *sb = start(p, NULL);
    expect_echo(sb, "alive");
    /* The command's parent is the agent: the exec loses its agent while it runs. */
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, "kill -9 $PPID; sleep 5", NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    sbx_exec_result_free(r);
    for (int k = 0; k < 2; k++) {
        r = NULL;
        TAP_OK(sbx_sandbox_exec(sb, "true", NULL, &r, &e_));
        TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
        TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
        TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "");
        TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "agent");
        sbx_exec_result_free(r);
    }
    char src[600];
    snprintf(src, sizeof(src), "%s/f.txt", tap_tmpdir());
    TAP_EQ_INT(write_text(src, "x"), 0);
    sbx_error *e = NULL;
    TAP_NE_INT(sbx_sandbox_upload(sb, src, "/tmp/f.txt", &e), SBX_OK);
    TAP_CONTAINS(sbx_error_message(e), "agent");
    sbx_error_free(e);
    TAP_OK(sbx_sandbox_stop(sb, NULL));
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* An agent claimed to be another process is refused before a byte is sent. */
static void test_socket_peer_checked(void)
{
    sbx_provider *p = kitsock();
    the_state->wrong_peer = getpid();
    sbx_spec *spec = sbx_spec_new();
    start_fails(p, spec, SBX_EPERM, "pid");
    sbx_spec_free(spec);
    sbx_provider_free(p);
}

/* --- records ------------------------------------------------------------------------ */

static void test_store_refuses(void)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof(dir), "%s/st", tap_tmpdir());
    sbx_box_store *s = NULL;
    sbx_error *e = NULL;
    TAP_OK(sbx_box_store_open("kit", dir, &s, &e));
    /* a record round trip */
    sbx_box_record r, back;
    TAP_OK(sbx_box_record_init(&r, "kit-1", NULL));
    r.pid = getpid();
    r.pid_start = sbx_box_pid_start(getpid());
    TAP_OK(sbx_box_record_write(s, &r, NULL));
    TAP_OK(sbx_box_record_read(s, "kit-1", &back, NULL));
    TAP_EQ_STR(back.id, "kit-1");
    TAP_EQ_INT(back.pid, getpid());
    TAP_TRUE(sbx_box_record_alive(s, &back));
    sbx_box_record_clear(&back);
    /* ids that are not path components */
    TAP_EQ_INT(sbx_box_record_read(s, "../x", &back, &e), SBX_EINVAL);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_box_record_init(&back, "a/b", NULL), SBX_EINVAL);
    /* a record that is a link: refused, never followed */
    snprintf(path, sizeof(path), "%s/boxes/kit-2", dir);
    TAP_EQ_INT(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/boxes/kit-2/record.json", dir);
    char target[1200];
    snprintf(target, sizeof(target), "%s/boxes/kit-1/record.json", dir);
    TAP_EQ_INT(symlink(target, path), 0);
    TAP_TRUE(sbx_box_record_read(s, "kit-2", &back, &e) < 0);
    sbx_error_free(e);
    e = NULL;
    /* a record others can write: refused */
    chmod(target, 0666);
    TAP_TRUE(sbx_box_record_read(s, "kit-1", &back, &e) < 0);
    sbx_error_free(e);
    e = NULL;
    chmod(target, 0600);
    /* A fresh box directory without a believable record may be a create in flight: left alone. */
    char *text = NULL;
    TAP_OK(sbx_box_store_list(s, NULL, &text, NULL));
    TAP_CONTAINS(text, "\"id\":\"kit-1\",\"status\":\"running\"");
    TAP_CONTAINS(text, "\"id\":\"kit-2\",\"status\":\"starting\"");
    free(text);
    TAP_OK(sbx_box_store_gc(s, NULL, &text, NULL));
    TAP_EQ_STR(text, "[]");
    free(text);
    /* Made two minutes ago: its maker is gone; listed as an error, and gc takes it only. */
    snprintf(path, sizeof(path), "%s/boxes/kit-2", dir);
    struct timespec old[2];
    clock_gettime(CLOCK_REALTIME, &old[0]);
    old[0].tv_sec -= 120;
    old[1] = old[0];
    TAP_EQ_INT(utimensat(AT_FDCWD, path, old, AT_SYMLINK_NOFOLLOW), 0);
    TAP_OK(sbx_box_store_list(s, NULL, &text, NULL));
    TAP_CONTAINS(text, "\"id\":\"kit-2\",\"status\":\"error\"");
    free(text);
    TAP_OK(sbx_box_store_gc(s, NULL, &text, NULL));
    TAP_EQ_STR(text, "[\"kit-2\"]");
    free(text);
    /* A record marked creating (pid not yet known) is starting too, however dead it looks. */
    sbx_box_record c;
    TAP_OK(sbx_box_record_init(&c, "kit-3", NULL));
    c.creating = 1;
    TAP_OK(sbx_box_record_write(s, &c, NULL));
    TAP_OK(sbx_box_store_gc(s, NULL, &text, NULL));
    TAP_EQ_STR(text, "[]");
    free(text);
    c.creating = 0; /* done creating, and nothing runs it: dead */
    TAP_OK(sbx_box_record_write(s, &c, NULL));
    TAP_OK(sbx_box_store_gc(s, NULL, &text, NULL));
    TAP_EQ_STR(text, "[\"kit-3\"]");
    free(text);
    sbx_box_record_clear(&c);
    TAP_OK(sbx_box_record_remove(s, "kit-1", NULL));
    sbx_box_record_clear(&r);
    sbx_box_store_free(s);
    /* a state directory others can write: refused, with its name */
    TAP_EQ_INT(chmod(dir, 0777), 0);
    TAP_EQ_INT(sbx_box_store_open("kit", dir, &s, &e), SBX_EPERM);
    TAP_CONTAINS(sbx_error_message(e), dir);
    sbx_error_free(e);
}

TAP_MAIN(TAP(test_socket_agents_pooled), TAP(test_socket_peer_checked),
         TAP(test_exec_after_agent_died), TAP(test_store_refuses))
