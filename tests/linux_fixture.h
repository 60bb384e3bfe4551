/*
 * What every linux-provider test needs: a check that this machine can run
 * boxes (root, sbx-shim and sbx-agent built) that points sbx at a private
 * state directory, and the few calls each test makes on boxes. Included by
 * the linux suites (test_linux, test_sec_box, test_sec_state); everything is
 * static, so a suite uses what it needs.
 */
#ifndef SBX_TESTS_LINUX_FIXTURE_H
#define SBX_TESTS_LINUX_FIXTURE_H

#include "tap.h"
#include "common.h"
#include "lib/box.h"

#include <sbx.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char state_root[512]; /* SBX_STATE_DIR */
static char state_dir[600];  /* its linux/ */

static inline bool have_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* A helper binary built next to this test's build tree (build/tests/integration/..). */
static inline bool built(const char *name, const char *env)
{
    if (getenv(env))
        return true;
    char self[1024], path[1200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return false;
    self[n] = 0;
    for (int up = 0; up < 3; up++) {
        char *sl = strrchr(self, '/');
        if (!sl)
            return false;
        *sl = 0;
    }
    snprintf(path, sizeof(path), "%s/%s", self, name);
    return have_file(path);
}

/* Skips unless this machine can run linux boxes; points sbx at a private state dir. */
static inline void need_boxes(void)
{
    if (geteuid() != 0)
        TAP_SKIP("linux boxes need root");
    if (!built("sbx-shim", "SBX_SHIM"))
        TAP_SKIP("sbx-shim is not built (make)");
    if (!built("sbx-agent", "SBX_AGENT"))
        TAP_SKIP("sbx-agent is not built (make)");
    /*
     * A sanitizer build links its sbx-agent dynamically, which cannot run in
     * a busybox image: use the static one of the plain build when there is one
     * (the agent is not what these tests sanitize).
     */
    char *agent = getenv("SBX_AGENT") ? NULL : realpath("build/sbx-agent", NULL);
    if (agent)
        setenv("SBX_AGENT", agent, 1);
    free(agent);
    snprintf(state_root, sizeof(state_root), "%s/st", tap_tmpdir());
    snprintf(state_dir, sizeof(state_dir), "%s/linux", state_root);
    setenv("SBX_STATE_DIR", state_root, 1);
    /* The child's fd census must not count the loop's descriptors. */
    tap_allow_fd_changes();
}

/* A linux provider with `cfg` (a JSON mapping, NULL for {}). */
static inline sbx_provider *provider(const char *cfg)
{
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    char text[1024];
    snprintf(text, sizeof(text), "{\"linux\": %s}", cfg ? cfg : "{}");
    if (sbx_provider_new(text, &p, &e) != SBX_OK)
        TAP_FAIL("provider: %s", sbx_error_message(e));
    return p;
}

/* The host pid of the box's init, from its record (state_dir/boxes/ID/record.json). */
static inline pid_t init_pid_of(sbx_sandbox *sb)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/boxes/%s/record.json", state_dir, sbx_sandbox_id(sb));
    char *rec = read_text(path);
    const char *ip = rec ? strstr(rec, "\"init_pid\":") : NULL;
    pid_t init = ip ? (pid_t)strtol(ip + 11, NULL, 10) : 0;
    free(rec);
    if (init <= 1)
        TAP_FAIL("no init pid in %s", path);
    return init;
}

/* need_boxes(), then a started box whose workdir is /work on a new provider (*prov). */
static inline sbx_sandbox *work_box(sbx_provider **prov)
{
    need_boxes();
    *prov = provider(NULL);
    sbx_spec *s = spec_in("/work");
    sbx_sandbox *sb = start(*prov, s);
    sbx_spec_free(s);
    return sb;
}

#endif
