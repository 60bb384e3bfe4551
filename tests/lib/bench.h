/*
 * What the benchmarks share (tests/lib/bench.c): a monotonic clock,
 * percentiles, the fork+exec baseline every exec is compared with, a row
 * printer, a way out that cleans up, and the spec of every box a bench
 * makes: one that dies with the bench.
 */
#ifndef SBX_TESTS_LIB_BENCH_H
#define SBX_TESTS_LIB_BENCH_H

#include <sbx.h>

/* What every bench uses beside these. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Seconds on the monotonic clock. */
double bench_now(void);
/* Milliseconds on the monotonic clock. */
double bench_now_ms(void);
/* The p-th percentile (0..100) of v[0..n), nearest rank; sorts v. NAN when n is 0. */
double bench_pct(double *v, int n, double p);
/* One fork+exec+wait of /bin/true: the floor every exec is compared with (seconds). */
double bench_fork_exec_true(void);
/* `what  p50 .. ms  p99 .. ms  N x fork+exec` (seconds in). */
void bench_row(const char *what, double p50, double p99, double base_p50);

/*
 * A spec for a bench's box: provider_options `options` (a JSON object, NULL
 * for none) plus die_with_creator, so a bench that dies — die(), a signal,
 * a crash, SIGKILL — leaves no linux box running (the shim tears the box
 * down when the bench's end of its control socket closes). Providers that
 * do not know the option (local) ignore it; for them a TTL
 * (BENCH_BOX_TTL_S) is the backstop that `sbx gc` collects by. Exits
 * through bench_die() when the spec cannot be made.
 */
#define BENCH_BOX_TTL_S 1800.0
sbx_spec *bench_spec(const char *options);

/* Runs `fn` on bench_die() (last registered first; at most 8). */
void bench_on_die(void (*fn)(void));
/* Prints "NAME: message" on stderr, runs the bench_on_die() hooks, exits 1. */
__attribute__((noreturn, format(printf, 1, 2))) void bench_die(const char *fmt, ...);
/* bench_die() saying what failed and why: e's message ("failed" when e is NULL). */
__attribute__((noreturn)) void bench_die_err(const char *what, const sbx_error *e);

/*
 * A private state directory for the bench's boxes (/tmp/sbx-bench-XXXXXX):
 * SBX_STATE_DIR points at it, and bench_die() removes it, as
 * bench_state_end() does at a good end. Its path (static).
 */
const char *bench_state_dir(void);
void bench_state_end(void);

/*
 * fork() for a helper process of the bench (a server): the child dies with
 * the bench (PR_SET_PDEATHSIG), and bench_die() kills and reaps it, as
 * bench_child_end() does at a good end. 0 in the child.
 */
pid_t bench_child(void);
void bench_child_end(pid_t pid);

/*
 * Runs `sh -c cmd` once the bench has ended, however it ended: exit,
 * bench_die(), a signal, SIGKILL. A helper started now, in a session of its
 * own, waits for the end of a pipe only the bench holds. For what the bench
 * leaves outside its own processes and boxes (another engine's containers).
 */
void bench_at_end(const char *cmd);

/* The download server's side: reads "<bytes>\n" from fd and writes that many zero bytes. */
void bench_send_zeros(int fd);
/* Reads fd to its end and closes it; the bytes read. */
unsigned long long bench_drain(int fd);

#endif
