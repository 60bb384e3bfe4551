/*
 * The linux provider with many boxes: a stop of many at once ends every box
 * and reports success for each, however long it queued behind the others'
 * teardowns, and leaves nothing (the census). Real boxes; root.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>

/*
 * tests/run.sh runs this binary alone, after the others: it starts hundreds
 * of boxes at once and measures what churn leaves in the page cache.
 */
__attribute__((used)) static const char serial_why[] =
    "SBX_TEST_SERIAL=\"hundreds of boxes at once; page cache checks\"";

/* Takes every teardown slot of the state directory, as a host busy tearing down would. */
static int hold_slots(void)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/teardown.lock", state_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    TAP_TRUE(fd >= 0);
    struct flock fl = {.l_type = F_WRLCK,
                       .l_whence = SEEK_SET,
                       .l_start = 0,
                       .l_len = sbx__linux_teardown_slots()};
    TAP_EQ_INT(fcntl(fd, F_OFD_SETLK, &fl), 0);
    return fd;
}

static void wait_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0)
        ;
}

/*
 * Every stop of a mass stop reports success, and nothing of any box is left.
 * The stops run under a descriptor limit of what is open now plus 160: a
 * stop watching its shim holds a pidfd, and 200 of them at once ran out of
 * descriptors (a process with the usual 1024 stopping 10,000 boxes lost
 * 8,102 of them so); at most SBX_LINUX_STOPS_IN_FLIGHT (128) watch at once.
 */
static void test_mass_stop_all_succeed(void)
{
    need_boxes();
    const char *env = getenv("SBX_SCALE_N");
    int n = env ? (int)strtol(env, NULL, 10) : 200;
    /* Few agent connections kept open (each box's is dropped at its stop, freeing one). */
    sbx_provider *p = provider("{\"max_agent_connections\": 8}");
    sbx_sandbox **sbs = start_many(p, NULL, n);
    struct rlimit was;
    TAP_EQ_INT(getrlimit(RLIMIT_NOFILE, &was), 0);
    struct rlimit tight = { (rlim_t)open_fds() + SBX_LINUX_STOPS_IN_FLIGHT + 32, was.rlim_max };
    if (tight.rlim_cur < was.rlim_cur)
        TAP_EQ_INT(setrlimit(RLIMIT_NOFILE, &tight), 0);
    /* Every teardown slot held a moment: no shim ends, every stop would watch at once. */
    int slots = hold_slots();
    sbx_future **fs = stop_many_begin(sbs, n);
    wait_s(2);
    close(slots);
    stop_many_wait(sbs, fs, n);
    setrlimit(RLIMIT_NOFILE, &was);
    free(sbs);
    sbx_provider_free(p);
    census_check(state_dir);
}

/*
 * Descriptors are back-pressure, not errors (issue 23): more execs at once
 * than the process may open descriptors for. Boxes whose agent connections
 * were evicted (a pool of 4) each need a new one; under a limit of what is
 * open now plus 16, most reconnects would fail with EMFILE ("cannot create a
 * socket: Too many open files" was what 1000 execs over 1000 boxes under
 * ulimit -n 1024 gave). They wait for a descriptor instead: every exec
 * succeeds, slower.
 */
