/*
 * The linux provider's state directory, records and descriptors are input
 * (issue #8: items 3, 4, 10 and the config values): a forged record must not
 * get a process signalled or a cgroup emptied, a descriptor must not lead to
 * another user's directory, records are private, no secret shows on a
 * command line, and gc finds boxes by what exists (shims, cgroups), not only
 * by their records. Runs as root with real boxes; each test ends with a
 * census.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>


/* A box's record as JSON, read the plain way (the test is root). */
static json_t *record_json(const char *id)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/boxes/%s/record.json", state_dir, id);
    json_t *j = json_load_file(p, 0, NULL);
    if (!j)
        TAP_FAIL("no record at %s", p);
    return j;
}

/* Whether `pid` (our child) is still running: not exited, not a zombie. */
static bool child_alive(pid_t pid)
{
    int st;
    return waitpid(pid, &st, WNOHANG) == 0;
}

static bool process_alive(pid_t pid)
{
    return sbx__linux_proc_start(pid) != 0;
}

/* A forged box directory with a record that is ours and private: only its content lies. */
static void forge(const char *id, const char *record_text)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/boxes/%s", state_dir, id);
    TAP_EQ_INT(sbx__mkdir_p(p, 0700), 0);
    snprintf(p, sizeof(p), "%s/boxes/%s/record.json", state_dir, id);
    TAP_EQ_INT(sbx__write_file_atomic(p, record_text, strlen(record_text), 0600), 0);
}

/* A process that is not sbx's, in a cgroup that is not sbx's (but has "/sbx/" in its path). */
struct victim {
    pid_t pid;
    char cg[512];     /* its group */
    char cg_top[256]; /* the top we made, to remove */
};

