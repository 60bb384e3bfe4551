/*
 * The Sbxfile parser (sbxfile.h). Its input is a user's file, possibly
 * someone else's: bounded in size, line length and steps, NUL refused,
 * every error naming the line it is about.
 */
#include "image/sbxfile.h"

#include <ctype.h>

static const char *const keywords[] = {
    [SBXF_FROM] = "FROM",
    [SBXF_RUN] = "RUN",
    [SBXF_ENV] = "ENV",
    [SBXF_WORKDIR] = "WORKDIR",
    [SBXF_COPY] = "COPY",
    [SBXF_USER] = "USER",
    [SBXF_ENTRYPOINT] = "ENTRYPOINT",
    [SBXF_CMD] = "CMD",
};

/* Dockerfile instructions sbx knows but does not run: said so by name. */
static const char *const unsupported[] = {
    "ADD",        "ARG",         "EXPOSE", "LABEL",   "VOLUME",
    "STOPSIGNAL", "HEALTHCHECK", "SHELL",  "ONBUILD", "MAINTAINER",
};

const char *sbx__sbxfile_keyword(enum sbx_sbxfile_kind k)
{
    return (size_t)k < SBX_ARRAY_SIZE(keywords) ? keywords[k] : "?";
}

static void free_words(char **w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(w[i]);
    free(w);
}

void sbx__sbxfile_free(sbx_sbxfile *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->steps[i].text);
        free(f->steps[i].args);
        free_words(f->steps[i].words, f->steps[i].nwords);
    }
    free(f->steps);
    free(f);
}

/* A JSON array of strings -> words; false when `a` is not one. */
static bool json_words(const char *a, char ***out, size_t *n)
{
    json_error_t je;
    json_t *j = json_loads(a, JSON_REJECT_DUPLICATES, &je);
    bool ok = json_is_array(j) && json_array_size(j) > 0 && json_array_size(j) <= 4096;
    size_t i;
    json_t *s;
    json_array_foreach(j, i, s) ok =
        ok && json_is_string(s) && strlen(json_string_value(s)) == json_string_length(s);
    char **w = ok ? calloc(json_array_size(j), sizeof(*w)) : NULL;
    if (!w) {
        json_decref(j);
        return false;
    }
    json_array_foreach(j, i, s) w[i] = strdup(json_string_value(s));
    *n = json_array_size(j);
    for (i = 0; i < *n; i++)
        ok = ok && w[i];
    json_decref(j);
    if (!ok) {
        free_words(w, *n);
        return false;
    }
    *out = w;
    return true;
}

/* Whitespace-separated words (no quoting). */
static bool split_words(const char *a, char ***out, size_t *n)
{
    char **w = NULL;
    size_t k = 0;
    while (*a) {
        while (*a && isspace((unsigned char)*a))
            a++;
        if (!*a)
            break;
        size_t l = strcspn(a, " \t\r\n\v\f");
        char **nw = k < 4096 ? realloc(w, (k + 1) * sizeof(*w)) : NULL;
        if (!nw || !(nw[k] = strndup(a, l))) {
            free_words(nw ? nw : w, k);
            return false;
        }
        w = nw;
        k++;
        a += l;
    }
    *out = w;
    *n = k;
    return true;
}

static bool has_dotdot(const char *p)
{
    for (const char *c = p; *c;) {
        size_t l = strcspn(c, "/");
        if (l == 2 && c[0] == '.' && c[1] == '.')
            return true;
        c += l;
        while (*c == '/')
            c++;
    }
    return false;
}