static void test_execs_past_the_descriptor_limit(void)
{
    need_boxes();
    int n = 60;
    sbx_provider *p = provider("{\"max_agent_connections\": 4}");
    sbx_sandbox **sbs = start_many(p, NULL, n);
    struct rlimit was;
    TAP_EQ_INT(getrlimit(RLIMIT_NOFILE, &was), 0);
    struct rlimit tight = {(rlim_t)open_fds() + 16, was.rlim_max};
    TAP_TRUE(tight.rlim_cur < was.rlim_cur);
    TAP_EQ_INT(setrlimit(RLIMIT_NOFILE, &tight), 0);
    sbx_future **fs = calloc((size_t)n, sizeof(*fs));
    for (int i = 0; i < n; i++)
        TAP_OK(sbx_sandbox_exec_async(sbs[i], "sleep 0.2; echo ok", NULL, &fs[i], &e_));
    for (int i = 0; i < n; i++) {
        sbx_error *e = NULL;
        sbx_exec_result *r = NULL;
        if (sbx_future_wait(fs[i], -1, &e) != SBX_OK ||
            sbx_future_take_exec_result(fs[i], &r, &e) != SBX_OK)
            TAP_FAIL("exec %d: %s", i, sbx_error_message(e));
        if (sbx_exec_result_return_code(r) != 0)
            TAP_FAIL("exec %d: rc %d: %s", i, sbx_exec_result_return_code(r),
                     sbx_exec_result_stderr(r, NULL));
        TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "ok\n");
        sbx_exec_result_free(r);
        sbx_future_free(fs[i]);
    }
    free(fs);
    setrlimit(RLIMIT_NOFILE, &was);
    sbx_future **ss = stop_many_begin(sbs, n);
    stop_many_wait(sbs, ss, n);
    free(sbs);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* Lines of `path` before the line `mark`, and in all. */
static int lines_before(const char *path, const char *mark, int *total)
{
    FILE *f = fopen(path, "r");
    char line[128];
    int n = 0, before = -1;
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strcmp(line, mark))
            before = n;
        else
            n++;
    }
    if (f)
        fclose(f);
    *total = n;
    return before < 0 ? n : before;
}

/*
 * Creates beyond SBX_LINUX_CREATES_IN_FLIGHT wait for their turn, and do not
 * start a shim meanwhile: 2 more than the limit are asked for at once, each
 * held in its network setup by a pasta that waits for a byte on a fifo; only
 * the limit's worth have started when the bytes come. A waiting create is cancellable,
 * and every create ends (pasta fails them all) with nothing left.
 */
static void test_creates_wait_their_turn(void)
{
    need_boxes();
    char dir[] = "/tmp/sbx-turn-XXXXXX";
    TAP_TRUE(mkdtemp(dir) != NULL);
    char log[64], rel[64], pasta[64];
    snprintf(log, sizeof(log), "%s/log", dir);
    snprintf(rel, sizeof(rel), "%s/release", dir);
    snprintf(pasta, sizeof(pasta), "%s/pasta", dir);
    FILE *f = fopen(pasta, "w");
    TAP_TRUE(f != NULL);
    /* It blocks on a fifo the test holds open: no polling process per held box. */
    fprintf(f, "#!/bin/sh\necho started >> %s\nhead -c 1 %s >/dev/null\nexit 3\n", log, rel);
    fclose(f);
    TAP_EQ_INT(chmod(pasta, 0755), 0);
    TAP_EQ_INT(mkfifo(rel, 0600), 0);
    int relfd = open(rel, O_RDWR | O_CLOEXEC); /* O_RDWR: opens without a reader */
    TAP_TRUE(relfd >= 0);
    char cfg[256];
    snprintf(cfg, sizeof(cfg), "{\"network\": \"nat\", \"pasta\": \"%s\"}", pasta);
    sbx_provider *p = provider(cfg);
    sbx_spec *spec = sbx_spec_new();
    /* The held boxes wait for all 64 to start (slow under sanitizers): not their timeout. */
    TAP_OK(sbx_spec_set_ready_timeout(spec, 3600));
    enum { N = SBX_LINUX_CREATES_IN_FLIGHT + 2 };
    sbx_sandbox *sbs[N];
    sbx_future *fs[N];
    for (int i = 0; i < N; i++) {
        TAP_OK(sbx_sandbox_new(p, spec, &sbs[i], &e_));
        TAP_OK(sbx_sandbox_start_async(sbs[i], NULL, &fs[i], &e_));
    }
    /* The last one is cancelled while it waits: it ends at once, having started nothing. */
    sbx_future_cancel(fs[N - 1]);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_future_wait(fs[N - 1], -1, &e), SBX_ECANCELED);
    sbx_error_free(e);
    int total = 0;
    while (lines_before(log, "released", &total) < SBX_LINUX_CREATES_IN_FLIGHT)
        wait_s(0.05); /* the test's alarm is the bound */
    /* A moment for an unbounded provider to start more (it must not). */
    wait_s(1);
    f = fopen(log, "a");
    TAP_TRUE(f != NULL);
    fputs("released\n", f);
    fclose(f);
    char bytes[N];
    memset(bytes, 'x', sizeof(bytes));
    TAP_EQ_INT(write(relfd, bytes, sizeof(bytes)), (int)sizeof(bytes)); /* one for each */
    for (int i = 0; i < N - 1; i++) {
        e = NULL;
        int rc = sbx_future_wait(fs[i], -1, &e);
        if (rc != SBX_ECREATE || !strstr(sbx_error_message(e), "exited with status 3"))
            TAP_FAIL("box %d: %d: %s", i, rc, sbx_error_message(e));
        sbx_error_free(e);
    }
    for (int i = 0; i < N; i++) {
        sbx_future_free(fs[i]);
        sbx_sandbox_free(sbs[i]);
    }
    TAP_EQ_INT(lines_before(log, "released", &total), SBX_LINUX_CREATES_IN_FLIGHT);
    TAP_EQ_INT(total, N - 1);
    close(relfd);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    census_check(state_dir);
    unlink(log);
    unlink(rel);
    unlink(pasta);
    rmdir(dir);
}

