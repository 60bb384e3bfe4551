/*
 * Users and groups, looked up in the box's own /etc/passwd and /etc/group
 * (read inside the root). No getpwnam: the agent is static and must not load
 * NSS modules, and the host's user database is not the box's.
 */
#include "agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DB (16u << 20)

/* Reads a whole file from inside the root, NUL-terminated. NULL when missing. */
static char *read_db(const char *path)
{
    int fd = root_open(path, O_RDONLY, 0);
    if (fd < 0)
        return NULL;
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1 >= cap) {
            if (cap >= MAX_DB)
                break;
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (buf)
        buf[len] = 0;
    return buf;
}

/* Splits a colon-separated line in place into at most `max` fields. */
static int split(char *line, char **f, int max)
{
    int n = 0;
    f[n++] = line;
    for (char *p = line; *p && n < max; p++) {
        if (*p == ':') {
            *p = 0;
            f[n++] = p + 1;
        }
    }
    return n;
}

static bool parse_id(const char *s, unsigned long *out)
{
    if (!*s)
        return false;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > 0xfffffffeUL || s[0] == '-' || s[0] == '+' || s[0] == ' ')
        return false;
    *out = v;
    return true;
}

/* Iterates the lines of a database; `fn` returns true to stop. */
static void each_line(char *db, bool (*fn)(char **f, int n, void *arg), void *arg, int fields)
{
    for (char *line = db; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        char *f[8];
        if (line[0] && line[0] != '#') {
            int n = split(line, f, fields);
            if (n == fields && fn(f, n, arg))
                return;
        }
        line = nl ? nl + 1 : NULL;
    }
}

struct pw_query {
    const char *name;  /* match by name, or */
    unsigned long uid; /* by uid when name is NULL */
    bool found;
    unsigned long r_uid, r_gid;
    char *r_name, *r_home;
};

static bool pw_match(char **f, int n, void *arg)
{
    (void)n;
    struct pw_query *q = arg;
    unsigned long uid, gid;
    if (!parse_id(f[2], &uid) || !parse_id(f[3], &gid))
        return false;
    if (q->name ? strcmp(f[0], q->name) != 0 : uid != q->uid)
        return false;
    q->found = true;
    q->r_uid = uid;
    q->r_gid = gid;
    q->r_name = strdup(f[0]);
    q->r_home = strdup(f[5]);
    return true;
}

struct gr_query {
    const char *name; /* a group name to resolve */
    bool found;
    unsigned long gid;
    /* Membership collection. */
    const char *member;
    gid_t *groups;
    size_t n, cap;
};

static bool gr_match(char **f, int n, void *arg)
{
    (void)n;
    struct gr_query *q = arg;
    unsigned long gid;
    if (!parse_id(f[2], &gid))
        return false;
    if (q->name) {
        if (strcmp(f[0], q->name) != 0)
            return false;
        q->found = true;
        q->gid = gid;
        return true;
    }
    /* Members are a comma list in the 4th field. */
    for (char *m = f[3]; m && *m;) {
        char *comma = strchr(m, ',');
        size_t len = comma ? (size_t)(comma - m) : strlen(m);
        if (len == strlen(q->member) && strncmp(m, q->member, len) == 0) {
            if (q->n == q->cap) {
                size_t cap = q->cap ? q->cap * 2 : 8;
                gid_t *ng = realloc(q->groups, cap * sizeof(gid_t));
                if (!ng)
                    return true;
                q->groups = ng;
                q->cap = cap;
            }
            q->groups[q->n++] = (gid_t)gid;
            break;
        }
        m = comma ? comma + 1 : NULL;
    }
    return false;
}

int users_resolve(const char *spec, struct user_ids *out, char *msg, size_t msg_len)
{
    memset(out, 0, sizeof(*out));
    char *copy = strdup(spec);
    if (!copy) {
        snprintf(msg, msg_len, "out of memory");
        return -1;
    }
    char *group = strchr(copy, ':');
    if (group)
        *group++ = 0;
    char *passwd = read_db("/etc/passwd");
    char *groupdb = read_db("/etc/group");
    int rc = -1;
    unsigned long num;
    struct pw_query pq = {0};
    if (parse_id(copy, &num)) {
        pq.uid = num;
    } else {
        pq.name = copy;
    }
    if (passwd)
        each_line(passwd, pw_match, &pq, 7);
    if (!pq.found && pq.name) {
        snprintf(msg, msg_len, "unable to find user %s: no matching entries in /etc/passwd", copy);
        goto out;
    }
    /* A numeric uid without an entry still works, with gid 0 and home "/", as in Docker. */
    out->uid = (uid_t)(pq.found ? pq.r_uid : pq.uid);
    out->gid = (gid_t)(pq.found ? pq.r_gid : 0);
    out->name = pq.r_name;
    out->home = pq.r_home ? pq.r_home : strdup("/");
    pq.r_name = pq.r_home = NULL;
    if (group && *group) {
        if (parse_id(group, &num)) {
            out->gid = (gid_t)num;
        } else {
            struct gr_query gq = {.name = group};
            if (groupdb) {
                /* each_line writes NULs into the buffer: parse a fresh copy. */
                char *g2 = strdup(groupdb);
                if (g2)
                    each_line(g2, gr_match, &gq, 4);
                free(g2);
            }
            if (!gq.found) {
                snprintf(msg, msg_len, "unable to find group %s: no matching entries in /etc/group",
                         group);
                goto out;
            }
            out->gid = (gid_t)gq.gid;
        }
    }
    /* Supplementary groups: the primary gid plus every group listing the user by name. */
    struct gr_query mq = {.member = out->name};
    if (out->name && !(group && *group) && groupdb)
        each_line(groupdb, gr_match, &mq, 4);
    out->groups = malloc((mq.n + 1) * sizeof(gid_t));
    if (!out->groups) {
        free(mq.groups);
        snprintf(msg, msg_len, "out of memory");
        goto out;
    }
    out->groups[0] = out->gid;
    out->n_groups = 1;
    for (size_t i = 0; i < mq.n; i++)
        if (mq.groups[i] != out->gid)
            out->groups[out->n_groups++] = mq.groups[i];
    free(mq.groups);
    if (!out->home) {
        snprintf(msg, msg_len, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(pq.r_name);
    free(pq.r_home);
    free(passwd);
    free(groupdb);
    free(copy);
    if (rc < 0)
        users_free(out);
    return rc;
}

void users_free(struct user_ids *u)
{
    free(u->groups);
    free(u->name);
    free(u->home);
    memset(u, 0, sizeof(*u));
}