/* Checks one instruction's arguments; fills words. */
static int check_step(sbx_sbxfile_step *s, size_t index, sbx_error **err)
{
    const char *a = s->args;
    const char *kw = keywords[s->kind];
    if (!*a)
        return sbx__set_error(err, SBX_EINVAL, "line %u: %s needs arguments", s->line, kw);
    switch (s->kind) {
    case SBXF_FROM:
        if (index != 0)
            return sbx__set_error(err, SBX_EINVAL,
                                  "line %u: a second FROM: multi-stage builds are not supported",
                                  s->line);
        if (strpbrk(a, " \t"))
            return sbx__set_error(err, SBX_EINVAL,
                                  "line %u: FROM takes one image name (FROM ... AS and "
                                  "--platform are not supported)",
                                  s->line);
        return SBX_OK;
    case SBXF_RUN:
    case SBXF_ENTRYPOINT:
    case SBXF_CMD:
        if (a[0] == '[' && !json_words(a, &s->words, &s->nwords))
            return sbx__set_error(err, SBX_EINVAL,
                                  "line %u: %s's exec form must be a JSON array of strings, as "
                                  "[\"/bin/app\", \"--flag\"]",
                                  s->line, kw);
        if (s->kind == SBXF_RUN && a[0] == '-' && a[1] == '-')
            return sbx__set_error(err, SBX_EINVAL,
                                  "line %u: RUN options (%.40s) are not "
                                  "supported",
                                  s->line, a);
        return SBX_OK;
    case SBXF_ENV: {
        const char *eq = strchr(a, '=');
        const char *sp = a + strcspn(a, " \t");
        if (eq == a || (!eq && !*sp))
            return sbx__set_error(err, SBX_EINVAL, "line %u: ENV needs KEY=VALUE", s->line);
        if (eq && (!*sp || eq < sp)) {
            char **w = NULL;
            size_t n = 0;
            if (!split_words(a, &w, &n))
                return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            for (size_t i = 0; i < n; i++) {
                char *e = strchr(w[i], '=');
                if (!e || e == w[i] || strchr(w[i], '"') || strchr(w[i], '\'')) {
                    int rc = sbx__set_error(err, SBX_EINVAL,
                                            "line %u: ENV %s: give KEY=VALUE words without "
                                            "quotes or spaces",
                                            s->line, w[i]);
                    free_words(w, n);
                    return rc;
                }
            }
            free_words(w, n);
        }
        return SBX_OK;
    }
    case SBXF_WORKDIR:
        return SBX_OK;
    case SBXF_USER:
        if (strpbrk(a, " \t/"))
            return sbx__set_error(err, SBX_EINVAL,
                                  "line %u: USER takes one user (NAME, UID or "
                                  "UID:GID)",
                                  s->line);
        return SBX_OK;
    case SBXF_COPY: {
        if (a[0] == '-' && a[1] == '-')
            return sbx__set_error(err, SBX_EINVAL,
                                  "line %u: COPY options (--from, --chown, ...) are not "
                                  "supported",
                                  s->line);
        bool ok = a[0] == '[' ? json_words(a, &s->words, &s->nwords)
                              : split_words(a, &s->words, &s->nwords);
        if (!ok || s->nwords < 2)
            return sbx__set_error(err, SBX_EINVAL,
                                  "line %u: COPY needs SOURCE... DEST (or [\"SOURCE\", ..., "
                                  "\"DEST\"])",
                                  s->line);
        for (size_t i = 0; i + 1 < s->nwords; i++) {
            if (has_dotdot(s->words[i]) || !*s->words[i])
                return sbx__set_error(err, SBX_EINVAL,
                                      "line %u: COPY source %s leaves the build context "
                                      "('..'): sources are paths inside it",
                                      s->line, s->words[i]);
            if (strpbrk(s->words[i], "*?["))
                return sbx__set_error(err, SBX_EINVAL,
                                      "line %u: COPY source %s: wildcards are not supported",
                                      s->line, s->words[i]);
        }
        return SBX_OK;
    }
    }
    return SBX_OK;
}