/*
 * Creates still waiting for their turn when their sandboxes and provider are
 * freed end with them: nothing is left, nothing waits for ever.
 */
static void test_waiting_creates_freed(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *spec = sbx_spec_new();
    enum { N = SBX_LINUX_CREATES_IN_FLIGHT + 16 };
    sbx_sandbox *sbs[N];
    sbx_future *fs[N];
    for (int i = 0; i < N; i++) {
        TAP_OK(sbx_sandbox_new(p, spec, &sbs[i], &e_));
        TAP_OK(sbx_sandbox_start_async(sbs[i], NULL, &fs[i], &e_));
    }
    for (int i = N - 1; i >= 0; i--) {
        sbx_future_free(fs[i]);
        sbx_sandbox_free(sbs[i]);
    }
    sbx_spec_free(spec);
    sbx_provider_free(p);
    census_check(state_dir);
}

struct by_id {
    const char *id;
    int rc;
    char msg[512];
};

static void *stop_by_id(void *data)
{
    struct by_id *b = data;
    sbx_error *e = NULL;
    b->rc = sbx__linux_stop_box(state_dir, b->id, 2, &e);
    snprintf(b->msg, sizeof(b->msg), "%s", e ? sbx_error_message(e) : "");
    sbx_error_free(e);
    return NULL;
}

/*
 * A stop whose shim waits for a teardown slot longer than stop_timeout_s
 * still succeeds once its own teardown runs: the deadline covers the box's
 * teardown, not its place in the queue. Both stop paths: the handle's stop
 * and the stop by id (sbx stop, gc).
 */
