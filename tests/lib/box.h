/*
 * The calls every box test makes (tests/lib/box.c), for any provider: start
 * a box, run a command in it, read what it printed, stop it. Each fails the
 * test (TAP_FAIL) on an sbx error, so a test reads as what it checks.
 */
#ifndef SBX_TESTS_LIB_BOX_H
#define SBX_TESTS_LIB_BOX_H

#include <sbx.h>

/* A provider of config `cfg` (JSON: {"NAME": {...}}); fails the test if it is refused. */
sbx_provider *provider_of(const char *cfg);
/* The fake provider (tests/fakes/) of config `cfg` (NULL: {"fake": {}}). */
sbx_provider *fake_provider(const char *cfg);
/* A started box of image "img" on the fake provider `p`. */
sbx_sandbox *fake_box(sbx_provider *p);

/* A started box of `spec` (NULL: an empty spec) on `p`. */
sbx_sandbox *start(sbx_provider *p, const sbx_spec *spec);
/* Stops and frees a box; fails the test if the stop fails. */
void stop_free(sbx_sandbox *sb);
/* sb's status must be `want`; a failing status call fails the test too. */
void status_is(sbx_sandbox *sb, sbx_status want);
/* A second handle on sb's box, through `p`: its descriptor (full scope), connected. */
sbx_sandbox *connect_to(sbx_provider *p, sbx_sandbox *sb);

/*
 * Starting a box of `spec` (NULL: an empty spec) on `p` must fail: with
 * `code` (0: any failure), its message holding `want` (NULL: any). A box
 * that starts is stopped and fails the test. The box is freed; its message
 * is returned, in a static buffer that the next call overwrites.
 */
const char *start_fails(sbx_provider *p, const sbx_spec *spec, int code, const char *want);

/*
 * `n` boxes of `spec` (NULL: an empty spec) started at once; each must
 * start. The array is the caller's to free (after stop_many_wait()).
 */
sbx_sandbox **start_many(sbx_provider *p, const sbx_spec *spec, int n);
/* Starts the stop of each of the n boxes at once; their futures (see stop_many_wait()). */
sbx_future **stop_many_begin(sbx_sandbox **sbs, int n);
/* Waits for each stop stop_many_begin() started, which must succeed; frees fs and the boxes. */
void stop_many_wait(sbx_sandbox **sbs, sbx_future **fs, int n);

/* Runs `cmd` (opts may be NULL); the result, whatever its exit code (caller frees). */
sbx_exec_result *run(sbx_sandbox *sb, const char *cmd, const sbx_exec_opts *opts);
/*
 * Runs `cmd` (opts may be NULL), which must exit `rc` having printed exactly
 * `out` on stdout and `err` on stderr (NULL: not checked), with no error_type.
 */
void run_is(sbx_sandbox *sb, const char *cmd, const sbx_exec_opts *opts, int rc, const char *out,
            const char *err);
/*
 * Runs `cmd` with a timeout of `secs`, which it must run out: the
 * reference's sentinel, exit code 125 and error_type "timeout". The result,
 * for what the command printed before (caller frees).
 */
sbx_exec_result *timed_out(sbx_sandbox *sb, const char *cmd, double secs);
/* Runs `cmd`; its exit code. */
int rc_of(sbx_sandbox *sb, const char *cmd);

/*
 * Runs `cmd`, which must exit 0 (else the test fails, with its stderr), as
 * `user` (NULL: the box's default). Its stdout, in a static buffer that the
 * next call overwrites.
 */
const char *out_as(sbx_sandbox *sb, const char *user, const char *cmd);
/* out_as() as the box's default user. */
const char *out_of(sbx_sandbox *sb, const char *cmd);

/*
 * Runs `cmd`; what it printed, stdout then stderr, in a static buffer that
 * the next call overwrites. Its exit code in *rc; with rc NULL the command
 * must exit 0 (else the test fails, with that output).
 */
const char *output_of(sbx_sandbox *sb, const char *cmd, int *rc);

/*
 * A provider of config `cfg` must be refused: with `code` (0: any failure),
 * its message holding `want` (NULL: any). A provider that is made is freed
 * and fails the test. The message is returned, in a static buffer that the
 * next call overwrites.
 */
const char *provider_fails(const char *cfg, int code, const char *want);

/*
 * The other side of a connect-from-another-process test, for a child's
 * main(): a provider of `cfg` connects to the box of descriptor `desc` and
 * runs `cmd` there, leaving the box running. Returns 0 when cmd exits 0, 3
 * when it exits otherwise, 2 when a call fails (its message on stderr).
 */
int connect_child(const char *cfg, const char *desc, const char *cmd);

/* A spec with provider_options `opts` (JSON; NULL: none); fails the test if refused. */
sbx_spec *spec_with(const char *opts);
/* A spec whose workdir is `dir`. */
sbx_spec *spec_in(const char *dir);

/* What a finished command printed: never NULL ("" when there was nothing). */
const char *stdout_of(const sbx_exec_result *r);
const char *stderr_of(const sbx_exec_result *r);

#endif
