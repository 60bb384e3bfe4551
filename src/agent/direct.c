/*
 * [direct] A shell-form command with no shell syntax, run without the shell.
 *
 * A string command runs as `SHELL -c COMMAND` (the reference's semantics;
 * bash when the box has it). For `pytest -q tests` the shell only splits
 * words, finds the program on PATH and execs it in its own place: that
 * costs a shell start per exec (~1.3 ms for bash, about what the whole
 * round trip costs otherwise). When a command is plain words, the agent
 * does those steps itself and gives the program what the shell would have
 * given it: the same argv, the same environment (the shell's own additions:
 * PWD for both, SHLVL and `_` for bash), the same process tree (bash and
 * dash exec a lone simple command in place), the same signals.
 *
 * Anything else goes to the shell, unchanged: quotes, escapes, expansions
 * ($, `, ~, globs, braces), operators and redirections, comments, several
 * lines, an assignment, a keyword or builtin (but true and false, which act
 * as the programs do), a shell whose additions are not known here (only
 * bash and dash are), an environment the shell would change otherwise
 * (names it drops or rewrites, BASH_ENV and the options variables), or an
 * unusual PWD or SHLVL. And whenever no program could be exec'd (not found,
 * not executable, a script without #!), the child execs the shell after
 * all, so the errors, their messages and exit codes (127, 126) are the
 * shell's own.
 */
#include "agent/agent.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static enum { SHELL_OTHER, SHELL_BASH, SHELL_DASH } shell_kind;

void direct_init(const char *shell_path)
{
    shell_kind = SHELL_OTHER;
    char *real = realpath(shell_path, NULL);
    if (!real)
        return;
    const char *base = strrchr(real, '/');
    base = base ? base + 1 : real;
    if (!strcmp(base, "bash"))
        shell_kind = SHELL_BASH;
    else if (!strcmp(base, "dash"))
        shell_kind = SHELL_DASH;
    free(real);
}

/* Keywords and builtins of bash and dash: these need the shell (true and false do not). */
static const char *const shell_words[] = {
    "!",       "[[",      "]]",       "{",        "}",        "case",     "coproc",  "do",
    "done",    "elif",    "else",     "esac",     "fi",       "for",      "function", "if",
    "in",      "select",  "then",     "time",     "until",    "while",    ".",       ":",
    "[",       "alias",   "bg",       "bind",     "break",    "builtin",  "caller",  "cd",
    "chdir",   "command", "compgen",  "complete", "compopt",  "continue", "declare", "dirs",
    "disown",  "echo",    "enable",   "eval",     "exec",     "exit",     "export",  "fc",
    "fg",      "getopts", "hash",     "help",     "history",  "jobs",     "kill",    "let",
    "local",   "logout",  "mapfile",  "popd",     "printf",   "pushd",    "pwd",     "read",
    "readarray", "readonly", "return", "set",     "shift",    "shopt",    "source",  "suspend",
    "test",    "times",   "trap",     "type",     "typeset",  "ulimit",   "umask",   "unalias",
    "unset",   "wait",
};

/* A character the shell takes literally in an unquoted word. */
static bool plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_-./:,@%+=^", c) != NULL;
}

static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

/* A PWD the shell keeps as it is when it names the working directory: absolute, no . or .. */
static bool canonical_dir(const char *p)
{
    if (p[0] != '/' || strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../"))
        return false;
    size_t n = strlen(p);
    if (n > 1 && p[n - 1] == '/')
        return false;
    return !(n >= 2 && !strcmp(p + n - 2, "/.")) && !(n >= 3 && !strcmp(p + n - 3, "/.."));
}

int direct_words(const char *cmd, char ***argv_out)
{
    *argv_out = NULL;
    size_t len = strlen(cmd), words = 0;
    if (len == 0 || len > 65536)
        return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)cmd[i];
        if (c == ' ' || c == '\t')
            continue;
        if (!plain(c))
            return -1;
        if (i == 0 || cmd[i - 1] == ' ' || cmd[i - 1] == '\t')
            words++;
    }
    if (words == 0)
        return -1;
    /* One block: the pointers, then a copy of the words. */
    char **argv = malloc((words + 1) * sizeof(char *) + len + 1);
    if (!argv)
        return -2;
    char *text = (char *)(argv + words + 1);
    memcpy(text, cmd, len + 1);
    size_t n = 0;
    for (char *p = text; *p;) {
        while (*p == ' ' || *p == '\t')
            *p++ = 0;
        if (!*p)
            break;
        argv[n++] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
    }
    argv[n] = NULL;
    bool shell = strchr(argv[0], '=') != NULL; /* an assignment */
    for (size_t i = 0; !shell && i < sizeof(shell_words) / sizeof(shell_words[0]); i++)
        shell = !strcmp(argv[0], shell_words[i]);
    if (shell) {
        free(argv);
        return -1;
    }
    *argv_out = argv;
    return 0;
}