int sbx__sbxfile_parse(const char *text, size_t len, sbx_sbxfile **out, sbx_error **err)
{
    *out = NULL;
    if (len > SBX_SBXFILE_MAX_BYTES)
        return sbx__set_error(err, SBX_EINVAL, "the Sbxfile is larger than %u bytes",
                              SBX_SBXFILE_MAX_BYTES);
    if (memchr(text, 0, len))
        return sbx__set_error(err, SBX_EINVAL, "the Sbxfile holds a NUL byte: not a text file");
    sbx_sbxfile *f = calloc(1, sizeof(*f));
    char *cur = malloc(SBX_SBXFILE_MAX_LINE + 1);
    if (!f || !cur) {
        free(f);
        free(cur);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    size_t cl = 0;
    unsigned line = 0, start = 0;
    bool in_cont = false; /* the previous line ended with '\' */
    int rc = SBX_OK;
    size_t pos = 0;
    while (rc == SBX_OK && pos <= len) {
        if (pos == len && cl == 0)
            break;
        /* One physical line. */
        const char *p = text + pos;
        const char *nl = pos < len ? memchr(p, '\n', len - pos) : NULL;
        size_t l = nl ? (size_t)(nl - p) : len - pos;
        pos += l + 1;
        line++;
        if (l && p[l - 1] == '\r')
            l--;
        size_t b = 0;
        while (b < l && isspace((unsigned char)p[b]))
            b++;
        /* A comment line, also inside a continuation (as Docker). */
        if (b < l && p[b] == '#')
            continue;
        if (b == l && cl == 0 && !in_cont)
            continue;
        size_t e = l;
        while (e > b && isspace((unsigned char)p[e - 1]))
            e--;
        bool cont = e > b && p[e - 1] == '\\';
        if (cont)
            e--;
        if (!in_cont)
            start = line;
        in_cont = cont;
        if (cl + (e - b) + 1 > SBX_SBXFILE_MAX_LINE) {
            rc = sbx__set_error(err, SBX_EINVAL,
                                "line %u: the instruction is longer than %d "
                                "bytes",
                                start, SBX_SBXFILE_MAX_LINE);
            break;
        }
        if (cl && e > b)
            cur[cl++] = ' ';
        memcpy(cur + cl, p + b, e - b);
        cl += e - b;
        cur[cl] = 0;
        if (cont && pos <= len)
            continue;
        if (cont && pos > len && cl == 0)
            break;
        /* A whole instruction in cur. */
        size_t kl = strcspn(cur, " \t");
        if (!cl)
            continue;
        char kw[16];
        if (kl >= sizeof(kw)) {
            rc = sbx__set_error(err, SBX_EINVAL, "line %u: unknown instruction %.40s", start, cur);
            break;
        }
        for (size_t i = 0; i < kl; i++)
            kw[i] = (char)toupper((unsigned char)cur[i]);
        kw[kl] = 0;
        int kind = -1;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(keywords); i++)
            if (!strcmp(kw, keywords[i]))
                kind = (int)i;
        if (kind < 0) {
            bool known = false;
            for (size_t i = 0; i < SBX_ARRAY_SIZE(unsupported); i++)
                known |= !strcmp(kw, unsupported[i]);
            rc = known ? sbx__set_error(err, SBX_EINVAL,
                                        "line %u: %s is not supported by sbx image build (it "
                                        "runs FROM, RUN, ENV, WORKDIR, COPY, USER, ENTRYPOINT "
                                        "and CMD)",
                                        start, kw)
                       : sbx__set_error(err, SBX_EINVAL,
                                        "line %u: unknown instruction %.40s (expected FROM, RUN, "
                                        "ENV, WORKDIR, COPY, USER, ENTRYPOINT or CMD)",
                                        start, kw);
            break;
        }
        if (f->n == 0 && kind != SBXF_FROM) {
            rc = sbx__set_error(err, SBX_EINVAL,
                                "line %u: the first instruction must be FROM, "
                                "not %s",
                                start, kw);
            break;
        }
        if (f->n >= SBX_SBXFILE_MAX_STEPS) {
            rc = sbx__set_error(err, SBX_EINVAL, "line %u: more than %d instructions", start,
                                SBX_SBXFILE_MAX_STEPS);
            break;
        }
        sbx_sbxfile_step *ns = realloc(f->steps, (f->n + 1) * sizeof(*ns));
        if (!ns) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            break;
        }
        f->steps = ns;
        sbx_sbxfile_step *s = &f->steps[f->n++];
        memset(s, 0, sizeof(*s));
        s->kind = (enum sbx_sbxfile_kind)kind;
        s->line = start;
        const char *a = cur + kl;
        while (*a && isspace((unsigned char)*a))
            a++;
        s->args = strdup(a);
        s->text = sbx__printf("%s %s", kw, a);
        if (!s->args || !s->text) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            break;
        }
        rc = check_step(s, f->n - 1, err);
        cl = 0;
    }
    free(cur);
    if (rc == SBX_OK && f->n == 0)
        rc = sbx__set_error(err, SBX_EINVAL,
                            "the Sbxfile has no instructions (start with FROM "
                            "IMAGE)");
    if (rc < 0) {
        sbx__sbxfile_free(f);
        return rc;
    }
    *out = f;
    return SBX_OK;
}

/* --- changes (docker commit --change, and the build's config steps) ------ */

#define MAX_CHANGE 65536

/* "[\"a\", \"b\"]" (exec form) or a shell command -> an array of strings. */
static json_t *command_of(const char *v, const char *what, sbx_error **err)
{
    while (*v == ' ' || *v == '\t')
        v++;
    if (*v == '[') {
        json_error_t je;
        json_t *a = json_loads(v, JSON_REJECT_DUPLICATES, &je);
        bool ok = json_is_array(a);
        size_t i;
        json_t *s;
        json_array_foreach(a, i, s) ok = ok && json_is_string(s);
        if (!ok) {
            json_decref(a);
            sbx__set_error(err, SBX_EINVAL,
                           "%s %s: the exec form must be a JSON array of strings, as "
                           "[\"/bin/app\", \"--flag\"]",
                           what, v);
            return NULL;
        }
        return a;
    }
    if (!*v) {
        sbx__set_error(err, SBX_EINVAL, "%s needs a command", what);
        return NULL;
    }
    json_t *a = json_pack("[s, s, s]", "/bin/sh", "-c", v);
    if (!a)
        sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return a;
}

/*
 * Applies one Dockerfile-style instruction (ENV, WORKDIR, USER, ENTRYPOINT,
 * CMD) to an image config's "config" object `cfg`.
 */