static void test_stop_deadline_excludes_the_queue(void)
{
    need_boxes();
    sbx_provider *p = provider("{\"stop_timeout_s\": 2}");
    int n = 6;
    sbx_sandbox **sbs = start_many(p, NULL, n + 1);
    char id[256];
    snprintf(id, sizeof(id), "%s", sbx_sandbox_id(sbs[n]));
    int slots = hold_slots();
    sbx_future **fs = stop_many_begin(sbs, n);
    /* Queued well past the 2 s deadline: no stop may have given up. */
    wait_s(4);
    for (int i = 0; i < n; i++)
        TAP_EQ_INT(sbx_future_done(fs[i]), 0);
    /* The stop by id (sbx stop, gc), blocking, on a thread of its own. */
    struct by_id bi = {.id = id, .rc = 1};
    pthread_t th;
    TAP_EQ_INT(pthread_create(&th, NULL, stop_by_id, &bi), 0);
    wait_s(4);
    TAP_EQ_INT(pthread_tryjoin_np(th, NULL), EBUSY); /* still waiting, not timed out */
    close(slots);
    stop_many_wait(sbs, fs, n);
    TAP_EQ_INT(pthread_join(th, NULL), 0);
    if (bi.rc != SBX_OK)
        TAP_FAIL("stop by id: %s", bi.msg);
    sbx_error *e = NULL;
    if (sbx_sandbox_stop(sbs[n], &e) != SBX_OK) /* already gone: a no-op stop */
        TAP_FAIL("stop after stop by id: %s", sbx_error_message(e));
    sbx_sandbox_free(sbs[n]);
    free(sbs);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* The marker a shim writes is read strictly: garbage counts as no marker. */
static void test_stop_time_left_reads_the_marker(void)
{
    const char *dir = tap_tmpdir();
    char path[600];
    snprintf(path, sizeof(path), "%s/teardown", dir);
    /* No marker, no shim process: the plain deadline from the signal. */
    TAP_TRUE(sbx__linux_stop_time_left(dir, 0, 10, 4) > 5.9);
    TAP_TRUE(sbx__linux_stop_time_left(dir, 0, 10, 11) <= 0);
    /* No marker and no box directory: the shim is on its way out; waited for within the bound. */
    char gone[700];
    snprintf(gone, sizeof(gone), "%s/gone", dir);
    TAP_TRUE(sbx__linux_stop_time_left(gone, 0, 10, 11) > 0);
    TAP_TRUE(sbx__linux_stop_time_left(gone, 0, 10, 10 * SBX_LINUX_STOP_QUEUE_FACTOR + 1) <= 0);
    /* Garbage: the same. */
    FILE *f = fopen(path, "we");
    fputs("t 99999999999999999999999\n", f);
    fclose(f);
    TAP_TRUE(sbx__linux_stop_time_left(dir, 0, 10, 11) <= 0);
    /* Queued: waited on past the deadline, up to the bound. */
    f = fopen(path, "we");
    fputs("q 00000000000000000001\n", f);
    fclose(f);
    TAP_TRUE(sbx__linux_stop_time_left(dir, 0, 10, 50) > 0);
    TAP_TRUE(sbx__linux_stop_time_left(dir, 0, 10, 10 * SBX_LINUX_STOP_QUEUE_FACTOR + 1) <= 0);
    /* Started long ago (boot time 1 ns): the deadline passed. */
    f = fopen(path, "we");
    fputs("t 00000000000000000001\n", f);
    fclose(f);
    TAP_TRUE(sbx__linux_stop_time_left(dir, 0, 10, 50) <= 0);
    /*
     * Running, not stopping yet ('r', the shim's mark from its start): the
     * plain deadline for a shim asleep in user space (this process sleeps
     * in waitpid, S), but one that is in the kernel or waiting for a CPU
     * (a busy loop here, R) is on its way, and waited for like a queued one.
     */
    f = fopen(path, "we");
    fputs("r 00000000000000000001\n", f);
    fclose(f);
    pid_t sleeper = fork();
    if (sleeper == 0) {
        pause();
        _exit(0);
    }
    pid_t spinner = fork();
    if (spinner == 0)
        for (;;)
            ;
    usleep(100 * 1000);
    TAP_TRUE(sbx__linux_stop_time_left(dir, sleeper, 10, 11) <= 0);
    TAP_TRUE(sbx__linux_stop_time_left(dir, spinner, 10, 11) > 0);
    TAP_TRUE(sbx__linux_stop_time_left(dir, spinner, 10, 10 * SBX_LINUX_STOP_QUEUE_FACTOR + 1) <=
             0);
    char where[200];
    sbx__linux_stop_where(dir, sleeper, where, sizeof(where));
    TAP_CONTAINS(where, "has not begun its teardown (state S");
    kill(sleeper, SIGKILL);
    kill(spinner, SIGKILL);
    waitpid(sleeper, NULL, 0);
    waitpid(spinner, NULL, 0);
    /* The shim's own marks: 'r' at its start, then 'q' and 't': the whole deadline is left. */
    unlink(path);
    int fds[2];
    sbx__linux_teardown_prepare(dir, dir, fds);
    TAP_TRUE(fds[0] >= 0 && fds[1] >= 0);
    char m[64] = "";
    char *t = NULL;
    TAP_OK(sbx__read_file(path, &t, NULL));
    TAP_TRUE(t && t[0] == 'r' && strlen(t) == 23);
    free(t);
    int lfd = sbx__linux_teardown_begin(dir, dir, 1, fds);
    TAP_EQ_INT(lfd, fds[1]);
    close(lfd);
    TAP_TRUE(sbx__linux_stop_time_left(dir, 0, 1000, 5000) > 900);
    sbx__linux_stop_where(dir, 0, m, sizeof(m));
    TAP_CONTAINS(m, "its teardown began");
}

/*
 * A fork refused for want of process ids names the host limit: only EAGAIN,
 * and only near kernel.pid_max or threads-max (far from them here, so no
 * hint: a box's own pids.max gives EAGAIN too, and must not blame the host).
 */
static void test_pid_hint_only_near_the_host_limit(void)
{
    char h[256] = "x";
    sbx__linux_pid_hint(EPERM, h, sizeof(h));
    TAP_EQ_STR(h, "");
    strcpy(h, "x");
    sbx__linux_pid_hint(EAGAIN, h, sizeof(h));
    TAP_EQ_STR(h, "");
    /* Near each limit, from the counts: the limit named, with what to do. */
    sbx__linux_pid_hint_for(32000, 32768, 1000000, h, sizeof(h));
    TAP_TRUE(strstr(h, "out of process ids: 32000 threads, kernel.pid_max 32768") != NULL);
    TAP_TRUE(strstr(h, "sysctl -w kernel.pid_max=4194304") != NULL);
    sbx__linux_pid_hint_for(95000, 4194304, 96000, h, sizeof(h));
    TAP_TRUE(strstr(h, "out of threads: 95000 of kernel.threads-max 96000") != NULL);
    sbx__linux_pid_hint_for(1000, 32768, 96000, h, sizeof(h));
    TAP_EQ_STR(h, "");
    sbx__linux_pid_hint_for(-1, 0, 0, h, sizeof(h)); /* unreadable /proc: no guess */
    TAP_EQ_STR(h, "");
}

/* Pages of `path` in the page cache. */
static long resident_pages(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    TAP_TRUE(fd >= 0);
    struct stat st;
    TAP_EQ_INT(fstat(fd, &st), 0);
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    TAP_TRUE(m != MAP_FAILED);
    long pg = sysconf(_SC_PAGESIZE), n = (st.st_size + pg - 1) / pg, k = 0;
    unsigned char *v = calloc((size_t)n, 1);
    TAP_EQ_INT(mincore(m, (size_t)st.st_size, v), 0);
    for (long i = 0; i < n; i++)
        k += v[i] & 1;
    free(v);
    munmap(m, (size_t)st.st_size);
    return k;
}

/*
 * Churn leaves nothing charged: a file a box read first is charged to the
 * box's memory cgroup, and would keep the removed group alive (a dying
 * cgroup) while it stays cached. The stop reclaims it first, so the pages
 * the box brought in are gone from the cache after the stop.
 */
static void test_stop_reclaims_the_box_memory(void)
{
    need_boxes();
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) == 0)
        sscanf(u.release, "%d.%d", &major, &minor);
    bool v1 = sbx__cg_mode() == SBX_CG_V1 && have_file("/sys/fs/cgroup/memory/memory.force_empty");
    bool v2 = sbx__cg_mode() == SBX_CG_V2 && (major > 5 || (major == 5 && minor >= 19));
    if (!v1 && !v2)
        TAP_SKIP("no memory.force_empty (cgroup v1) nor memory.reclaim (v2, Linux 5.19+)");
    /* A file no one has read: under /usr, which a box of the none image sees. */
    char dir[] = "/usr/local/share/sbx-test-XXXXXX", path[64], cmd[128];
    if (!mkdtemp(dir))
        TAP_SKIP("cannot make a directory under /usr/local/share");
    chmod(dir, 0755);
    snprintf(path, sizeof(path), "%s/data", dir);
    char out[256];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "head -c 4194304 /dev/urandom > %s && sync", path), 0);
    /* Written here, its pages are charged to us: drop them (they are clean after the sync). */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    TAP_EQ_INT(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);
    long before = resident_pages(path);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_memory_mib(s, 256); /* a box with a memory group (memory_cgroup "limited") */
    sbx_sandbox *sb = start(p, s);
    snprintf(cmd, sizeof(cmd), "cat %s > /dev/null", path);
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, cmd, NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    long in_box = resident_pages(path);
    stop_free(sb);
    long after = resident_pages(path);
    unlink(path);
    rmdir(dir);
    sbx_spec_free(s);
    sbx_provider_free(p);
    TAP_TRUE(before < 1024 / 2);  /* the file was not cached to begin with */
    TAP_TRUE(in_box >= 1024 / 2); /* the box's read brought it in */
    /* And the stop reclaimed it (a few pages may be another group's: readahead, a racing reader).
     */
    if (after > in_box / 8)
        TAP_FAIL("%ld of the %ld pages the box brought in are still cached after its stop", after,
                 in_box);
    census_check(state_dir);
}

