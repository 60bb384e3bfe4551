/* The calls every box test makes: see box.h. */
#include "lib/box.h"

#include "tap.h"

#include <stdio.h>
#include <stdlib.h>

/*
 * What a call that had to fail returned: `rc` must be `code` (0: any), the
 * message of `e` must hold `want` (NULL: any). Frees e; its message, in a
 * static buffer that the next call overwrites.
 */
static const char *refused_with(int rc, sbx_error *e, int code, const char *want)
{
    static char msg[4096];
    snprintf(msg, sizeof(msg), "%s", sbx_error_message(e) ? sbx_error_message(e) : "");
    sbx_error_free(e);
    if (code)
        TAP_EQ_INT(rc, code);
    if (want)
        TAP_CONTAINS(msg, want);
    return msg;
}

sbx_provider *provider_of(const char *cfg)
{
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new(cfg, &p, &e) != SBX_OK)
        TAP_FAIL("provider %s: %s", cfg, sbx_error_message(e));
    return p;
}

const char *provider_fails(const char *cfg, int code, const char *want)
{
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    int rc = sbx_provider_new(cfg, &p, &e);
    if (rc == SBX_OK) {
        sbx_provider_free(p);
        TAP_FAIL("the provider %s was made; wanted it refused%s%s", cfg, want ? " with: " : "",
                 want ? want : "");
    }
    return refused_with(rc, e, code, want);
}

sbx_provider *fake_provider(const char *cfg)
{
    return provider_of(cfg ? cfg : "{\"fake\": {}}");
}

sbx_sandbox *fake_box(sbx_provider *p)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "img");
    sbx_sandbox *sb = start(p, s);
    sbx_spec_free(s);
    return sb;
}

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

void status_is(sbx_sandbox *sb, sbx_status want)
{
    sbx_status st = (sbx_status)-1; /* not a status, should the call leave it unwritten */
    TAP_OK(sbx_sandbox_status(sb, &st, &e_));
    TAP_EQ_INT(st, want);
}

sbx_sandbox *connect_to(sbx_provider *p, sbx_sandbox *sb)
{
    char *desc = NULL;
    TAP_OK(sbx_sandbox_serialize(sb, NULL, &desc, &e_));
    sbx_sandbox *c = NULL;
    TAP_OK(sbx_sandbox_connect(p, desc, &c, &e_));
    free(desc);
    return c;
}

void stop_free(sbx_sandbox *sb)
{
    sbx_error *e = NULL;
    if (sbx_sandbox_stop(sb, &e) != SBX_OK)
        TAP_FAIL("stop: %s", sbx_error_message(e));
    sbx_sandbox_free(sb);
}

const char *start_fails(sbx_provider *p, const sbx_spec *spec, int code, const char *want)
{
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    sbx_spec *own = spec ? NULL : sbx_spec_new();
    if (sbx_sandbox_new(p, spec ? spec : own, &sb, &e) != SBX_OK)
        TAP_FAIL("new sandbox: %s", sbx_error_message(e));
    sbx_spec_free(own);
    int rc = sbx_sandbox_start(sb, NULL, &e);
    if (rc == SBX_OK) {
        sbx_sandbox_stop(sb, NULL);
        sbx_sandbox_free(sb);
        TAP_FAIL("the box started; wanted it to fail%s%s", want ? " with: " : "",
                 want ? want : "");
    }
    sbx_sandbox_free(sb);
    return refused_with(rc, e, code, want);
}

sbx_sandbox **start_many(sbx_provider *p, const sbx_spec *spec, int n)
{
    sbx_spec *own = spec ? NULL : sbx_spec_new();
    sbx_sandbox **sbs = calloc((size_t)n, sizeof(*sbs));
    sbx_future **fs = calloc((size_t)n, sizeof(*fs));
    if (!sbs || !fs)
        TAP_FAIL("%d boxes: out of memory", n);
    for (int i = 0; i < n; i++) {
        sbx_error *e = NULL;
        if (sbx_sandbox_new(p, spec ? spec : own, &sbs[i], &e) != SBX_OK ||
            sbx_sandbox_start_async(sbs[i], NULL, &fs[i], &e) != SBX_OK)
            TAP_FAIL("box %d: %s", i, sbx_error_message(e));
    }
    for (int i = 0; i < n; i++) {
        sbx_error *e = NULL;
        if (sbx_future_wait(fs[i], -1, &e) != SBX_OK)
            TAP_FAIL("box %d: %s", i, sbx_error_message(e));
        sbx_future_free(fs[i]);
    }
    free(fs);
    sbx_spec_free(own);
    return sbs;
}

sbx_future **stop_many_begin(sbx_sandbox **sbs, int n)
{
    sbx_future **fs = calloc((size_t)n, sizeof(*fs));
    if (!fs)
        TAP_FAIL("%d stops: out of memory", n);
    for (int i = 0; i < n; i++) {
        sbx_error *e = NULL;
        if (sbx_sandbox_stop_async(sbs[i], &fs[i], &e) != SBX_OK)
            TAP_FAIL("stop of box %d: %s", i, sbx_error_message(e));
    }
    return fs;
}

void stop_many_wait(sbx_sandbox **sbs, sbx_future **fs, int n)
{
    for (int i = 0; i < n; i++) {
        sbx_error *e = NULL;
        if (sbx_future_wait(fs[i], -1, &e) != SBX_OK)
            TAP_FAIL("the stop of box %d of %d failed: %s", i, n, sbx_error_message(e));
        sbx_future_free(fs[i]);
        sbx_sandbox_free(sbs[i]);
    }
    free(fs);
}

sbx_exec_result *run(sbx_sandbox *sb, const char *cmd, const sbx_exec_opts *opts)
{
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_exec(sb, cmd, opts, &r, &e) != SBX_OK)
        TAP_FAIL("exec '%s': %s", cmd, sbx_error_message(e));
    return r;
}

void run_is(sbx_sandbox *sb, const char *cmd, const sbx_exec_opts *opts, int rc, const char *out,
            const char *err)
{
    sbx_exec_result *r = run(sb, cmd, opts);
    TAP_EQ_INT(sbx_exec_result_return_code(r), rc);
    if (out)
        TAP_EQ_STR(stdout_of(r), out);
    if (err)
        TAP_EQ_STR(stderr_of(r), err);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);
}

sbx_exec_result *timed_out(sbx_sandbox *sb, const char *cmd, double secs)
{
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, secs);
    sbx_exec_result *r = run(sb, cmd, o);
    sbx_exec_opts_free(o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
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

sbx_spec *spec_in(const char *dir)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_workdir(s, dir);
    return s;
}

int connect_child(const char *cfg, const char *desc, const char *cmd)
{
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    int rc = 2;
    if (sbx_provider_new(cfg, &p, &e) == SBX_OK &&
        sbx_sandbox_connect(p, desc, &sb, &e) == SBX_OK &&
        sbx_sandbox_exec(sb, cmd, NULL, &r, &e) == SBX_OK)
        rc = sbx_exec_result_return_code(r) == 0 ? 0 : 3;
    if (e)
        fprintf(stderr, "connect child: %s\n", sbx_error_message(e));
    sbx_error_free(e);
    sbx_exec_result_free(r);
    sbx_sandbox_free(sb); /* a connected handle: freeing it releases the handle only */
    sbx_provider_free(p);
    return rc;
}
