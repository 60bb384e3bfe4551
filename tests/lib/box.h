/*
 * The calls every box test makes (tests/lib/box.c), for any provider: start
 * a box, run a command in it, read what it printed, stop it. Each fails the
 * test (TAP_FAIL) on an sbx error, so a test reads as what it checks.
 */
#ifndef SBX_TESTS_LIB_BOX_H
#define SBX_TESTS_LIB_BOX_H

#include <sbx.h>

/* A started box of `spec` (NULL: an empty spec) on `p`. */
sbx_sandbox *start(sbx_provider *p, const sbx_spec *spec);
/* Stops and frees a box; fails the test if the stop fails. */
void stop_free(sbx_sandbox *sb);

/* Runs `cmd` (opts may be NULL); the result, whatever its exit code (caller frees). */
sbx_exec_result *run(sbx_sandbox *sb, const char *cmd, const sbx_exec_opts *opts);
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

/* A spec with provider_options `opts` (JSON; NULL: none); fails the test if refused. */
sbx_spec *spec_with(const char *opts);

/* What a finished command printed: never NULL ("" when there was nothing). */
const char *stdout_of(const sbx_exec_result *r);
const char *stderr_of(const sbx_exec_result *r);

#endif