int direct_plan(const char *cmd, char *const *envp, struct direct *d)
{
    memset(d, 0, sizeof(*d));
    d->pwd_slot = d->under_slot = -1;
    if (shell_kind == SHELL_OTHER)
        return -1;
    size_t n = 0;
    const char *shlvl = NULL;
    for (; envp[n]; n++) {
        const char *eq = strchr(envp[n], '=');
        size_t nl = eq ? (size_t)(eq - envp[n]) : 0;
        /* A name the shell drops or rewrites, or one that changes what it runs. */
        if (!eq || !valid_name(envp[n], nl) || !strncmp(envp[n], "BASH_FUNC_", 10) ||
            (nl == 8 && !strncmp(envp[n], "BASH_ENV", 8)) ||
            (nl == 3 && !strncmp(envp[n], "ENV", 3)) ||
            (nl == 9 && !strncmp(envp[n], "SHELLOPTS", 9)) ||
            (nl == 8 && !strncmp(envp[n], "BASHOPTS", 8)) ||
            (nl == 15 && !strncmp(envp[n], "POSIXLY_CORRECT", 15)))
            return -1;
        if (nl == 3 && !strncmp(envp[n], "PWD", 3)) {
            if (!canonical_dir(eq + 1))
                return -1;
            d->pwd_given = eq + 1;
        }
        if (nl == 5 && !strncmp(envp[n], "SHLVL", 5))
            shlvl = eq + 1;
    }
    /* bash adds one to SHLVL and takes it back to exec in place: a plain 0..998 stays. */
    if (shell_kind == SHELL_BASH && shlvl &&
        (!*shlvl || strlen(shlvl) > 3 || strspn(shlvl, "0123456789") != strlen(shlvl) ||
         atoi(shlvl) > 998))
        return -1;
    int rc = direct_words(cmd, &d->argv);
    if (rc < 0)
        return rc;
    d->envp = calloc(n + 4, sizeof(char *));
    if (!d->envp) {
        direct_free(d);
        return -2;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strncmp(envp[i], "PWD=", 4) || (shell_kind == SHELL_BASH && !strncmp(envp[i], "_=", 2)))
            continue;
        d->envp[k++] = envp[i];
    }
    if (shell_kind == SHELL_BASH && !shlvl)
        d->envp[k++] = (char *)"SHLVL=0";
    d->pwd_slot = (int)k++;
    if (shell_kind == SHELL_BASH)
        d->under_slot = (int)k++;
    d->envp[k] = NULL;
    return 0;
}

void direct_free(struct direct *d)
{
    free(d->argv);
    free(d->envp);
    d->argv = NULL;
    d->envp = NULL;
}

/*
 * In the child, after chdir and the user switch: async-signal-safe (no
 * allocation: the slots point at this frame's buffers). Returns only when
 * no program could be exec'd; the caller then runs the shell.
 */
void direct_exec(struct direct *d, char *const *envp_for_path)
{
    char pwd[PATH_MAX + 8] = "PWD=";
    struct stat a, b;
    if (d->pwd_given && stat(d->pwd_given, &a) == 0 && stat(".", &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino && strlen(d->pwd_given) < PATH_MAX)
        memcpy(pwd + 4, d->pwd_given, strlen(d->pwd_given) + 1);
    else if (!getcwd(pwd + 4, PATH_MAX))
        return;
    d->envp[d->pwd_slot] = pwd;
    char under[PATH_MAX + 8] = "_=";
    const char *name = d->argv[0];
    size_t nl = strlen(name);
    if (strchr(name, '/')) {
        if (nl + 3 > sizeof(under))
            return;
        memcpy(under + 2, name, nl + 1);
        if (d->under_slot >= 0)
            d->envp[d->under_slot] = under;
        execve(name, d->argv, d->envp);
        return;
    }
    const char *path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for (char *const *e = envp_for_path; *e; e++)
        if (!strncmp(*e, "PATH=", 5))
            path = *e + 5;
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t dl = colon ? (size_t)(colon - p) : strlen(p);
        const char *dir = dl ? p : ".";
        size_t dlen = dl ? dl : 1;
        if (dlen + nl + 4 <= sizeof(under)) {
            memcpy(under + 2, dir, dlen);
            under[2 + dlen] = '/';
            memcpy(under + 3 + dlen, name, nl + 1);
            if (d->under_slot >= 0)
                d->envp[d->under_slot] = under;
            execve(under + 2, d->argv, d->envp);
            /*
             * Only a missing or non-executable file sends the search on, as
             * the shell's does; any other failure (a script without #!,
             * say) is the shell's to handle, from its own search.
             */
            if (errno != ENOENT && errno != ENOTDIR && errno != EACCES)
                return;
        }
        if (!colon)
            return;
        p = colon + 1;
    }
}
