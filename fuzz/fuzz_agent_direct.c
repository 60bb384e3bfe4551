/*
 * libFuzzer target for the agent's direct-exec decision (src/agent/direct.c):
 * the bytes are a shell-form command, as a host sends it. A command the
 * agent takes as plain words must hold only characters the shell takes
 * literally, split into the same words the shell would make (checked here
 * against a plain re-split), and never be a keyword, builtin or assignment;
 * anything else must be left to the shell. Never a crash or a leak.
 */
#include "agent/agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *cmd = malloc(size + 1);
    if (!cmd)
        return 0;
    memcpy(cmd, data, size);
    cmd[size] = 0;
    char **argv = NULL;
    if (direct_words(cmd, &argv) == 0) {
        /* Every byte up to the NUL is a word character or a blank. */
        for (const char *p = cmd; *p; p++)
            if (!strchr(" \t_-./:,@%+=^", *p) && !((*p >= 'a' && *p <= 'z') ||
                                                  (*p >= 'A' && *p <= 'Z') ||
                                                  (*p >= '0' && *p <= '9')))
                abort();
        /* The words, joined by one space, are the command with its blanks squeezed. */
        size_t n = 0, at = 0;
        char *joined = malloc(strlen(cmd) + 2);
        for (; argv[n]; n++) {
            if (!*argv[n] || strpbrk(argv[n], " \t"))
                abort();
            at += (size_t)sprintf(joined + at, "%s%s", n ? " " : "", argv[n]);
        }
        char *squeezed = malloc(strlen(cmd) + 2);
        size_t k = 0;
        for (const char *p = cmd; *p;) {
            while (*p == ' ' || *p == '\t')
                p++;
            if (!*p)
                break;
            if (k)
                squeezed[k++] = ' ';
            while (*p && *p != ' ' && *p != '\t')
                squeezed[k++] = *p++;
        }
        squeezed[k] = 0;
        if (n == 0 || strcmp(joined, squeezed) || strchr(argv[0], '='))
            abort();
        free(joined);
        free(squeezed);
        free(argv);
    }
    free(cmd);
    return 0;
}
