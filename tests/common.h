/* Helpers shared by the C tests. */
#ifndef SBX_TESTS_COMMON_H
#define SBX_TESTS_COMMON_H

#include <stddef.h>

/* Called once per test process before the fd snapshot. */
void sbx_prime_library(void);
/* A test binary may define this (strong) to warm up more process-wide state. */
void sbx_prime_hook(void);
/* Threads this process has now, as /proc/self/task lists them. */
int tap_thread_count(void);
/* Entries of directory `path` other than . and ..; -1 if it cannot be read. */
int count_dir_entries(const char *path);
int rm_rf(const char *path);
char *read_text(const char *path);
/* Reads `fd` until `text` appeared (malloc'd, all read so far); fails the test
 * when it does not within `deadline_s` or the fd ends first. */
char *read_fd_until(int fd, const char *text, int deadline_s);
int write_text(const char *path, const char *text);
/* Runs `sh -c CMD`, capturing stdout+stderr into out; returns the exit status. */
int run_cmd(char *out, size_t out_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
