/*
 * Attribution (reference-api.md K): team/user/workload from explicit values,
 * the given environment, and the OS login; the per-process run id; the
 * once-per-process log line.
 */
#include "tap.h"
#include "common.h"

#include "core/internal.h"

#include <pthread.h>
#include <fcntl.h>
#include <sys/wait.h>

/* The variables Python's getpass.getuser() reads before the passwd database. */
static void clear_login_env(void)
{
    unsetenv("LOGNAME");
    unsetenv("USER");
    unsetenv("LNAME");
    unsetenv("USERNAME");
}

static char *attr(const char *team, const char *user, const char *workload,
                  const char *const *envp)
{
    char *out = NULL;
    TAP_OK(sbx_resolve_attribution(team, user, workload, envp, &out, &e_));
    return out;
}

static void expect(const char *team, const char *user, const char *workload,
                   const char *const *envp, const char *want)
{
    char *got = attr(team, user, workload, envp);
    TAP_EQ_STR(got, want);
    free(got);
}

static void test_explicit_values_win_over_env(void)
{
    const char *const env[] = { "NEMO_GYM_TEAM=env-team", "NEMO_GYM_USER=env-user",
                                "NEMO_GYM_WORKLOAD=env-workload", NULL };
    expect("cfg-team", "cfg-user", "cfg-workload", env,
           "{\"team\":\"cfg-team\",\"user\":\"cfg-user\",\"workload\":\"cfg-workload\"}");
    /* An explicit value is kept as given; an empty one falls through to the env. */
    expect("  t  ", "", NULL, env,
           "{\"team\":\"  t  \",\"user\":\"env-user\",\"workload\":\"env-workload\"}");
}

static void test_nemo_gym_env_beats_slurm_env(void)
{
    const char *const env[] = { "NEMO_GYM_TEAM=gym-team",   "SLURM_JOB_ACCOUNT=slurm-account",
                                "NEMO_GYM_USER=gym-user",   "SLURM_JOB_USER=slurm-user",
                                "NEMO_GYM_WORKLOAD=gym-wl", "SLURM_JOB_NAME=slurm-job",
                                NULL };
    expect(NULL, NULL, NULL, env,
           "{\"team\":\"gym-team\",\"user\":\"gym-user\",\"workload\":\"gym-wl\"}");
}

static void test_slurm_env_fallback(void)
{
    const char *const env[] = { "SLURM_JOB_ACCOUNT=account", "SLURM_JOB_USER=slurm-user",
                                "SLURM_JOB_NAME=job-name", NULL };
    expect(NULL, NULL, NULL, env,
           "{\"team\":\"account\",\"user\":\"slurm-user\",\"workload\":\"job-name\"}");
}

static void test_workload_falls_back_to_config_path(void)
{
    setenv("LOGNAME", "root", 1); /* keep the OS login out of the result */
    const char *const only_path[] = { "NEMO_GYM_CONFIG_PATH=my_agent_server", NULL };
    expect(NULL, NULL, NULL, only_path, "{\"workload\":\"my_agent_server\"}");
    const char *const both[] = { "NEMO_GYM_CONFIG_PATH=my_agent_server", "SLURM_JOB_NAME=job-name",
                                 NULL };
    expect(NULL, NULL, NULL, both, "{\"workload\":\"job-name\"}");
}

static void test_env_values_trimmed_and_blank_skipped(void)
{
    setenv("LOGNAME", "  ", 1);
    const char *const env[] = { "NEMO_GYM_TEAM=   ", "SLURM_JOB_ACCOUNT=", "SLURM_JOB_NAME=job",
                                "NEMO_GYM_USER=\t", NULL };
    /* A blank login is ignored too: getuser() returns it, and it strips to nothing. */
    expect(NULL, NULL, NULL, env, "{\"workload\":\"job\"}");
    const char *const padded[] = { "NEMO_GYM_TEAM=  t1 \n", "NEMO_GYM_USERX=no", NULL };
    setenv("LOGNAME", "root", 1);
    expect(NULL, NULL, NULL, padded, "{\"team\":\"t1\"}");
}