static void victim_start(struct victim *v)
{
    v->pid = fork();
    if (v->pid == 0) {
        /* Dies with the test, and holds none of the harness's pipes. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        syscall(SYS_close_range, 3, ~0U, 0);
        for (;;)
            pause();
    }
    TAP_TRUE(v->pid > 0);
    v->cg[0] = 0;
    const char *root = sbx__cg_mode() == SBX_CG_V2   ? "/sys/fs/cgroup"
                       : sbx__cg_mode() == SBX_CG_V1 ? "/sys/fs/cgroup/pids"
                                                     : NULL;
    if (!root)
        return;
    snprintf(v->cg_top, sizeof(v->cg_top), "%s/sectest-victim-%d", root, (int)getpid());
    snprintf(v->cg, sizeof(v->cg), "%s/sbx/victim", v->cg_top);
    TAP_EQ_INT(sbx__mkdir_p(v->cg, 0755), 0);
    char procs[600], pid[32];
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", v->cg);
    snprintf(pid, sizeof(pid), "%d", (int)v->pid);
    TAP_EQ_INT(write_text(procs, pid), 0);
}

static void victim_end(struct victim *v)
{
    kill(v->pid, SIGKILL);
    waitpid(v->pid, NULL, 0);
    if (v->cg[0]) {
        char p[600];
        rmdir(v->cg);
        snprintf(p, sizeof(p), "%s/sbx", v->cg_top);
        rmdir(p);
        rmdir(v->cg_top);
    }
}

static bool victim_in_its_group(const struct victim *v)
{
    if (!v->cg[0])
        return true;
    char p[600];
    snprintf(p, sizeof(p), "%s/cgroup.procs", v->cg);
    char *t = NULL;
    if (sbx__read_file(p, &t, NULL) < 0)
        return false;
    char pid[32];
    snprintf(pid, sizeof(pid), "%d\n", (int)v->pid);
    bool in = t && strstr(t, pid);
    free(t);
    return in;
}

/* --- tests ---------------------------------------------------------------- */

/*
 * Records that name a process which is not their box's shim (a victim of
 * ours, another box's shim) and a cgroup that is not their box's: stop and
 * gc signal nothing, empty nothing, and say what is wrong.
 */
static void test_forged_records_signal_nothing(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *a = start(p, s);
    const char *aid = sbx_sandbox_id(a);
    json_t *ar = record_json(aid);
    json_int_t a_pid = json_integer_value(json_object_get(ar, "shim_pid"));
    json_int_t a_start = json_integer_value(json_object_get(ar, "shim_start"));
    const char *a_cg = json_string_value(json_array_get(json_object_get(ar, "cgroups"), 0));
    TAP_TRUE(a_pid > 0);

    struct victim v;
    victim_start(&v);
    unsigned long long v_start = sbx__linux_proc_start(v.pid);
    TAP_TRUE(v_start != 0);
    char rec[2048];
    /* 1: the victim's pid and start time, the victim's group, expired, labelled. */
    snprintf(rec, sizeof(rec),
             "{\"id\": \"sbx-forged1\", \"state\": \"running\", \"created\": 1, \"expires_at\": 2,"
             " \"ttl_s\": 1, \"metadata\": {\"run_id\": \"forged\"}, \"shim_pid\": %d,"
             " \"shim_start\": %llu, \"cgroups\": [\"%s\"]}",
             (int)v.pid, v_start, v.cg[0] ? v.cg : "/sys/fs/cgroup/x/sbx/../x");
    forge("sbx-forged1", rec);
    /* 2: box A's live shim and A's own group, under another id. */
    snprintf(rec, sizeof(rec),
             "{\"id\": \"sbx-forged2\", \"state\": \"running\", \"created\": 1, \"expires_at\": 2,"
             " \"ttl_s\": 1, \"metadata\": {\"run_id\": \"forged\"}, \"shim_pid\": %lld,"
             " \"shim_start\": %lld, \"cgroups\": [%s%s%s]}",
             (long long)a_pid, (long long)a_start, a_cg ? "\"" : "", a_cg ? a_cg : "",
             a_cg ? "\"" : "");
    forge("sbx-forged2", rec);
    /* 3: the victim's pid with no cgroups at all: a record sbx believes, whose pid is no shim. */
    snprintf(rec, sizeof(rec),
             "{\"id\": \"sbx-forged3\", \"state\": \"running\", \"created\": 1, \"expires_at\": 2,"
             " \"ttl_s\": 1, \"metadata\": {\"run_id\": \"forged\"}, \"shim_pid\": %d,"
             " \"shim_start\": %llu, \"cgroups\": []}",
             (int)v.pid, v_start);
    forge("sbx-forged3", rec);

    sbx_error *e = NULL;
    int rc = sbx__linux_stop_box(state_dir, "sbx-forged1", 5, &e);
    if (v.cg[0]) {
        TAP_EQ_INT(rc, SBX_EINVAL);
        TAP_CONTAINS(sbx_error_message(e), "not box sbx-forged1's own group");
    }
    sbx_error_free(e);
    e = NULL;
    if (a_cg) {
        TAP_EQ_INT(sbx__linux_stop_box(state_dir, "sbx-forged2", 5, &e), SBX_EINVAL);
        TAP_CONTAINS(sbx_error_message(e), "cgroup");
        sbx_error_free(e);
        e = NULL;
    }
    TAP_OK(sbx__linux_stop_box(state_dir, "sbx-forged3", 5, &e_));
    /* gc by label and by expiry, with no grace for records it does not believe. */
    sbx_kv labels = {0};
    sbx__kv_set(&labels, "run_id", "forged");
    sbx_linux_gc_opts o = {.labels = &labels, .grace_s = 0.001};
    char **removed = NULL;
    TAP_OK(sbx__linux_gc(state_dir, &o, &removed, &e_));
    sbx_strv_free(removed);
    sbx__kv_free(&labels);

    /* Nothing was signalled or emptied. */
    TAP_TRUE(child_alive(v.pid));
    TAP_TRUE(victim_in_its_group(&v));
    TAP_TRUE(process_alive((pid_t)a_pid));
    TAP_EQ_INT(rc_of(a, "true"), 0);
    if (a_cg)
        TAP_TRUE(access(a_cg, F_OK) == 0);
    victim_end(&v);
    json_decref(ar);
    stop_free(a);
    free_and_census(s, p, state_dir);
}

/* A record that is a link, writable by others, or huge is not read. */
static void test_records_read_only_when_private(void)
{
    need_boxes();
    static const char good[] = "{\"id\": \"sbx-rec1\", \"state\": \"running\", \"cgroups\": []}";
    forge("sbx-rec1", good);
    sbx_linux_record r;
    char bd[1024], p[1100], elsewhere[1100];
    snprintf(bd, sizeof(bd), "%s/boxes/sbx-rec1", state_dir);
    TAP_OK(sbx__linux_record_read(bd, &r, &e_));
    sbx__linux_record_free(&r);
    /* A link to a record elsewhere. */
    snprintf(p, sizeof(p), "%s/record.json", bd);
    snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere.json", tap_tmpdir());
    TAP_EQ_INT(rename(p, elsewhere), 0);
    TAP_EQ_INT(symlink(elsewhere, p), 0);
    sbx_error *e = NULL;
    TAP_TRUE(sbx__linux_record_read(bd, &r, &e) < 0);
    TAP_CONTAINS(sbx_error_message(e), "link");
    sbx_error_free(e);
    e = NULL;
    unlink(p);
    /* Writable by others. */
    TAP_EQ_INT(rename(elsewhere, p), 0);
    TAP_EQ_INT(chmod(p, 0666), 0);
    TAP_EQ_INT(sbx__linux_record_read(bd, &r, &e), SBX_EPERM);
    TAP_CONTAINS(sbx_error_message(e), "writable");
    sbx_error_free(e);
    e = NULL;
    /* Another user's. */
    TAP_EQ_INT(chmod(p, 0600), 0);
    TAP_EQ_INT(chown(p, 65534, 65534), 0);
    TAP_EQ_INT(sbx__linux_record_read(bd, &r, &e), SBX_EPERM);
    TAP_CONTAINS(sbx_error_message(e), "not to you");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(chown(p, 0, 0), 0);
    /* Bigger than a record may be. */
    FILE *f = fopen(p, "w");
    TAP_TRUE(f != NULL);
    fputs("{\"id\": \"sbx-rec1\", \"pad\": \"", f);
    for (unsigned i = 0; i < (SBX_RECORD_MAX + (1u << 20)) / 64; i++)
        fputs("0123456789012345678901234567890123456789012345678901234567890123", f);
    fputs("\"}", f);
    fclose(f);
    TAP_EQ_INT(sbx__linux_record_read(bd, &r, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "more than a record may be");
    sbx_error_free(e);
    /* gc removes what it cannot believe (past the grace period). */
    sbx_linux_gc_opts o = {.grace_s = 0.001};
    TAP_OK(sbx__linux_gc(state_dir, &o, NULL, &e_));
    census_check(state_dir);
}

/*
 * A descriptor is input: a relative, non-canonical or foreign state
 * directory, or an id that is not a name, is refused with a clear error.
 */
static void test_descriptor_state_dir_checked(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    /* Non-canonical, through a directory that is not there (private: no other test makes it). */
    char odd[2048];
    snprintf(odd, sizeof(odd), "{\"sandbox_id\": \"sbx-1\", \"state_dir\": \"%s/./x/../\"}",
             tap_tmpdir());
    struct {
        const char *desc;
        int code;
        const char *says;
    } cases[] = {
        {"{\"sandbox_id\": \"sbx-1\", \"state_dir\": \"relative/dir\"}", SBX_EINVAL, "absolute"},
        {odd, SBX_EINVAL, ""},
        {"{\"sandbox_id\": \"../../etc\", \"state_dir\": \"/tmp\"}", SBX_EINVAL, "sandbox_id"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sbx_sandbox *sb = NULL;
        sbx_error *e = NULL;
        TAP_EQ_INT(sbx_sandbox_connect(p, cases[i].desc, &sb, &e), cases[i].code);
        TAP_CONTAINS(sbx_error_message(e), cases[i].says);
        sbx_error_free(e);
    }
    /*
     * Another user's state directory, writable by all, with a record in it
     * that names an env (PATH to the other user's programs).
     */
    char foreign[700], cmd[4096], out[1024];
    snprintf(foreign, sizeof(foreign), "%s/foreign", tap_tmpdir());
    TAP_EQ_INT(chmod(tap_tmpdir(), 0755), 0);
    snprintf(cmd, sizeof(cmd),
             "set -e; mkdir -p %s/boxes/sbx-planted/run; printf '%%s' '{\"id\": "
             "\"sbx-planted\", \"state\": \"running\", \"env\": [\"PATH=/evil/bin\"], "
             "\"cgroups\": []}' > %s/boxes/sbx-planted/record.json; chown -R 65534:65534 %s; "
             "chmod -R 0777 %s",
             foreign, foreign, foreign, foreign);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s", cmd), 0);
    char desc[1024];
    snprintf(desc, sizeof(desc), "{\"sandbox_id\": \"sbx-planted\", \"state_dir\": \"%s\"}",
             foreign);
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_connect(p, desc, &sb, &e), SBX_EPERM);
    TAP_CONTAINS(sbx_error_message(e), foreign);
    TAP_CONTAINS(sbx_error_message(e), "belongs to uid 65534");
    sbx_error_free(e);
    e = NULL;
    /* A stop by id there is refused too, and so is a listing. */
    TAP_EQ_INT(sbx__linux_stop_box(foreign, "sbx-planted", 1, &e), SBX_EPERM);
    sbx_error_free(e);
    e = NULL;
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    TAP_EQ_INT(sbx__linux_list(foreign, NULL, &boxes, &n, &e), SBX_EPERM);
    sbx_error_free(e);
    /* The planted directory is untouched (sbx removes nothing it does not own). */
    char planted[800];
    snprintf(planted, sizeof(planted), "%s/boxes/sbx-planted/record.json", foreign);
    TAP_TRUE(access(planted, F_OK) == 0);
    sbx_provider_free(p);
    census_check(state_dir);
}

/*
 * Records are 0600 in 0700 directories (they hold the box's env), and no
 * secret shows on any process's command line while the box runs.
 */
static void test_records_private_and_no_secret_on_cmdlines(void)
{
    need_boxes();
    char secret[64], hex[17];
    sbx__random_hex(hex, 8);
    snprintf(secret, sizeof(secret), "s3cr3t-%s", hex);
    /* The umask must not matter: the modes are set explicitly. */
    mode_t old = umask(0);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_env(s, "API_KEY", secret);
    sbx_sandbox *sb = start(p, s);
    umask(old);
    const char *id = sbx_sandbox_id(sb);
    char path[1024];
    struct stat st;
    snprintf(path, sizeof(path), "%s/boxes/%s/record.json", state_dir, id);
    TAP_EQ_INT(lstat(path, &st), 0);
    TAP_EQ_INT(st.st_mode & 07777, 0600);
    const char *dirs[] = {state_root, state_dir, NULL};
    char boxes[700];
    snprintf(boxes, sizeof(boxes), "%s/boxes", state_dir);
    dirs[2] = boxes;
    for (int i = 0; i < 3; i++) {
        TAP_EQ_INT(lstat(dirs[i], &st), 0);
        if ((st.st_mode & 07777) != 0700)
            TAP_FAIL("%s has mode %04o, not 0700", dirs[i], (unsigned)(st.st_mode & 07777));
    }
    /* The box's env reaches its commands... */
    char check[128];
    snprintf(check, sizeof(check), "test ${#API_KEY} -eq %zu", strlen(secret));
    TAP_EQ_INT(rc_of(sb, check), 0);
    /* ... and appears on no command line on the host (shim, agent, anything). */
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char p2[300];
        snprintf(p2, sizeof(p2), "/proc/%s/cmdline", de->d_name);
        char *cmd = NULL;
        size_t len = 0;
        if (sbx__read_file(p2, &cmd, &len) < 0)
            continue;
        for (size_t i = 0; i < len; i++)
            if (!cmd[i])
                cmd[i] = ' ';
        bool leaked = strstr(cmd, secret) != NULL;
        free(cmd);
        if (leaked) {
            closedir(d);
            TAP_FAIL("the secret is on the command line of pid %s", de->d_name);
        }
    }
    if (d)
        closedir(d);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* First user of /etc/passwd with a uid in [lo, hi): its name, or NULL. */
static char *passwd_user_in(unsigned long lo, unsigned long hi)
{
    FILE *f = fopen("/etc/passwd", "r");
    char line[1024];
    char *found = NULL;
    while (f && !found && fgets(line, sizeof(line), f)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        unsigned long u = strtoul(c2 + 1, NULL, 10);
        if (u >= lo && u < hi) {
            *c1 = 0;
            found = strdup(line);
        }
    }
    if (f)
        fclose(f);
    return found;
}

static void test_config_values_checked(void)
{
    need_boxes();
    sbx_provider *bad = NULL;
    sbx_error *e = NULL;
    /* A relative state_dir would build a tree in the cwd. */
    provider_fails("{\"linux\": {\"state_dir\": \"relative/dir\"}}", SBX_EINVAL, "absolute");
    TAP_TRUE(access("relative", F_OK) != 0);
    /* A userns range holding real users maps box root onto them. */
    char *user = passwd_user_in(1000, 1000 + 65536);
    TAP_EQ_INT(
        sbx_provider_new("{\"linux\": {\"userns_base\": 1000, \"userns_slots\": 1}}", &bad, &e),
        SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "userns");
    if (user) {
        char quoted[300];
        snprintf(quoted, sizeof(quoted), "'%s'", user);
        TAP_CONTAINS(sbx_error_message(e), quoted);
    }
    free(user);
    sbx_error_free(e);
    e = NULL;
    provider_fails("{\"linux\": {\"userns_base\": 0, \"userns_slots\": 1}}", SBX_EINVAL, NULL);
    /* The default range is fine. */
    sbx_provider *ok = provider("{\"userns\": true}");
    sbx_provider_free(ok);
    census_check(state_dir);
}

/*
 * gc finds boxes by what exists: a box whose record is gone (its shim
 * alive), and a box whose shim was killed and whose directory was removed
 * (only its cgroups and processes left). Both are gone after one gc.
 */
static void test_gc_finds_boxes_without_records(void)
{
    need_boxes();
    if (sbx__cg_mode() == SBX_CG_NONE)
        TAP_SKIP("no cgroups here");
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *b1 = start(p, s);
    sbx_sandbox *b2 = start(p, s);
    char *id1 = strdup(sbx_sandbox_id(b1)), *id2 = strdup(sbx_sandbox_id(b2));
    json_t *r1 = record_json(id1), *r2 = record_json(id2);
    pid_t shim1 = (pid_t)json_integer_value(json_object_get(r1, "shim_pid"));
    pid_t shim2 = (pid_t)json_integer_value(json_object_get(r2, "shim_pid"));
    pid_t init2 = (pid_t)json_integer_value(json_object_get(r2, "init_pid"));
    json_t *cg2 = json_object_get(r2, "cgroups");
    TAP_TRUE(shim1 > 0 && shim2 > 0 && init2 > 0);
    sbx_sandbox_detach(b1);
    sbx_sandbox_detach(b2);
    /* 1: the record is lost; the shim runs on. */
    char p1[1024];
    snprintf(p1, sizeof(p1), "%s/boxes/%s/record.json", state_dir, id1);
    TAP_EQ_INT(unlink(p1), 0);
    /* 2: the shim is killed and the box directory removed: only the cgroups hold the box. */
    TAP_EQ_INT(kill(shim2, SIGKILL), 0);
    while (process_alive(shim2)) /* bounded by the alarm */
        usleep(10000);
    char d2[1024];
    snprintf(d2, sizeof(d2), "%s/boxes/%s", state_dir, id2);
    TAP_EQ_INT(sbx__rm_rf(d2), 0);
    /* Its groups are still there (with the box's processes, unless they died with the shim). */
    TAP_TRUE(json_array_size(cg2) > 0);
    for (size_t i = 0; i < json_array_size(cg2); i++)
        TAP_TRUE(access(json_string_value(json_array_get(cg2, i)), F_OK) == 0);
    /* The cgroup sweep leaves groups younger than 2 s to their shims. */
    sleep(3);
    sbx_linux_gc_opts o = {.grace_s = 0.001};
    char **removed = NULL;
    TAP_OK(sbx__linux_gc(state_dir, &o, &removed, &e_));
    bool saw1 = false, saw2 = false;
    for (char **r = removed; r && *r; r++) {
        saw1 |= !strcmp(*r, id1);
        saw2 |= !strcmp(*r, id2);
    }
    sbx_strv_free(removed);
    TAP_TRUE(saw1);
    TAP_TRUE(saw2);
    /* The box processes are gone (the kernel reaps them a moment later: the alarm bounds it). */
    while (process_alive(shim1) || process_alive(init2))
        usleep(10000);
    for (size_t i = 0; i < json_array_size(cg2); i++)
        TAP_TRUE(access(json_string_value(json_array_get(cg2, i)), F_OK) != 0);
    json_decref(r1);
    json_decref(r2);
    free(id1);
    free(id2);
    free_and_census(s, p, state_dir);
}

/*
 * A record that lost its "state" (edited by hand, or by whoever can write
 * the state directory) is read as an ended box: status says ERROR rather
 * than reading a NULL, and the box still stops and leaves nothing.
 */
static void test_record_without_state(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *a = start(p, s);
    /*
     * The shim writes "running" a moment after the start returns (slower
     * under ASan): wait for it, or its write would put "state" back.
     */
    json_t *r = record_json(sbx_sandbox_id(a));
    while (strcmp(json_string_value(json_object_get(r, "state")) ?: "", "running") != 0) {
        json_decref(r); /* the alarm bounds this */
        usleep(10 * 1000);
        r = record_json(sbx_sandbox_id(a));
    }
    TAP_EQ_INT(json_object_del(r, "state"), 0);
    char path[1024];
    snprintf(path, sizeof(path), "%s/boxes/%s/record.json", state_dir, sbx_sandbox_id(a));
    char *text = json_dumps(r, 0);
    TAP_EQ_INT(sbx__write_file_atomic(path, text, strlen(text), 0600), 0);
    free(text);
    json_decref(r);
    sbx_status st = SBX_STATUS_RUNNING;
    TAP_OK(sbx_sandbox_status(a, &st, &e_));
    TAP_EQ_INT(st, SBX_STATUS_ERROR);
    stop_free(a);
    free_and_census(s, p, state_dir);
}

/*
 * die_with_creator: the box ends when the process that made it dies
 * without letting it go, even by SIGKILL after the handover.
 */
static void test_die_with_creator(void)
{
    need_boxes();
    int pfd[2];
    TAP_EQ_INT(pipe(pfd), 0);
    pid_t child = fork();
    if (child == 0) {
        close(pfd[0]);
        sbx_provider *p = provider(NULL);
        sbx_spec *s = sbx_spec_new();
        sbx_error *e = NULL;
        if (sbx_spec_set_provider_options(s, "{\"die_with_creator\": true}", &e) < 0)
            _exit(3);
        sbx_sandbox *sb = NULL;
        if (sbx_sandbox_new(p, s, &sb, NULL) < 0 || sbx_sandbox_start(sb, NULL, &e) < 0)
            _exit(4);
        char id[128];
        snprintf(id, sizeof(id), "%s\n", sbx_sandbox_id(sb));
        if (write(pfd[1], id, strlen(id)) < 0)
            _exit(5);
        for (;;)
            pause();
    }
    close(pfd[1]);
    char id[128] = "";
    ssize_t n = read(pfd[0], id, sizeof(id) - 1);
    close(pfd[0]);
    TAP_TRUE(n > 0);
    id[n > 0 ? n - 1 : 0] = 0;
    char bd[1024];
    snprintf(bd, sizeof(bd), "%s/boxes/%s", state_dir, id);
    TAP_TRUE(access(bd, F_OK) == 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* The shim sees its control socket close and removes the box (bounded by the alarm). */
    while (access(bd, F_OK) == 0)
        usleep(20000);
    /* And the option is checked. */
    sbx_spec *s = sbx_spec_new();
    sbx_provider *p = provider(NULL);
    TAP_EQ_INT(sbx_spec_set_provider_options(s, "{\"die_with_creator\": 1}", NULL), SBX_OK);
    start_fails(p, s, SBX_EINVAL, "die_with_creator");
    free_and_census(s, p, state_dir);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_forged_records_signal_nothing),
        TAP(test_records_read_only_when_private),
        TAP(test_descriptor_state_dir_checked),
        TAP(test_records_private_and_no_secret_on_cmdlines),
        TAP(test_config_values_checked),
        TAP(test_gc_finds_boxes_without_records),
        TAP(test_record_without_state),
        TAP(test_die_with_creator),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