int sbx__image_apply_change(json_t *cfg, const char *line, sbx_error **err)
{
    if (!line || strlen(line) > MAX_CHANGE)
        return sbx__set_error(err, SBX_EINVAL, "a change must be at most %d bytes", MAX_CHANGE);
    /* An image config is JSON: its strings are UTF-8. */
    json_t *utf8 = json_string(line);
    if (!utf8)
        return sbx__set_error(err, SBX_EINVAL, "a change must be valid UTF-8 text");
    json_decref(utf8);
    while (*line == ' ' || *line == '\t')
        line++;
    size_t kl = strcspn(line, " \t");
    char key[16];
    if (kl == 0 || kl >= sizeof(key))
        return sbx__set_error(err, SBX_EINVAL,
                              "bad change '%s': give INSTRUCTION ARGS with ENV, WORKDIR, USER, "
                              "ENTRYPOINT or CMD",
                              line);
    for (size_t i = 0; i < kl; i++)
        key[i] = (char)toupper((unsigned char)line[i]);
    key[kl] = 0;
    const char *v = line + kl;
    while (*v == ' ' || *v == '\t')
        v++;
    if (!strcmp(key, "ENV")) {
        /* ENV K=V [K2=V2 ...] (no quotes) or the old form ENV K V. */
        json_t *env = json_object_get(cfg, "Env");
        if (!json_is_array(env)) {
            env = json_array();
            json_object_set_new(cfg, "Env", env);
        }
        _cleanup_free_ char *copy = strdup(v);
        if (!copy)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        char *eq = strchr(copy, '=');
        char *sp = copy + strcspn(copy, " \t");
        bool old_form = !eq || (*sp && sp < eq);
        char *pairs[256];
        size_t np = 0;
        _cleanup_free_ char *joined = NULL;
        if (old_form) {
            if (!*sp)
                return sbx__set_error(err, SBX_EINVAL, "ENV %s: give ENV KEY=VALUE", v);
            *sp = 0;
            char *val = sp + 1;
            while (*val == ' ' || *val == '\t')
                val++;
            joined = sbx__printf("%s=%s", copy, val);
            if (!joined)
                return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            pairs[np++] = joined;
        } else {
            for (char *save = NULL, *t = strtok_r(copy, " \t", &save); t;
                 t = strtok_r(NULL, " \t", &save)) {
                if (np == SBX_ARRAY_SIZE(pairs))
                    return sbx__set_error(err, SBX_EINVAL, "ENV: at most 256 variables a line");
                pairs[np++] = t;
            }
        }
        for (size_t k = 0; k < np; k++) {
            char *e = strchr(pairs[k], '=');
            if (!e || e == pairs[k])
                return sbx__set_error(err, SBX_EINVAL, "ENV %s: '%s' is not KEY=VALUE", v,
                                      pairs[k]);
            size_t n = (size_t)(e - pairs[k]) + 1;
            size_t i;
            json_t *s;
            bool set = false;
            json_array_foreach(env, i, s)
            {
                const char *t = json_string_value(s);
                if (t && !strncmp(t, pairs[k], n)) {
                    json_array_set_new(env, i, json_string(pairs[k]));
                    set = true;
                    break;
                }
            }
            if (!set)
                json_array_append_new(env, json_string(pairs[k]));
        }
        return SBX_OK;
    }
    if (!strcmp(key, "WORKDIR")) {
        if (!*v)
            return sbx__set_error(err, SBX_EINVAL, "WORKDIR needs a directory");
        const char *cur = json_string_value(json_object_get(cfg, "WorkingDir"));
        _cleanup_free_ char *wd =
            v[0] == '/' ? strdup(v) : sbx__printf("%s/%s", cur && *cur ? cur : "", v);
        if (!wd)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        json_object_set_new(cfg, "WorkingDir", json_string(wd));
        return SBX_OK;
    }
    if (!strcmp(key, "USER")) {
        if (!*v || strpbrk(v, "\n/ \t"))
            return sbx__set_error(err, SBX_EINVAL, "USER %s: give one user (NAME, UID or UID:GID)",
                                  v);
        json_object_set_new(cfg, "User", json_string(v));
        return SBX_OK;
    }
    if (!strcmp(key, "ENTRYPOINT") || !strcmp(key, "CMD")) {
        json_t *c = command_of(v, key, err);
        if (!c)
            return sbx_error_code(err ? *err : NULL) ? sbx_error_code(*err) : SBX_EINVAL;
        json_object_set_new(cfg, !strcmp(key, "CMD") ? "Cmd" : "Entrypoint", c);
        /* As Docker: a new ENTRYPOINT drops the image's CMD. */
        if (!strcmp(key, "ENTRYPOINT"))
            json_object_del(cfg, "Cmd");
        return SBX_OK;
    }
    return sbx__set_error(err, SBX_EINVAL,
                          "change '%s' is not supported: use ENV, WORKDIR, USER, ENTRYPOINT or "
                          "CMD",
                          key);
}