static void test_user_falls_back_to_login_name(void)
{
    const char *const empty[] = { NULL };
    clear_login_env();
    setenv("LOGNAME", " login-user ", 1);
    setenv("USER", "other", 1);
    expect(NULL, NULL, NULL, empty, "{\"user\":\"login-user\"}");
    /* getuser() takes the first non-empty variable of LOGNAME, USER, LNAME, USERNAME. */
    setenv("LOGNAME", "", 1);
    expect(NULL, NULL, NULL, empty, "{\"user\":\"other\"}");
}

static void test_root_login_is_ignored(void)
{
    const char *const empty[] = { NULL };
    clear_login_env();
    static const char *const roots[] = { "root", "ROOT", "Root", " root " };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(roots); i++) {
        setenv("USERNAME", roots[i], 1);
        expect(NULL, NULL, NULL, empty, "{}");
    }
    /* "root" from an attribution variable is deliberate and kept. */
    const char *const env[] = { "NEMO_GYM_USER=root", NULL };
    expect(NULL, NULL, NULL, env, "{\"user\":\"root\"}");
}

static void test_login_from_passwd(void)
{
    if (geteuid() != 0)
        TAP_SKIP("needs root to switch to the 'nobody' uid");
    const char *const empty[] = { NULL };
    clear_login_env();
    /* This test runs in its own forked process: dropping privileges is confined to it. */
    TAP_EQ_INT(setuid(65534), 0);
    char *got = attr(NULL, NULL, NULL, empty);
    TAP_EQ_STR(got, "{\"user\":\"nobody\"}");
    free(got);
}

static void test_login_lookup_failure_omits_user(void)
{
    if (geteuid() != 0)
        TAP_SKIP("needs root to switch to a uid without a passwd entry");
    const char *const empty[] = { NULL };
    clear_login_env();
    TAP_EQ_INT(setuid(4242421), 0);
    expect(NULL, NULL, NULL, empty, "{}");
}

static void test_environ_defaults_to_process_env(void)
{
    setenv("NEMO_GYM_TEAM", "process-env-team", 1);
    setenv("NEMO_GYM_USER", "process-user", 1);
    unsetenv("NEMO_GYM_WORKLOAD");
    unsetenv("SLURM_JOB_NAME");
    unsetenv("NEMO_GYM_CONFIG_PATH");
    expect(NULL, NULL, NULL, NULL, "{\"team\":\"process-env-team\",\"user\":\"process-user\"}");
    /* An explicit (even empty) array means "not the process environment". */
    setenv("LOGNAME", "root", 1);
    const char *const empty[] = { NULL };
    expect(NULL, NULL, NULL, empty, "{}");
}

/* --- run id --------------------------------------------------------------- */

static char *run_id(const char *run, const char *const *envp)
{
    char *out = NULL;
    TAP_OK(sbx_resolve_run_id(run, envp, &out, &e_));
    return out;
}

static bool is_hex12(const char *s)
{
    if (strlen(s) != 12)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

static void test_run_id_explicit_then_env(void)
{
    const char *const env[] = { "NEMO_GYM_RUN_ID= env-run ", NULL };
    char *got = run_id("explicit-run", env);
    TAP_EQ_STR(got, "explicit-run");
    free(got);
    got = run_id("  padded\t", env);
    TAP_EQ_STR(got, "padded");
    free(got);
    /* A blank explicit value falls through; the env value is trimmed. */
    got = run_id("   ", env);
    TAP_EQ_STR(got, "env-run");
    free(got);
    got = run_id(NULL, env);
    TAP_EQ_STR(got, "env-run");
    free(got);
    setenv("NEMO_GYM_RUN_ID", "from-process", 1);
    got = run_id(NULL, NULL);
    TAP_EQ_STR(got, "from-process");
    free(got);
}

static void *run_id_thread(void *arg)
{
    (void)arg;
    const char *const empty[] = { NULL };
    char *out = NULL;
    return sbx_resolve_run_id(NULL, empty, &out, NULL) == SBX_OK ? out : NULL;
}

static void test_run_id_generated_once_per_process(void)
{
    unsetenv("NEMO_GYM_RUN_ID");
    /* Threads racing on the first call all get the same id. */
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        TAP_EQ_INT(pthread_create(&t[i], NULL, run_id_thread, NULL), 0);
    char *ids[8];
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], (void **)&ids[i]);
    for (int i = 0; i < 8; i++) {
        TAP_TRUE(ids[i] && is_hex12(ids[i]));
        TAP_EQ_STR(ids[i], ids[0]);
    }
    char *again = run_id(NULL, NULL);
    TAP_EQ_STR(again, ids[0]);
    free(again);
    for (int i = 0; i < 8; i++)
        free(ids[i]);
}

