/*
 * The host client against a hostile agent (issue #8, "hostile boxes"):
 * every byte the agent sends and every silence is the box's choice. A fake
 * agent made here (a child speaking the protocol over a socketpair) answers
 * the hello and then stays silent, lies about sizes or floods; the real
 * agent serves sparse, growing and oversized files. Each test asserts that
 * the call ends with a clear error within the client's own deadline (the
 * harness alarm catches a hang) and that nothing is left on the host.
 */
#include "tap.h"
#include "common.h"
#include "lib/agent.h"
#include "lib/box.h"

#include "core/internal.h"
#include "kit/client.h"
#include "proto/proto.h"

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include <uv.h>


/* --- a fake agent ---------------------------------------------------------- */

enum fake_mode {
    FAKE_SILENT, /* hello, then nothing for the ops (frames on channels never opened) */
    FAKE_STALL,  /* a download: FILE_INFO, one chunk, then nothing */
    FAKE_MORE,   /* a download: announces 10 bytes, sends 64 KiB */
    FAKE_FEWER,  /* a download: announces 100 bytes, sends 10 and STATUS ok */
};

static void fake_write(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(0); /* the client went away */
        b += w;
        n -= (size_t)w;
    }
}

static void fake_pbuf(int fd, sbx_pbuf *b, uint8_t type, uint32_t ch)
{
    if (sbx__pbuf_finish(b, type, ch) < 0)
        _exit(3);
    fake_write(fd, b->data, b->len);
    sbx__pbuf_free(b);
}

static void fake_raw(int fd, uint8_t type, uint32_t ch, const void *p, uint32_t n)
{
    uint8_t h[SBX_PROTO_HEADER];
    sbx__proto_put_header(h, type, ch, n);
    fake_write(fd, h, sizeof(h));
    if (n)
        fake_write(fd, p, n);
}

static void fake_op(int fd, enum fake_mode mode, const sbx_frame *f)
{
    static uint8_t chunk[64 << 10];
    sbx_pbuf b = {0};
    if (mode == FAKE_SILENT) {
        /* Noise on channels the host never opened must not count as progress. */
        fake_raw(fd, SBX_MSG_STDOUT, f->channel + 1000, "x", 1);
        fake_raw(fd, SBX_MSG_DATA, f->channel + 2000, "x", 1);
        return;
    }
    if (f->type != SBX_MSG_FILE_GET)
        return;
    uint64_t size = mode == FAKE_MORE ? 10 : mode == FAKE_FEWER ? 100 : 1 << 20;
    sbx__pbuf_begin(&b);
    sbx__msg_file_info_encode(&b, 0644, size);
    fake_pbuf(fd, &b, SBX_MSG_FILE_INFO, f->channel);
    memset(chunk, 'A', sizeof(chunk));
    fake_raw(fd, SBX_MSG_DATA, f->channel, chunk, mode == FAKE_MORE ? sizeof(chunk) : 10);
    if (mode == FAKE_FEWER) {
        sbx__pbuf_begin(&b);
        sbx__msg_status_encode(&b, 0, "");
        fake_pbuf(fd, &b, SBX_MSG_STATUS, f->channel);
    }
}

static void fake_serve(int fd, enum fake_mode mode)
{
    sbx_proto_reader rd;
    sbx__proto_reader_init(&rd, SBX_PROTO_MAX_PAYLOAD);
    for (;;) {
        size_t avail = 0;
        uint8_t *sp = sbx__proto_reader_space(&rd, 65536, &avail);
        ssize_t n = sp ? read(fd, sp, avail) : -1;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(0);
        sbx__proto_reader_commit(&rd, (size_t)n);
        sbx_frame f;
        int r;
        while ((r = sbx__proto_reader_next(&rd, &f)) == 1) {
            if (f.type == SBX_MSG_HELLO) {
                sbx_pbuf b = {0};
                sbx__pbuf_begin(&b);
                sbx_msg_hello h = {SBX_PROTO_MAGIC, SBX_PROTO_MIN_VERSION, SBX_PROTO_VERSION,
                                   SBX_PROTO_MAX_PAYLOAD, (char *)"fake-agent"};
                sbx__msg_hello_encode(&b, &h);
                fake_pbuf(fd, &b, SBX_MSG_HELLO, 0);
            } else if (f.channel && (f.type == SBX_MSG_EXEC || f.type == SBX_MSG_FILE_GET ||
                                     f.type == SBX_MSG_FILE_PUT || f.type == SBX_MSG_PING)) {
                fake_op(fd, mode, &f);
            }
        }
        if (r < 0)
            _exit(2);
    }
}

