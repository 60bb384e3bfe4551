/* The calls every box test makes: see box.h. */
#include "lib/box.h"

#include "tap.h"

#include <stdio.h>

sbx_sandbox *start(sbx_provider *p, const sbx_spec *spec)
{
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    sbx_spec *own = spec ? NULL : sbx_spec_new();
    if (sbx_sandbox_new(p, spec ? spec : own, &sb, &e) != SBX_OK)
        TAP_FAIL("new sandbox: %s", sbx_error_message(e));
    sbx_spec_free(own);
    if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
        TAP_FAIL("start: %s", sbx_error_message(e));
    return sb;
}

void stop_free(sbx_sandbox *sb)
{
    sbx_error *e = NULL;
    if (sbx_sandbox_stop(sb, &e) != SBX_OK)
        TAP_FAIL("stop: %s", sbx_error_message(e));
    sbx_sandbox_free(sb);
}

sbx_exec_result *run(sbx_sandbox *sb, const char *cmd, const sbx_exec_opts *opts)
{
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_exec(sb, cmd, opts, &r, &e) != SBX_OK)
        TAP_FAIL("exec '%s': %s", cmd, sbx_error_message(e));
    return r;
}

int rc_of(sbx_sandbox *sb, const char *cmd)
{
    sbx_exec_result *r = run(sb, cmd, NULL);
    int rc = sbx_exec_result_return_code(r);
    sbx_exec_result_free(r);
    return rc;
}

const char *out_as(sbx_sandbox *sb, const char *user, const char *cmd)
{
    static char buf[1 << 16];
    sbx_exec_opts *o = NULL;
    if (user) {
        o = sbx_exec_opts_new();
        sbx_exec_opts_set_user(o, user);
    }
    sbx_exec_result *r = run(sb, cmd, o);
    sbx_exec_opts_free(o);
    if (sbx_exec_result_return_code(r) != 0)
        TAP_FAIL("'%s' exited %d: %s", cmd, sbx_exec_result_return_code(r), stderr_of(r));
    snprintf(buf, sizeof(buf), "%s", stdout_of(r));
    sbx_exec_result_free(r);
    return buf;
}

const char *out_of(sbx_sandbox *sb, const char *cmd)
{
    return out_as(sb, NULL, cmd);
}

const char *stdout_of(const sbx_exec_result *r)
{
    const char *s = sbx_exec_result_stdout(r, NULL);
    return s ? s : "";
}

const char *stderr_of(const sbx_exec_result *r)
{
    const char *s = sbx_exec_result_stderr(r, NULL);
    return s ? s : "";
}

const char *output_of(sbx_sandbox *sb, const char *cmd, int *rc)
{
    static char buf[1 << 16];
    sbx_exec_result *r = run(sb, cmd, NULL);
    snprintf(buf, sizeof(buf), "%s%s", stdout_of(r), stderr_of(r));
    int code = sbx_exec_result_return_code(r);
    sbx_exec_result_free(r);
    if (rc)
        *rc = code;
    else if (code != 0)
        TAP_FAIL("'%s' exited %d: %s", cmd, code, buf);
    return buf;
}

sbx_spec *spec_with(const char *opts)
{
    sbx_spec *s = sbx_spec_new();
    sbx_error *e = NULL;
    if (opts && sbx_spec_set_provider_options(s, opts, &e) != SBX_OK)
        TAP_FAIL("provider_options %s refused: %s", opts, sbx_error_message(e));
    return s;
}