/* The superblock (major:minor) mounted at `at` in a box's mountinfo, or "". */
static const char *dev_of(const char *mountinfo, const char *at, char *buf, size_t n)
{
    buf[0] = 0;
    const char *line = mountinfo;
    while (line && *line) {
        char dev[32], mp[512];
        if (sscanf(line, "%*s %*s %31s %*s %511s", dev, mp) == 2 && !strcmp(mp, at))
            snprintf(buf, n, "%s", dev);
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    return buf;
}

/*
 * A box's masked directories are read-only binds of its one tmpfs, not a
 * tmpfs each: every superblock costs every memory cgroup on the host a
 * shrinker slot, so superblocks per box make box N+1 dearer than box N.
 */
static void test_masks_add_no_superblock(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *sb = start(p, s);
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, "cat /proc/self/mountinfo", NULL, &r, &e_));
    char *mi = strdup(sbx_exec_result_stdout(r, NULL));
    sbx_exec_result_free(r);
    char dev[32], m[32];
    dev_of(mi, "/dev", dev, sizeof(dev));
    TAP_TRUE(dev[0] != 0);
    const char *masks[] = {"/proc/acpi", "/sys/firmware", "/etc/ssl/private"};
    int seen = 0;
    for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
        if (!*dev_of(mi, masks[i], m, sizeof(m)))
            continue;
        seen++;
        TAP_EQ_STR(m, dev);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "ls -A %s | wc -l; touch %s/x 2>/dev/null || echo ro", masks[i],
                 masks[i]);
        TAP_OK(sbx_sandbox_exec(sb, cmd, NULL, &r, &e_));
        TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "0\nro\n");
        sbx_exec_result_free(r);
    }
    free(mi);
    stop_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
    if (!seen)
        TAP_SKIP("none of the masked directories exists on this host");
    census_check(state_dir);
}