static struct agent start_fake(enum fake_mode mode)
{
    struct agent a = {.stdio_fd = -1};
    int sv[2];
    TAP_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    a.pid = fork();
    TAP_TRUE(a.pid >= 0);
    if (a.pid == 0) {
        close(sv[0]);
        fake_serve(sv[1], mode);
    }
    close(sv[1]);
    a.stdio_fd = sv[0];
    return a;
}

static void stop_fake(struct agent *a)
{
    kill(a->pid, SIGKILL);
    while (waitpid(a->pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Entries in `dir` (0 when it does not exist): what a failed download left. */
static int left_in(const char *dir)
{
    struct stat st;
    return stat(dir, &st) == 0 ? count_dir_entries(dir) : 0;
}

/* --- tests ----------------------------------------------------------------- */

/* A silent agent: an exec with a timeout ends as a timeout, from the client's own deadline. */
static void test_silent_agent_exec_deadline(void)
{
    setup();
    struct agent a = start_fake(FAKE_SILENT);
    sbx_agent_conn *c = connect_agent(&a);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, 0.2);
    sbx_exec_result *r = agent_run(c, "sleep 100", o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    TAP_EQ_STR(stdout_of(r), ""); /* partial stdout (none here), not None: issue 9 */
    TAP_EQ_STR(stderr_of(r), "command timed out after 0.2s: 'sleep 100'");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    close_conn(c);
    stop_fake(&a);
    teardown(NULL, NULL);
}

/* A silent agent: cancelling an exec without a timeout completes (a signal ends the CLI). */
static void test_silent_agent_cancel(void)
{
    setup();
    struct agent a = start_fake(FAKE_SILENT);
    sbx_agent_conn *c = connect_agent(&a);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, -1);
    struct waiter *w = exec_start_async(c, "sleep 100", NULL, o, NULL);
    on_loop(do_cancel, w->op);
    waiter_wait(w);
    TAP_EQ_INT(w->code, SBX_ECANCELED);
    waiter_free(w);
    sbx_exec_opts_free(o);
    close_conn(c);
    stop_fake(&a);
    teardown(NULL, NULL);
}

/* A download that stalls after its first chunk fails on the idle timeout, leaving nothing. */
static void test_stalled_download(void)
{
    setup();
    char dir[PATH_MAX], dst[PATH_MAX + 8];
    snprintf(dir, sizeof(dir), "%s/dl", tap_tmpdir());
    snprintf(dst, sizeof(dst), "%s/out", dir);
    for (int mode = FAKE_SILENT; mode <= FAKE_STALL; mode++) {
        struct agent a = start_fake((enum fake_mode)mode);
        sbx_agent_conn *c = connect_agent(&a);
        sbx_agent_limits lim = {.idle_timeout_s = 0.2};
        char *msg = NULL;
        TAP_EQ_INT(transfer_limited(c, 1, "/f", dst, &msg, &lim), SBX_ETIMEDOUT);
        TAP_CONTAINS(msg, "made no progress for 0.2s");
        free(msg);
        TAP_EQ_INT(left_in(dir), 0);
        close_conn(c);
        stop_fake(&a);
    }
    teardown(NULL, NULL);
}

/* An agent that sends more, or fewer, bytes than it announced: an error, nothing kept. */
static void test_lying_download_sizes(void)
{
    setup();
    char dir[PATH_MAX], dst[PATH_MAX + 8];
    snprintf(dir, sizeof(dir), "%s/dl", tap_tmpdir());
    snprintf(dst, sizeof(dst), "%s/out", dir);
    enum fake_mode modes[] = {FAKE_MORE, FAKE_FEWER};
    for (size_t i = 0; i < 2; i++) {
        struct agent a = start_fake(modes[i]);
        sbx_agent_conn *c = connect_agent(&a);
        char *msg = NULL;
        TAP_EQ_INT(transfer_limited(c, 1, "/f", dst, &msg, NULL), SBX_EPROTO);
        TAP_CONTAINS(msg, modes[i] == FAKE_MORE ? "announced 10 bytes" : "announced 100 bytes");
        free(msg);
        TAP_EQ_INT(left_in(dir), 0);
        close_conn(c);
        stop_fake(&a);
    }
    teardown(NULL, NULL);
}

static void make_file(const char *path, off_t size, const char *head, const char *tail)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    TAP_TRUE(fd >= 0);
    TAP_EQ_INT(ftruncate(fd, size), 0);
    if (head)
        TAP_EQ_INT(pwrite(fd, head, strlen(head), 0), (ssize_t)strlen(head));
    if (tail)
        TAP_EQ_INT(pwrite(fd, tail, strlen(tail), size - (off_t)strlen(tail)),
                   (ssize_t)strlen(tail));
    close(fd);
}

/* A file over the download cap is refused before anything is written on the host. */
static void test_download_cap(void)
{
    setup();
    char root[PATH_MAX], src[PATH_MAX + 8], dir[PATH_MAX], dst[PATH_MAX + 8];
    snprintf(root, sizeof(root), "%s/root", tap_tmpdir());
    snprintf(src, sizeof(src), "%s/big", root);
    snprintf(dir, sizeof(dir), "%s/dl", tap_tmpdir());
    snprintf(dst, sizeof(dst), "%s/out", dir);
    TAP_EQ_INT(mkdir(root, 0755), 0);
    make_file(src, (off_t)2 << 20, "x", "y");
    struct agent a = start_stdio(root, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    sbx_agent_limits lim = {.max_download_bytes = 1 << 20};
    char *msg = NULL;
    TAP_EQ_INT(transfer_limited(c, 1, "/big", dst, &msg, &lim), SBX_EINVAL);
    TAP_CONTAINS(msg, "over the download limit of 1048576 bytes");
    free(msg);
    TAP_EQ_INT(left_in(dir), 0);
    /* Under the cap it works on the same connection. */
    lim.max_download_bytes = 4 << 20;
    TAP_EQ_INT(transfer_limited(c, 1, "/big", dst, NULL, &lim), SBX_OK);
    struct stat st;
    TAP_EQ_INT(stat(dst, &st), 0);
    TAP_EQ_INT(st.st_size, 2 << 20);
    teardown(c, &a);
}

/* A sparse file in the box stays sparse on the host: its holes do not become our disk. */
static void test_sparse_download_stays_sparse(void)
{
    setup();
    char root[PATH_MAX], src[PATH_MAX + 8], dst[PATH_MAX + 8];
    snprintf(root, sizeof(root), "%s/root", tap_tmpdir());
    snprintf(src, sizeof(src), "%s/sparse", root);
    snprintf(dst, sizeof(dst), "%s/out", tap_tmpdir());
    TAP_EQ_INT(mkdir(root, 0755), 0);
    /* 64 MiB: 256 chunks of zeros (the agent sends holes as zeros today). */
    const off_t size = (off_t)64 << 20;
    make_file(src, size, "head", "tail");
    struct agent a = start_stdio(root, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    TAP_EQ_INT(transfer_limited(c, 1, "/sparse", dst, NULL, NULL), SBX_OK);
    struct stat st;
    TAP_EQ_INT(stat(dst, &st), 0);
    TAP_EQ_INT(st.st_size, size);
    /* Two data chunks at most (256 KiB each), not 64 MiB. */
    if ((long long)st.st_blocks * 512 > (2ll << 20))
        TAP_FAIL("the download takes %lld bytes of disk for a file of two words",
                 (long long)st.st_blocks * 512);
    char buf[5] = {0};
    int fd = open(dst, O_RDONLY | O_CLOEXEC);
    TAP_EQ_INT(pread(fd, buf, 4, 0), 4);
    TAP_EQ_STR(buf, "head");
    TAP_EQ_INT(pread(fd, buf, 4, size - 4), 4);
    TAP_EQ_STR(buf, "tail");
    TAP_EQ_INT(pread(fd, buf, 4, size / 2), 4);
    TAP_EQ_INT(memcmp(buf, "\0\0\0\0", 4), 0);
    close(fd);
    teardown(c, &a);
}

/* True once process `pid` holds `path` open (the agent opened the file to send it). */
static bool holds_open(pid_t pid, const char *path)
{
    char dir[64], link[PATH_MAX + 64], target[PATH_MAX];
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    bool found = false;
    struct dirent *de;
    while (d && !found && (de = readdir(d))) {
        snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = 0;
            found = !strcmp(target, path);
        }
    }
    if (d)
        closedir(d);
    return found;
}

/*
 * A file that grows while it is downloaded ends at the size announced when
 * it was opened. The writer starts once the agent holds the file open and
 * grows it (sparsely: no disk) to 4 GiB, far past the 32 MiB announced.
 */
static void test_growing_file_download_ends(void)
{
    setup();
    char root[PATH_MAX], src[PATH_MAX + 8], dst[PATH_MAX + 8];
    snprintf(root, sizeof(root), "%s/root", tap_tmpdir());
    snprintf(src, sizeof(src), "%s/log", root);
    snprintf(dst, sizeof(dst), "%s/out", tap_tmpdir());
    TAP_EQ_INT(mkdir(root, 0755), 0);
    make_file(src, (off_t)32 << 20, "start", "end");
    struct agent a = start_stdio(root, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    struct file_call fc = {c, "/log", dst, 1, waiter_new(), NULL};
    on_loop(do_file, &fc);
    while (!holds_open(a.pid, src) && !fc.w->done)
        usleep(1000);
    pid_t writer = fork();
    TAP_TRUE(writer >= 0);
    if (writer == 0) {
        int fd = open(src, O_WRONLY | O_CLOEXEC);
        for (off_t size = (off_t)32 << 20; size < ((off_t)4 << 30); size += (off_t)1 << 20)
            if (ftruncate(fd, size) < 0)
                _exit(1);
        _exit(0);
    }
    waiter_wait(fc.w);
    kill(writer, SIGKILL);
    waitpid(writer, NULL, 0);
    if (fc.w->code != SBX_OK)
        TAP_FAIL("download of a growing file: %d %s", fc.w->code,
                 fc.w->err ? sbx_error_message(fc.w->err) : "");
    waiter_free(fc.w);
    struct stat st;
    TAP_EQ_INT(stat(dst, &st), 0);
    TAP_EQ_INT(st.st_size, (off_t)32 << 20);
    char buf[4] = {0};
    int fd = open(dst, O_RDONLY | O_CLOEXEC);
    TAP_EQ_INT(pread(fd, buf, 3, st.st_size - 3), 3);
    TAP_EQ_INT(memcmp(buf, "end", 3), 0);
    close(fd);
    teardown(c, &a);
}

/* stdin streamed from a pipe: a command that ignores it ends while the feeder still runs. */
static void test_stdin_streamed(void)
{
    setup();
    struct agent a = start_stdio(NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    int p[2];
    TAP_EQ_INT(pipe2(p, O_CLOEXEC), 0);
    pid_t feeder = fork();
    TAP_TRUE(feeder >= 0);
    if (feeder == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
        close(p[0]);
        if (write(p[1], "early\n", 6) != 6)
            _exit(1);
        pause(); /* holds the pipe open: no EOF until it is killed */
        _exit(0);
    }
    close(p[1]);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_EQ_INT(sbx_exec_opts_set_stdin_fd(o, p[0]), SBX_OK);
    sbx_exec_result *r = agent_run(c, "echo ran", o);
    TAP_EQ_STR(stdout_of(r), "ran\n");
    sbx_exec_result_free(r);
    /* Order, not time: the command is done and the feeder has not ended. */
    TAP_EQ_INT(waitpid(feeder, NULL, WNOHANG), 0);
    /* The descriptor is given back as it was (blocking). */
    TAP_EQ_INT(fcntl(p[0], F_GETFL) & O_NONBLOCK, 0);
    kill(feeder, SIGKILL);
    waitpid(feeder, NULL, 0);
    close(p[0]);

    /* 16 MiB (four stdin windows) through a pipe to wc -c, all of it, then EOF. */
    TAP_EQ_INT(pipe2(p, O_CLOEXEC), 0);
    feeder = fork();
    TAP_TRUE(feeder >= 0);
    if (feeder == 0) {
        static char chunk[1 << 20];
        close(p[0]);
        sbx_exec_opts_free(o); /* the fork's copy: memcheck checks this heap at _exit too */
        for (int i = 0; i < 16; i++)
            if (write(p[1], chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk))
                _exit(1);
        _exit(0);
    }
    close(p[1]);
    sbx_exec_opts_set_stdin_fd(o, p[0]);
    r = agent_run(c, "wc -c", o);
    TAP_EQ_STR(stdout_of(r), "16777216\n");
    sbx_exec_result_free(r);
    waitpid(feeder, NULL, 0);
    close(p[0]);

    /* A device epoll refuses (/dev/zero) is read on the thread pool; it never ends by itself. */
    int z = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    sbx_exec_opts_set_stdin_fd(o, z);
    r = agent_run(c, "head -c 1000000 | wc -c", o);
    TAP_EQ_STR(stdout_of(r), "1000000\n");
    sbx_exec_result_free(r);
    close(z);
    sbx_exec_opts_free(o);
    teardown(c, &a);
}

/*
 * A command that does not read its stdin: the agent acknowledges what the
 * command took (protocol 2), so the host stays within a 4 MiB window and
 * neither side queues the rest. Measured by how far the host read the
 * caller's 256 MiB file: not past the window (and a chunk or two in flight).
 */
static void test_stdin_window(void)
{
    setup();
    char src[PATH_MAX];
    snprintf(src, sizeof(src), "%s/in", tap_tmpdir());
    /* 256 MiB, 25 under TSan (142 s there): either is many windows past the 8 MiB check. */
    const off_t size = (off_t)tap_bulk(256) << 20;
    make_file(src, size, NULL, "end");
    struct agent a = start_stdio(NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    TAP_TRUE(fd >= 0);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_stdin_fd(o, fd);
    /* Reads 1 MiB, then sits on the rest until the host has sent what it will. */
    struct waiter *w = exec_start_async(c, "head -c 1048576 >/dev/null; sleep 1", NULL, o, NULL);
    sbx_exec_result *r = exec_wait(w);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    off_t read_so_far = lseek(fd, 0, SEEK_CUR);
    if (read_so_far > ((off_t)8 << 20))
        TAP_FAIL("the host read %lld bytes of stdin for a command that took 1 MiB",
                 (long long)read_so_far);
    /* A reader still gets all of it, acknowledged chunk by chunk. */
    TAP_EQ_INT(lseek(fd, 0, SEEK_SET), 0);
    r = agent_run(c, "wc -c", o);
    char want[32];
    snprintf(want, sizeof(want), "%lld\n", (long long)size);
    TAP_EQ_STR(stdout_of(r), want);
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    close(fd);
    teardown(c, &a);
}

/* The default output cap is 16 MiB per stream, and the result says it was truncated. */
static void test_default_output_cap(void)
{
    setup();
    struct agent a = start_stdio(NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    sbx_exec_result *r = agent_run(c, "head -c 20971520 /dev/zero; echo done >&2", NULL);
    size_t len = 0;
    sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, (size_t)16 << 20);
    TAP_EQ_INT(sbx_exec_result_truncated(r), 1);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_EQ_STR(stderr_of(r), "done\n");
    sbx_exec_result_free(r);
    /* A command's own 124 is its exit status, not a timeout. */
    r = agent_run(c, "echo mine >&2; exit 124", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 124);
    TAP_NULL(sbx_exec_result_error_type(r));
    TAP_EQ_STR(stderr_of(r), "mine\n");
    sbx_exec_result_free(r);
    teardown(c, &a);
}

/* The linux provider's transfer limits are configurable, and bad values are refused clearly. */
static void test_linux_transfer_limits_config(void)
{
    static const struct {
        const char *config;
        const char *error; /* NULL: accepted */
    } cases[] = {
        {"{\"linux\": {\"max_download_bytes\": 1048576, \"transfer_idle_timeout_s\": 0.5}}",
         NULL},
        {"{\"linux\": {\"max_download_bytes\": 0}}", "max_download_bytes must be a positive"},
        {"{\"linux\": {\"max_download_bytes\": \"1G\"}}", "max_download_bytes must be a positive"},
        {"{\"linux\": {\"transfer_idle_timeout_s\": -1}}",
         "transfer_idle_timeout_s must be a positive number"},
        {"{\"linux\": {\"transfer_idle_timeout_s\": 0}}",
         "transfer_idle_timeout_s must be a positive number"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sbx_provider *p = NULL;
        sbx_error *e = NULL;
        int rc = sbx_provider_new(cases[i].config, &p, &e);
        if (!cases[i].error) {
            if (rc != SBX_OK)
                TAP_FAIL("%s: %s", cases[i].config, e ? sbx_error_message(e) : "?");
        } else {
            TAP_EQ_INT(rc, SBX_EINVAL);
            TAP_CONTAINS(sbx_error_message(e), cases[i].error);
        }
        sbx_error_free(e);
        sbx_provider_free(p);
    }
}

TAP_MAIN(TAP(test_silent_agent_exec_deadline), TAP(test_silent_agent_cancel),
         TAP(test_stalled_download), TAP(test_lying_download_sizes), TAP(test_download_cap),
         TAP(test_sparse_download_stays_sparse), TAP(test_growing_file_download_ends),
         TAP(test_stdin_streamed), TAP(test_stdin_window), TAP(test_default_output_cap),
         TAP(test_linux_transfer_limits_config))
