/* The apptainer provider's parts (a plugin: public headers only). */
#ifndef SBX_APPTAINER_H
#define SBX_APPTAINER_H

#include <sbx.h>
#include <sbx/box.h>
#include <sbx/provider.h>

#include <semaphore.h>
#include <stddef.h>

#define AP_NAME_PREFIX "nemo-gym"           /* ids are nemo-gym-<16 hex> */
#define AP_MOUNT_POINT "/sandbox"
#define AP_PROBE_COMMAND "printf apptainer-sandbox-ready"
#define AP_PROBE_EXPECTED "apptainer-sandbox-ready"
#define AP_RUNTIME_RC 125
#define AP_AGENT_IN_BOX "/.sbx-agent"       /* where the agent is bound, read-only */
#define AP_OUTPUT_MAX (64u << 20)           /* per stream of one CLI call */

struct ap_buf {
    char *data;
    size_t len;
    int truncated;
};

struct ap_cli_result {
    struct ap_buf out, err;
    int code;      /* exit status, -signo, or 125 */
    int timed_out; /* killed at the timeout */
};

/* The provider's state: its config, resolved. */
struct ap {
    char *bin;         /* <bin_path>/apptainer or the one on PATH */
    char **child_env;  /* this process's env at init, PATH prefixed with bin_path */
    char *tmp_dir;     /* for daemonize mode's unnamed output files */
    sem_t slots;       /* exec.concurrency */
    int slots_ready;
    int agent;         /* run sbx-agent in the instance (ours; default true) */
    char *agent_path;  /* the host's sbx-agent */
    /* create */
    char *mount_point;
    double start_timeout_s;
    char **extra_start_args;
    int apply_resource_limits;
    char *default_image; /* ours: the image when the spec has none */
    /* exec */
    double default_timeout_s;
    int fakeroot_for_root;
    char **default_binds;
    char **extra_exec_args;
    long concurrency;
    /* probe */
    char *probe_command; /* NULL: no probe */
    char *probe_expected;
    double probe_timeout_s, probe_deadline_s, probe_stable_delay_s;
    long probe_stable_count;
    sbx_box_store *store;
    sbx_box_pool *pool;
};

/* cli.c */
int ap_cli_run(struct ap *a, const char *const *argv, const void *in, size_t in_len,
               double timeout_s, int daemonize, struct ap_cli_result *res, sbx_error **err);
void ap_cli_result_clear(struct ap_cli_result *r);
/* Python's shlex.quote: malloc'd, NULL when out of memory. */
char *ap_quote(const char *s);
int ap_env_check(const char *key, const char *value, sbx_error **err);
int ap_env_file(struct ap *a, const char *dir, const char *const *kv, char **path,
                sbx_error **err);

/* config.c */
int ap_config_parse(struct ap *a, const char *config_json, sbx_error **err);
void ap_config_clear(struct ap *a);

#endif