/* The id a fresh child process generates, read back through a pipe. */
static void child_run_id(char out[13])
{
    int p[2];
    TAP_EQ_INT(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = fork();
    if (pid == 0) {
        const char *const empty[] = { NULL };
        char *id = NULL;
        if (sbx_resolve_run_id(NULL, empty, &id, NULL) != SBX_OK || write(p[1], id, 12) != 12)
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    ssize_t n = read(p[0], out, 12);
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    TAP_EQ_INT(n, 12);
    TAP_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    out[12] = 0;
}

static void test_run_id_differs_between_processes(void)
{
    char a[13], b[13];
    child_run_id(a);
    child_run_id(b);
    TAP_TRUE(is_hex12(a) && is_hex12(b));
    TAP_TRUE(strcmp(a, b) != 0);
}

/* --- log_attribution_once ---------------------------------------------------- */

static sbx_buf logs;
static int log_lines;

static void collect(sbx_log_level level, const char *msg, void *data)
{
    (void)data;
    sbx__buf_printf(&logs, "%d %s\n", (int)level, msg);
    log_lines++;
}

static void test_log_attribution_once(void)
{
    sbx_set_log_cb(collect, NULL, SBX_LOG_DEBUG);
    /* Empty metadata is not worth a line and does not use up the one allowed. */
    TAP_EQ_INT(sbx_log_attribution_once("{}"), 0);
    TAP_EQ_INT(log_lines, 0);
    TAP_EQ_INT(
        sbx_log_attribution_once("{\"nemo-gym.nvidia.com/run\": \"run-1\", \"team\": \"t\"}"), 1);
    TAP_EQ_INT(sbx_log_attribution_once("{\"nemo-gym.nvidia.com/run\": \"run-2\"}"), 0);
    TAP_EQ_INT(log_lines, 1);
    TAP_EQ_STR(logs.data,
               "20 Sandbox attribution metadata: "
               "{'nemo-gym.nvidia.com/run': 'run-1', 'team': 't'}\n");
    TAP_EQ_INT(sbx_log_attribution_once("{not: json"), SBX_EINVAL);
    TAP_EQ_INT(sbx_log_attribution_once("[1]"), SBX_ETYPE);
    TAP_EQ_INT(sbx_log_attribution_once("plain words"), SBX_ETYPE);
    TAP_EQ_INT(sbx_log_attribution_once(NULL), SBX_EINVAL);
    sbx_set_log_cb(NULL, NULL, SBX_LOG_DEBUG);
}

static void test_log_attribution_counts_without_callback(void)
{
    /* As the reference's flag, the one line is used even if nobody listens. */
    sbx_set_log_cb(NULL, NULL, SBX_LOG_DEBUG);
    TAP_EQ_INT(sbx_log_attribution_once("{\"a\": \"b\"}"), 1);
    sbx_set_log_cb(collect, NULL, SBX_LOG_DEBUG);
    TAP_EQ_INT(sbx_log_attribution_once("{\"a\": \"b\"}"), 0);
    TAP_EQ_INT(log_lines, 0);
    sbx_set_log_cb(NULL, NULL, SBX_LOG_DEBUG);
}

TAP_MAIN(TAP(test_explicit_values_win_over_env), TAP(test_nemo_gym_env_beats_slurm_env),
         TAP(test_slurm_env_fallback), TAP(test_workload_falls_back_to_config_path),
         TAP(test_env_values_trimmed_and_blank_skipped), TAP(test_user_falls_back_to_login_name),
         TAP(test_root_login_is_ignored), TAP(test_login_from_passwd),
         TAP(test_login_lookup_failure_omits_user), TAP(test_environ_defaults_to_process_env),
         TAP(test_run_id_explicit_then_env), TAP(test_run_id_generated_once_per_process),
         TAP(test_run_id_differs_between_processes), TAP(test_log_attribution_once),
         TAP(test_log_attribution_counts_without_callback))