/* The memory line of a box's /proc/self/cgroup (v1), from inside the box's cgroup namespace. */
/* Whether the box sees a memory group of its own: v1 a "memory" hierarchy, v2 memory.max. */
static bool box_has_memory_group(sbx_sandbox *sb)
{
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, "ls /sys/fs/cgroup", NULL, &r, &e_));
    const char *out = sbx_exec_result_stdout(r, NULL);
    bool has = strstr(out, "memory.max") || !strncmp(out, "memory\n", 7) || strstr(out, "\nmemory\n");
    sbx_exec_result_free(r);
    return has;
}

/* The box's groups, from its record: "v2 .nomem" when its v2 group is in sbx/.nomem. */
static bool box_in_nomem(sbx_sandbox *sb)
{
    char bd[900];
    snprintf(bd, sizeof(bd), "%s/boxes/%s", state_dir, sbx_sandbox_id(sb));
    sbx_linux_record rec;
    TAP_OK(sbx__linux_record_read(bd, &rec, &e_));
    bool in = false;
    size_t i;
    json_t *v;
    json_array_foreach(rec.cgroups, i, v)
        in |= strstr(json_string_value(v), "/sbx/.nomem/") != NULL;
    sbx__linux_record_free(&rec);
    return in;
}

/*
 * memory_cgroup "limited", the default: a box without a memory limit gets no
 * memory cgroup (each costs kernel memory that grows with the number of
 * boxes); one with a limit gets its group and the limit; "always" gives
 * every box one. On v2 the unlimited box's group sits in sbx/.nomem, whose
 * subtree has no memory controller. Refused values say why.
 */
static void test_memory_cgroup_limited(void)
{
    need_boxes();
    bool v2 = sbx__cg_mode() == SBX_CG_V2;
    if (sbx__cg_mode() == SBX_CG_NONE)
        TAP_SKIP("no cgroups here");
    provider_fails("{\"linux\": {\"memory_cgroup\": \"some\"}}", SBX_EINVAL, "memory_cgroup");
    sbx_provider *p = provider(NULL); /* the default */
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *plain = start(p, s);
    sbx_spec_set_memory_mib(s, 64);
    sbx_sandbox *limited = start(p, s);
    TAP_TRUE(!box_has_memory_group(plain));
    TAP_TRUE(box_has_memory_group(limited));
    TAP_EQ_INT(box_in_nomem(plain), v2);
    TAP_TRUE(!box_in_nomem(limited));
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(limited,
                            v2 ? "cat /sys/fs/cgroup/memory.max"
                               : "cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
                            NULL, &r, &e_));
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "67108864\n");
    sbx_exec_result_free(r);
    /* The unlimited box keeps its other limits (pids here). */
    TAP_OK(sbx_sandbox_exec(plain, v2 ? "cat /sys/fs/cgroup/pids.max" : "cat /sys/fs/cgroup/pids/pids.max",
                            NULL, &r, &e_));
    sbx_linux_host host;
    sbx__linux_host_read(&host);
    char want_pids[40];
    snprintf(want_pids, sizeof(want_pids), "%lld\n", sbx__linux_default_pids(&host));
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), want_pids);
    sbx_exec_result_free(r);
    /* "always": every box its group. */
    sbx_provider *pa = provider("{\"memory_cgroup\": \"always\"}");
    sbx_spec *s2 = sbx_spec_new();
    sbx_sandbox *always = start(pa, s2);
    TAP_TRUE(box_has_memory_group(always));
    TAP_TRUE(!box_in_nomem(always));
    stop_free(always);
    sbx_spec_free(s2);
    sbx_provider_free(pa);
    /* Both still run commands, and stop clean: sbx/.nomem and sbx/ go with the last box. */
    TAP_OK(sbx_sandbox_exec(plain, "true", NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    stop_free(plain);
    stop_free(limited);
    free_and_census(s, p, state_dir);
}

TAP_MAIN(TAP(test_memory_cgroup_limited), TAP(test_pid_hint_only_near_the_host_limit), TAP(test_masks_add_no_superblock),
         TAP(test_stop_reclaims_the_box_memory), TAP(test_stop_time_left_reads_the_marker),
         TAP_T(test_stop_deadline_excludes_the_queue, 120), TAP_T(test_mass_stop_all_succeed, 600),
         TAP_T(test_creates_wait_their_turn, 300), TAP_T(test_waiting_creates_freed, 300),
         TAP_T(test_execs_past_the_descriptor_limit, 300))
