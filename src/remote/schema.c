/*
 * The remote kit's config schema (include/sbx/schema.h): a provider's table
 * of field descriptors drives the parsing of its config, the checks and
 * their messages, a dump with the secrets hidden and a markdown table for
 * its docs page. docs/remote-kit/config-schema.md is the user's side.
 *
 * The config is outside input (a user's file, an environment), so nothing
 * from it reaches a message unbounded or unescaped, and nothing from a
 * secret field reaches one at all. The table is the provider's code: it is
 * checked on every call (a few dozen fields, cheaper than the JSON parse)
 * so a mistake in it is an error that names the field, never a write
 * outside the config struct.
 */
#include "core/internal.h"

#include <sbx/schema.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <strings.h>

/* What version 1 tables hold at least; later versions only append. */
#define FIELD_V1_SIZE (offsetof(sbx_schema_field, code) + sizeof(int))
#define SCHEMA_V1_SIZE (offsetof(sbx_schema, unknown_message) + sizeof(const char *))
/* Bounds on a table: a missing terminator or a cycle of sections is an error, not a hang. */
#define MAX_FIELDS 1024
#define MAX_DEPTH 8
/* Bytes of a key or a value from the input that a message shows. */
#define SHOW_MAX 64

#define ALL_FLAGS                                                                                  \
    (SBX_SCHEMA_REQUIRED | SBX_SCHEMA_NULLABLE | SBX_SCHEMA_SECRET | SBX_SCHEMA_HAS_MIN |          \
     SBX_SCHEMA_HAS_MAX | SBX_SCHEMA_MIN_EXCLUSIVE | SBX_SCHEMA_NONEMPTY |                         \
     SBX_SCHEMA_ABSOLUTE_PATH)

/*
 * A schema as this library reads it: the caller's table copied up to the
 * size it was built with, so members a smaller (older) table lacks read as
 * 0/NULL, and its fields stepped by the field size it was built with.
 */
struct view {
    sbx_schema s;
    const char *name; /* the provider's name: the top level's, in sections too */
    size_t n;         /* fields before the terminator */
};

static void field_at(const struct view *v, size_t i, sbx_schema_field *f)
{
    size_t size = v->s.field_size < sizeof(*f) ? v->s.field_size : sizeof(*f);
    memset(f, 0, sizeof(*f));
    memcpy(f, (const char *)v->s.fields + i * v->s.field_size, size);
}

static const char *field_key_at(const struct view *v, size_t i)
{
    const char *key;
    memcpy(&key, (const char *)v->s.fields + i * v->s.field_size, sizeof(key));
    return key;
}

/* --- messages ------------------------------------------------------------ */

/* Sets *err from the text in `b` (freed); out of memory when building it failed. */
static int fail_buf(sbx_error **err, int code, sbx_buf *b, int built)
{
    int rc = built < 0 || !b->data ? sbx__set_error(err, SBX_ENOMEM, "out of memory")
                                   : sbx__set_error(err, code, "%s", b->data);
    sbx__buf_free(b);
    return rc;
}

/*
 * Appends the first SHOW_MAX bytes of `s` with every byte that is not
 * printable ASCII escaped (and the quote, when `quote`), then "..." when it
 * was longer: a key or value from the input may hold control bytes that
 * would forge log lines, or megabytes.
 */
static int show(sbx_buf *b, const char *s, bool quote)
{
    size_t n = strnlen(s, SHOW_MAX + 1);
    size_t lim = n > SHOW_MAX ? SHOW_MAX : n;
    int rc = SBX_OK;
    for (size_t i = 0; i < lim && rc == SBX_OK; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || (quote && c == '\''))
            rc = sbx__buf_printf(b, "\\%c", c);
        else if (c == '\n')
            rc = sbx__buf_append(b, "\\n", 2);
        else if (c == '\t')
            rc = sbx__buf_append(b, "\\t", 2);
        else if (c == '\r')
            rc = sbx__buf_append(b, "\\r", 2);
        else if (c < 0x20 || c >= 0x7f)
            rc = sbx__buf_printf(b, "\\x%02x", c);
        else
            rc = sbx__buf_append(b, &s[i], 1);
    }
    if (rc == SBX_OK && n > lim)
        rc = sbx__buf_append(b, "...", 3);
    return rc;
}

/* The shortest text that reads back as `d` ("86400", "0.5", "1e+30"). */
static void fmt_num(double d, char *buf, size_t size)
{
    /* Whole numbers as people write them: %g would say 8.64e+04. */
    if (d == floor(d) && fabs(d) < 1e15) {
        snprintf(buf, size, "%.0f", d);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

static int bounds_text(sbx_buf *b, const char *lo, bool has_lo, bool lo_excl, const char *hi,
                       bool has_hi)
{
    if (has_lo && has_hi && !lo_excl)
        return sbx__buf_printf(b, " from %s to %s", lo, hi);
    if (has_lo && has_hi)
        return sbx__buf_printf(b, " > %s and <= %s", lo, hi);
    if (has_lo)
        return sbx__buf_printf(b, " %s %s", lo_excl ? ">" : ">=", lo);
    if (has_hi)
        return sbx__buf_printf(b, " <= %s", hi);
    return SBX_OK;
}

/* What a field must be, as messages and docs say it: "an integer from 1 to 64". */
static int describe_type(sbx_buf *b, const sbx_schema_field *f)
{
    if (f->what)
        return sbx__buf_printf(b, "%s", f->what);
    unsigned fl = f->flags;
    char lo[32], hi[32];
    int rc = SBX_OK;
    switch (f->type) {
    case SBX_SCHEMA_STRING:
        rc = sbx__buf_printf(b, "%s",
                             (fl & SBX_SCHEMA_ABSOLUTE_PATH) ? "an absolute path"
                             : (fl & SBX_SCHEMA_NONEMPTY)    ? "a non-empty string"
                                                             : "a string");
        break;
    case SBX_SCHEMA_BOOL:
        rc = sbx__buf_printf(b, "true or false");
        break;
    case SBX_SCHEMA_INT:
        snprintf(lo, sizeof(lo), "%lld", (long long)f->int_min);
        snprintf(hi, sizeof(hi), "%lld", (long long)f->int_max);
        rc = sbx__buf_printf(b, "an integer");
        if (rc == SBX_OK)
            rc = bounds_text(b, lo, fl & SBX_SCHEMA_HAS_MIN, false, hi, fl & SBX_SCHEMA_HAS_MAX);
        break;
    case SBX_SCHEMA_NUMBER:
    case SBX_SCHEMA_DURATION: {
        bool dur = f->type == SBX_SCHEMA_DURATION;
        /* A duration is never negative: its lower bound is 0 unless the table raises it. */
        bool has_lo = (fl & SBX_SCHEMA_HAS_MIN) || dur;
        fmt_num((fl & SBX_SCHEMA_HAS_MIN) ? f->num_min : 0, lo, sizeof(lo));
        fmt_num(f->num_max, hi, sizeof(hi));
        rc = sbx__buf_printf(b, "%s", dur ? "a number of seconds" : "a number");
        if (rc == SBX_OK)
            rc = bounds_text(b, lo, has_lo,
                             (fl & SBX_SCHEMA_HAS_MIN) && (fl & SBX_SCHEMA_MIN_EXCLUSIVE), hi,
                             fl & SBX_SCHEMA_HAS_MAX);
        if (rc == SBX_OK && dur)
            rc = sbx__buf_printf(b, ", or null for none");
        break;
    }
    case SBX_SCHEMA_LIST:
        rc = sbx__buf_printf(b, "a %slist of strings",
                             (fl & SBX_SCHEMA_NONEMPTY) ? "non-empty " : "");
        break;
    case SBX_SCHEMA_MAP:
        rc = sbx__buf_printf(b, "a %smapping of strings to strings",
                             (fl & SBX_SCHEMA_NONEMPTY) ? "non-empty " : "");
        break;
    case SBX_SCHEMA_ENUM:
        rc = sbx__buf_printf(b, "one of ");
        for (size_t i = 0; rc == SBX_OK && f->choices[i]; i++)
            rc = sbx__buf_printf(b, "%s'%s'", i ? ", " : "", f->choices[i]);
        break;
    case SBX_SCHEMA_JSON:
        rc = sbx__buf_printf(
            b, "%s", (fl & SBX_SCHEMA_NULLABLE) ? "any JSON value" : "a JSON value, not null");
        return rc;
    case SBX_SCHEMA_SECTION:
        return sbx__buf_printf(b, "a mapping");
    }
    if (rc == SBX_OK && (fl & SBX_SCHEMA_NULLABLE) && f->type != SBX_SCHEMA_DURATION)
        rc = sbx__buf_printf(b, ", or null");
    return rc;
}

/* A value seen, for "..., got X": numbers as they read, strings quoted and escaped. */
static int show_value(sbx_buf *b, const json_t *v)
{
    char num[32];
    if (json_is_integer(v))
        return sbx__buf_printf(b, "%lld", (long long)json_integer_value(v));
    if (json_is_real(v)) {
        fmt_num(json_real_value(v), num, sizeof(num));
        return sbx__buf_printf(b, "%s", num);
    }
    int rc = sbx__buf_append(b, "'", 1);
    if (rc == SBX_OK)
        rc = show(b, json_string_value(v), true);
    return rc == SBX_OK ? sbx__buf_append(b, "'", 1) : rc;
}

struct pctx {
    const char *name; /* the provider's, starting every message */
    sbx_error **err;
};

/*
 * "<name>: <key><note> must be <what>[, got <seen>]": `code` unless the
 * field sets its own. The value seen is left out for a secret field, and
 * when the table wrote its own words (they are the whole message).
 */
static int refuse(struct pctx *c, const sbx_schema_field *f, const char *key, const char *note,
                  int code, const json_t *seen)
{
    sbx_buf b = {0};
    int rc = sbx__buf_printf(&b, "%s: %s%s must be ", c->name, key, note);
    if (rc == SBX_OK)
        rc = describe_type(&b, f);
    if (rc == SBX_OK && seen && !f->what && !(f->flags & SBX_SCHEMA_SECRET)) {
        rc = sbx__buf_append(&b, ", got ", 6);
        if (rc == SBX_OK)
            rc = show_value(&b, seen);
    }
    return fail_buf(c->err, f->code ? f->code : code, &b, rc);
}

static int bad_schema(sbx_error **err, const char *name, const char *key, const char *why)
{
    sbx_buf b = {0};
    int rc = sbx__buf_printf(&b, "%s: invalid config schema: ", name ? name : "(unnamed)");
    if (rc == SBX_OK && key)
        rc = sbx__buf_printf(&b, "field '%s': ", key);
    if (rc == SBX_OK)
        rc = sbx__buf_printf(&b, "%s", why);
    return fail_buf(err, SBX_EINVAL, &b, rc);
}

/* --- the table ----------------------------------------------------------- */

static int open_view(const sbx_schema *s, const char *name, int depth, struct view *v,
                     sbx_error **err);

/* The bytes a field fills in the config struct. */
static size_t storage_size(const sbx_schema_field *f, const struct view *section)
{
    switch (f->type) {
    case SBX_SCHEMA_STRING:
    case SBX_SCHEMA_JSON:
        return sizeof(char *);
    case SBX_SCHEMA_LIST:
    case SBX_SCHEMA_MAP:
        return sizeof(char **);
    case SBX_SCHEMA_BOOL:
        return sizeof(bool);
    case SBX_SCHEMA_INT:
        return sizeof(int64_t);
    case SBX_SCHEMA_NUMBER:
    case SBX_SCHEMA_DURATION:
        return sizeof(double);
    case SBX_SCHEMA_ENUM:
        return sizeof(int);
    case SBX_SCHEMA_SECTION:
        return section ? section->s.config_size : 0;
    }
    return 0;
}

/* One field's own consistency; `size` gets what it fills. */
static int check_field(const struct view *v, const sbx_schema_field *f, int depth, size_t *size,
                       sbx_error **err)
{
    const char *nm = v->name;
    unsigned fl = f->flags;
    bool numeric = f->type == SBX_SCHEMA_NUMBER || f->type == SBX_SCHEMA_DURATION;
    if (!*f->key)
        return bad_schema(err, nm, NULL, "a field has an empty key");
    if (f->type < SBX_SCHEMA_STRING || f->type > SBX_SCHEMA_SECTION)
        return bad_schema(err, nm, f->key, "no such type (is .type set?)");
    if (fl & ~ALL_FLAGS)
        return bad_schema(err, nm, f->key, "flags this libsbx does not know");
    if ((fl & (SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX)) && f->type != SBX_SCHEMA_INT && !numeric)
        return bad_schema(err, nm, f->key, "bounds on a type that has none");
    if ((fl & SBX_SCHEMA_MIN_EXCLUSIVE) && (!numeric || !(fl & SBX_SCHEMA_HAS_MIN)))
        return bad_schema(err, nm, f->key, "MIN_EXCLUSIVE without a number's HAS_MIN");
    if ((fl & SBX_SCHEMA_NONEMPTY) && f->type != SBX_SCHEMA_STRING && f->type != SBX_SCHEMA_LIST &&
        f->type != SBX_SCHEMA_MAP)
        return bad_schema(err, nm, f->key, "NONEMPTY on a type other than string, list, map");
    if ((fl & SBX_SCHEMA_ABSOLUTE_PATH) && f->type != SBX_SCHEMA_STRING)
        return bad_schema(err, nm, f->key, "ABSOLUTE_PATH on a type other than string");
    if (f->type == SBX_SCHEMA_INT && (fl & SBX_SCHEMA_HAS_MIN) && (fl & SBX_SCHEMA_HAS_MAX) &&
        f->int_min > f->int_max)
        return bad_schema(err, nm, f->key, "int_min > int_max");
    if (numeric &&
        (((fl & SBX_SCHEMA_HAS_MIN) && !isfinite(f->num_min)) ||
         ((fl & SBX_SCHEMA_HAS_MAX) && !isfinite(f->num_max)) ||
         ((fl & SBX_SCHEMA_HAS_MIN) && (fl & SBX_SCHEMA_HAS_MAX) && f->num_min > f->num_max)))
        return bad_schema(err, nm, f->key, "num_min and num_max must be finite, min <= max");
    if (f->type == SBX_SCHEMA_DURATION && (fl & SBX_SCHEMA_HAS_MIN) && f->num_min < 0)
        return bad_schema(err, nm, f->key, "a duration's num_min must be >= 0");
    if (f->type == SBX_SCHEMA_ENUM) {
        size_t n = 0;
        while (f->choices && n < MAX_FIELDS && f->choices[n])
            n++;
        if (!n || n == MAX_FIELDS)
            return bad_schema(err, nm, f->key, "an enum needs choices, NULL-ended");
    }
    if (f->code > 0 || v->s.unknown_code > 0)
        return bad_schema(err, nm, f->key, "a code must be a negative SBX_E* code");
    struct view sub;
    if (f->type == SBX_SCHEMA_SECTION) {
        if (fl || f->env || f->default_json)
            return bad_schema(err, nm, f->key, "a section takes no flags, env or default");
        if (depth + 1 >= MAX_DEPTH)
            return bad_schema(err, nm, f->key, "sections nest too deep (a cycle?)");
        int rc = open_view(f->section, nm, depth + 1, &sub, err);
        if (rc < 0)
            return rc;
    }
    *size = storage_size(f, f->type == SBX_SCHEMA_SECTION ? &sub : NULL);
    if (f->offset > v->s.config_size || *size > v->s.config_size - f->offset)
        return bad_schema(err, nm, f->key, "offset past config_size");
    return SBX_OK;
}

/*
 * Reads schema `s` into `v` and checks it all: its header, each field, no
 * key or alias twice, no two fields filling the same bytes.
 */
static int open_view(const sbx_schema *s, const char *name, int depth, struct view *v,
                     sbx_error **err)
{
    memset(v, 0, sizeof(*v));
    if (!s)
        return bad_schema(err, name, NULL, "NULL schema");
    if (s->version < 1 || s->version > SBX_SCHEMA_VERSION || s->struct_size < SCHEMA_V1_SIZE)
        return bad_schema(err, name, NULL, "not a table of this libsbx (set SBX_SCHEMA_HEADER)");
    memcpy(&v->s, s, s->struct_size < sizeof(v->s) ? s->struct_size : sizeof(v->s));
    v->name = name ? name : v->s.name;
    if (!v->name)
        return bad_schema(err, NULL, NULL, "no name");
    if (v->s.field_size < FIELD_V1_SIZE || !v->s.fields || !v->s.config_size)
        return bad_schema(err, v->name, NULL, "fields, field_size and config_size must be set");
    while (v->n < MAX_FIELDS && field_key_at(v, v->n))
        v->n++;
    if (v->n == MAX_FIELDS)
        return bad_schema(err, v->name, NULL, "no {.key = NULL} ending the fields");
    size_t *start = calloc(v->n + 1, sizeof(size_t)), *end = calloc(v->n + 1, sizeof(size_t));
    int rc = start && end ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    for (size_t i = 0; rc == SBX_OK && i < v->n; i++) {
        sbx_schema_field f, g;
        field_at(v, i, &f);
        size_t size = 0;
        rc = check_field(v, &f, depth, &size, err);
        start[i] = f.offset;
        end[i] = f.offset + size;
        for (size_t j = 0; rc == SBX_OK && j < i; j++) {
            field_at(v, j, &g);
            if (!strcmp(f.key, g.key) || (g.alias && !strcmp(f.key, g.alias)) ||
                (f.alias && (!strcmp(f.alias, g.key) || (g.alias && !strcmp(f.alias, g.alias)))))
                rc = bad_schema(err, v->name, f.key, "the key or alias is another field's");
            else if (start[i] < end[j] && start[j] < end[i])
                rc = bad_schema(err, v->name, f.key, "fills bytes another field fills");
        }
        if (rc == SBX_OK && f.alias && !strcmp(f.alias, f.key))
            rc = bad_schema(err, v->name, f.key, "the alias is the key");
    }
    free(start);
    free(end);
    return rc;
}

/* --- parsing ------------------------------------------------------------- */

static void put(void *slot, const void *value, size_t size)
{
    memcpy(slot, value, size);
}

static char **strv_new(size_t n)
{
    return calloc(n + 1, sizeof(char *));
}

/* Checks `v` (not null) for field `f` and stores it in `slot`. */
static int take(struct pctx *c, const sbx_schema_field *f, const char *key, const char *note,
                json_t *v, void *slot)
{
    unsigned fl = f->flags;
    switch (f->type) {
    case SBX_SCHEMA_STRING: {
        if (!json_is_string(v))
            return refuse(c, f, key, note, SBX_ETYPE, NULL);
        const char *s = json_string_value(v);
        if (((fl & SBX_SCHEMA_NONEMPTY) && !*s) || ((fl & SBX_SCHEMA_ABSOLUTE_PATH) && *s != '/'))
            return refuse(c, f, key, note, SBX_EINVAL, v);
        char *d = strdup(s);
        if (!d)
            return sbx__set_error(c->err, SBX_ENOMEM, "out of memory");
        put(slot, &d, sizeof(d));
        return SBX_OK;
    }
    case SBX_SCHEMA_BOOL: {
        if (!json_is_boolean(v))
            return refuse(c, f, key, note, SBX_ETYPE, NULL);
        bool b = json_is_true(v);
        put(slot, &b, sizeof(b));
        return SBX_OK;
    }
    case SBX_SCHEMA_INT: {
        if (!json_is_integer(v))
            return refuse(c, f, key, note, SBX_ETYPE, NULL);
        int64_t i = json_integer_value(v);
        if (((fl & SBX_SCHEMA_HAS_MIN) && i < f->int_min) ||
            ((fl & SBX_SCHEMA_HAS_MAX) && i > f->int_max))
            return refuse(c, f, key, note, SBX_EINVAL, v);
        put(slot, &i, sizeof(i));
        return SBX_OK;
    }
    case SBX_SCHEMA_NUMBER:
    case SBX_SCHEMA_DURATION: {
        if (!json_is_number(v))
            return refuse(c, f, key, note, SBX_ETYPE, NULL);
        double d = json_number_value(v);
        bool ok = isfinite(d);
        if (fl & SBX_SCHEMA_HAS_MIN)
            ok = ok && ((fl & SBX_SCHEMA_MIN_EXCLUSIVE) ? d > f->num_min : d >= f->num_min);
        else if (f->type == SBX_SCHEMA_DURATION)
            ok = ok && d >= 0;
        if (fl & SBX_SCHEMA_HAS_MAX)
            ok = ok && d <= f->num_max;
        if (!ok)
            return refuse(c, f, key, note, SBX_EINVAL, v);
        put(slot, &d, sizeof(d));
        return SBX_OK;
    }
    case SBX_SCHEMA_LIST: {
        if (!json_is_array(v))
            return refuse(c, f, key, note, SBX_ETYPE, NULL);
        size_t i, n = json_array_size(v);
        for (i = 0; i < n; i++)
            if (!json_is_string(json_array_get(v, i)))
                return refuse(c, f, key, note, SBX_ETYPE, NULL);
        if ((fl & SBX_SCHEMA_NONEMPTY) && !n)
            return refuse(c, f, key, note, SBX_EINVAL, NULL);
        char **a = strv_new(n);
        for (i = 0; a && i < n; i++)
            if (!(a[i] = strdup(json_string_value(json_array_get(v, i))))) {
                sbx_strv_free(a);
                a = NULL;
            }
        if (!a)
            return sbx__set_error(c->err, SBX_ENOMEM, "out of memory");
        put(slot, &a, sizeof(a));
        return SBX_OK;
    }
    case SBX_SCHEMA_MAP: {
        if (!json_is_object(v))
            return refuse(c, f, key, note, SBX_ETYPE, NULL);
        const char *k;
        json_t *it;
        json_object_foreach(v, k, it)
        {
            if (!json_is_string(it))
                return refuse(c, f, key, note, SBX_ETYPE, NULL);
        }
        size_t n = json_object_size(v), i = 0;
        if ((fl & SBX_SCHEMA_NONEMPTY) && !n)
            return refuse(c, f, key, note, SBX_EINVAL, NULL);
        char **a = strv_new(2 * n);
        json_object_foreach(v, k, it)
        {
            if (!a)
                break;
            if (!(a[i++] = strdup(k)) || !(a[i++] = strdup(json_string_value(it)))) {
                sbx_strv_free(a);
                a = NULL;
            }
        }
        if (!a)
            return sbx__set_error(c->err, SBX_ENOMEM, "out of memory");
        put(slot, &a, sizeof(a));
        return SBX_OK;
    }
    case SBX_SCHEMA_ENUM: {
        if (!json_is_string(v))
            return refuse(c, f, key, note, SBX_ETYPE, NULL);
        for (int i = 0; f->choices[i]; i++)
            if (!strcmp(f->choices[i], json_string_value(v))) {
                put(slot, &i, sizeof(i));
                return SBX_OK;
            }
        return refuse(c, f, key, note, SBX_EINVAL, v);
    }
    case SBX_SCHEMA_JSON: {
        char *text = sbx__json_dump(v);
        if (!text)
            return sbx__set_error(c->err, SBX_ENOMEM, "out of memory");
        put(slot, &text, sizeof(text));
        return SBX_OK;
    }
    case SBX_SCHEMA_SECTION:
        break;
    }
    return bad_schema(c->err, c->name, f->key, "no such type");
}

static bool word_is(const char *s, const char *const *words)
{
    for (size_t i = 0; words[i]; i++)
        if (!strcasecmp(s, words[i]))
            return true;
    return false;
}

/* `s` without the spaces and tabs around it, as a new JSON string (NULL if not UTF-8). */
static json_t *trimmed(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    return json_stringn(s, n);
}

/*
 * The value the text of an environment variable stands for, per the
 * field's type (see `env` in the header); NULL when it stands for none,
 * which the caller reports as the field's type error.
 */
static json_t *from_env(const sbx_schema_field *f, const char *text)
{
    static const char *const yes[] = {"1", "true", "yes", "on", NULL};
    static const char *const no[] = {"0", "false", "no", "off", NULL};
    long long i;
    double d;
    switch (f->type) {
    case SBX_SCHEMA_STRING:
    case SBX_SCHEMA_ENUM:
        return json_string(text);
    case SBX_SCHEMA_BOOL:
        return word_is(text, yes) ? json_true() : word_is(text, no) ? json_false() : NULL;
    case SBX_SCHEMA_INT:
        return sbx__parse_pyint(text, &i) == 0 ? json_integer(i) : NULL;
    case SBX_SCHEMA_NUMBER:
    case SBX_SCHEMA_DURATION:
        /* json_real refuses inf and nan: they fail here, not as a range. */
        return sbx__parse_pyfloat(text, &d) == 0 ? json_real(d) : NULL;
    case SBX_SCHEMA_LIST:
    case SBX_SCHEMA_MAP: {
        bool map = f->type == SBX_SCHEMA_MAP;
        json_t *out = map ? json_object() : json_array();
        for (const char *p = text; out && *p;) {
            size_t n = strcspn(p, ",");
            json_t *item = trimmed(p, n);
            const char *s = json_string_value(item);
            if (item && *s && !map) {
                if (json_array_append(out, item) < 0) {
                    json_decref(out);
                    out = NULL;
                }
            } else if (item && *s) {
                const char *eq = strchr(s, '=');
                json_t *k = eq ? trimmed(s, (size_t)(eq - s)) : NULL;
                json_t *val = eq ? trimmed(eq + 1, strlen(eq + 1)) : NULL;
                if (!k || !val || !*json_string_value(k) ||
                    json_object_set(out, json_string_value(k), val) < 0) {
                    json_decref(out);
                    out = NULL;
                }
                json_decref(k);
                json_decref(val);
            } else if (!item) {
                json_decref(out);
                out = NULL;
            }
            json_decref(item);
            p += n + (p[n] == ',');
        }
        return out;
    }
    case SBX_SCHEMA_JSON:
        return json_loads(text, JSON_DECODE_ANY, NULL);
    case SBX_SCHEMA_SECTION:
        break;
    }
    return NULL;
}

static int parse_level(struct pctx *c, const struct view *v, json_t *obj, const char *path,
                       char *out);

/* The unset value of a field: what a zeroed struct holds, but -1 for durations and enums. */
static void set_unset(const sbx_schema_field *f, void *slot)
{
    if (f->type == SBX_SCHEMA_DURATION) {
        double none = SBX_SCHEMA_NONE;
        put(slot, &none, sizeof(none));
    } else if (f->type == SBX_SCHEMA_ENUM) {
        int none = -1;
        put(slot, &none, sizeof(none));
    }
}

/* One field from the config mapping `obj` (NULL when absent), its variable or its default. */
static int parse_field(struct pctx *c, const struct view *v, const sbx_schema_field *f, json_t *obj,
                       const char *path, char *out)
{
    void *slot = out + f->offset;
    json_t *val = obj ? json_object_get(obj, f->key) : NULL;
    json_t *old = obj && f->alias ? json_object_get(obj, f->alias) : NULL;
    const char *used = val || !old ? f->key : f->alias;
    _cleanup_free_ char *key = *path ? sbx__printf("%s.%s", path, used) : strdup(used);
    if (!key)
        return sbx__set_error(c->err, SBX_ENOMEM, "out of memory");
    if (val && old)
        return sbx__set_error(c->err, f->code ? f->code : SBX_EINVAL,
                              "%s: %s%s%s and its old name %s are both set; keep %s only", c->name,
                              path, *path ? "." : "", f->key, f->alias, f->key);
    if (!val)
        val = old;
    if (f->type == SBX_SCHEMA_SECTION) {
        struct view sub;
        int rc = open_view(f->section, v->name, 1, &sub, c->err);
        if (rc < 0)
            return rc;
        if (val && !json_is_null(val) && !json_is_object(val))
            return refuse(c, f, key, "", SBX_ETYPE, NULL);
        return parse_level(c, &sub, json_is_object(val) ? val : NULL, key, slot);
    }
    if (json_is_null(val)) {
        if (f->type == SBX_SCHEMA_DURATION) {
            set_unset(f, slot);
            return SBX_OK;
        }
        if (!(f->flags & SBX_SCHEMA_NULLABLE))
            return refuse(c, f, key, "", SBX_ETYPE, NULL);
        val = NULL; /* null on a nullable field is an absent key */
    }
    if (val)
        return take(c, f, key, "", val, slot);
    const char *env = f->env ? getenv(f->env) : NULL;
    if (env && *env) {
        _cleanup_free_ char *note = sbx__printf(" (from $%s)", f->env);
        _cleanup_json_ json_t *ev = from_env(f, env);
        if (!note)
            return sbx__set_error(c->err, SBX_ENOMEM, "out of memory");
        /* Only a JSON field's variable can say null: absent when nullable, as in the config. */
        if (!ev || (json_is_null(ev) && !(f->flags & SBX_SCHEMA_NULLABLE)))
            return refuse(c, f, key, note, SBX_ETYPE, NULL);
        if (!json_is_null(ev))
            return take(c, f, key, note, ev, slot);
    }
    if (f->default_json) {
        _cleanup_json_ json_t *dv = json_loads(f->default_json, JSON_DECODE_ANY, NULL);
        if (!dv)
            return bad_schema(c->err, c->name, f->key, "default_json is not JSON");
        if (!json_is_null(dv))
            return take(c, f, key, " (its default)", dv, slot);
    }
    if (f->flags & SBX_SCHEMA_REQUIRED)
        return sbx__set_error(c->err, f->code ? f->code : SBX_EINVAL, "%s: %s is required%s%s%s",
                              c->name, key, f->env ? " (or set $" : "", f->env ? f->env : "",
                              f->env ? ")" : "");
    set_unset(f, slot);
    return SBX_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The unknown-key error: the schema's template, or the default, with its names filled in. */
static int unknown_key(struct pctx *c, const struct view *v, const char *path, const char *key)
{
    const char **names = calloc(v->n + 1, sizeof(*names));
    if (!names)
        return sbx__set_error(c->err, SBX_ENOMEM, "out of memory");
    for (size_t i = 0; i < v->n; i++)
        names[i] = field_key_at(v, i);
    qsort(names, v->n, sizeof(*names), cmp_str);
    sbx_buf known = {0}, b = {0};
    int rc = sbx__buf_append(&known, "", 0);
    for (size_t i = 0; rc == SBX_OK && i < v->n; i++)
        rc = sbx__buf_printf(&known, "%s%s", i ? ", " : "", names[i]);
    free(names);
    const char *tpl = v->s.unknown_message ? v->s.unknown_message
                      : *path ? "{name}: unknown key '{key}' in {section} (known: {known})"
                              : "{name}: unknown key '{key}' (known: {known})";
    for (const char *p = tpl; rc == SBX_OK && *p; p++) {
        if (!strncmp(p, "{name}", 6)) {
            rc = sbx__buf_printf(&b, "%s", c->name);
            p += 5;
        } else if (!strncmp(p, "{key}", 5)) {
            rc = show(&b, key, true);
            p += 4;
        } else if (!strncmp(p, "{known}", 7)) {
            rc = sbx__buf_printf(&b, "%s", known.data);
            p += 6;
        } else if (!strncmp(p, "{section}", 9)) {
            rc = sbx__buf_printf(&b, "%s", path);
            p += 8;
        } else {
            rc = sbx__buf_append(&b, p, 1);
        }
    }
    sbx__buf_free(&known);
    return fail_buf(c->err, v->s.unknown_code ? v->s.unknown_code : SBX_ETYPE, &b, rc);
}

static bool is_known(const struct view *v, const char *key)
{
    for (size_t i = 0; i < v->n; i++) {
        sbx_schema_field f;
        field_at(v, i, &f);
        if (!strcmp(f.key, key) || (f.alias && !strcmp(f.alias, key)))
            return true;
    }
    return false;
}

/* Every key of `obj` known, then every field in table order (as the providers did by hand). */
static int parse_level(struct pctx *c, const struct view *v, json_t *obj, const char *path,
                       char *out)
{
    const char *k;
    json_t *val;
    if (obj)
        json_object_foreach(obj, k, val)
        {
            if (!is_known(v, k))
                return unknown_key(c, v, path, k);
        }
    for (size_t i = 0; i < v->n; i++) {
        sbx_schema_field f;
        field_at(v, i, &f);
        int rc = parse_field(c, v, &f, obj, path, out);
        if (rc < 0)
            return rc;
    }
    return SBX_OK;
}

/*
 * jansson's reason for refusing a text, without the " near '...'" it
 * quotes from the text: that may be the start of a secret.
 */
static int not_json(struct pctx *c, const json_error_t *je)
{
    char reason[sizeof(je->text)];
    snprintf(reason, sizeof(reason), "%s", je->text);
    char *near = strstr(reason, " near ");
    if (near)
        *near = 0;
    sbx_buf b = {0};
    int rc = sbx__buf_printf(&b, "%s: the config is not valid JSON: ", c->name);
    if (rc == SBX_OK)
        rc = show(&b, reason, false);
    if (rc == SBX_OK)
        rc = sbx__buf_printf(&b, " (line %d, column %d)", je->line, je->column);
    return fail_buf(c->err, SBX_EINVAL, &b, rc);
}

int sbx_schema_parse(const sbx_schema *s, const char *json_text, void *out, sbx_error **err)
{
    struct view v;
    if (!out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_schema_parse: out is NULL");
    int rc = open_view(s, NULL, 0, &v, err);
    if (rc < 0)
        return rc;
    memset(out, 0, v.s.config_size);
    struct pctx c = {.name = v.name, .err = err};
    json_error_t je;
    _cleanup_json_ json_t *root = json_loads(json_text ? json_text : "{}", JSON_DECODE_ANY, &je);
    if (!root)
        return not_json(&c, &je);
    if (!json_is_object(root))
        return sbx__set_error(err, SBX_ETYPE, "%s: the config must be a mapping", v.name);
    rc = parse_level(&c, &v, root, "", out);
    if (rc < 0)
        sbx_schema_free(s, out);
    return rc;
}

/* --- freeing ------------------------------------------------------------- */

static void free_level(const struct view *v, char *out)
{
    for (size_t i = 0; i < v->n; i++) {
        sbx_schema_field f;
        field_at(v, i, &f);
        void *slot = out + f.offset;
        char *p;
        char **a;
        struct view sub;
        switch (f.type) {
        case SBX_SCHEMA_STRING:
        case SBX_SCHEMA_JSON:
            memcpy(&p, slot, sizeof(p));
            free(p);
            break;
        case SBX_SCHEMA_LIST:
        case SBX_SCHEMA_MAP:
            memcpy(&a, slot, sizeof(a));
            sbx_strv_free(a);
            break;
        case SBX_SCHEMA_SECTION:
            if (open_view(f.section, v->name, 1, &sub, NULL) == SBX_OK)
                free_level(&sub, slot);
            break;
        default:
            break;
        }
    }
}

void sbx_schema_free(const sbx_schema *s, void *out)
{
    struct view v;
    /* An invalid table never let parse fill anything, and its offsets cannot be trusted. */
    if (!s || !out || open_view(s, NULL, 0, &v, NULL) < 0)
        return;
    free_level(&v, out);
    memset(out, 0, v.s.config_size);
}

/* --- dump ---------------------------------------------------------------- */

static json_t *strv_json(char **a, bool map)
{
    json_t *o = map ? json_object() : json_array();
    for (size_t i = 0; o && a[i]; i += map ? 2 : 1) {
        json_t *s = json_string(map ? a[i + 1] : a[i]);
        if (!s || (map ? json_object_set_new(o, a[i], s) : json_array_append_new(o, s)) < 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

/* One field's value as JSON: NULL when it cannot be (a string that is not UTF-8, or memory). */
static json_t *dump_field(const sbx_schema_field *f, const char *slot, bool *set)
{
    char *p = NULL;
    char **a = NULL;
    bool b;
    int64_t i;
    double d;
    int e;
    *set = true;
    switch (f->type) {
    case SBX_SCHEMA_STRING:
    case SBX_SCHEMA_JSON:
        memcpy(&p, slot, sizeof(p));
        *set = p != NULL;
        if (!p)
            return json_null();
        return f->type == SBX_SCHEMA_STRING ? json_string(p) : json_loads(p, JSON_DECODE_ANY, NULL);
    case SBX_SCHEMA_LIST:
    case SBX_SCHEMA_MAP:
        memcpy(&a, slot, sizeof(a));
        *set = a != NULL;
        return a ? strv_json(a, f->type == SBX_SCHEMA_MAP) : json_null();
    case SBX_SCHEMA_BOOL:
        memcpy(&b, slot, sizeof(b));
        return json_boolean(b);
    case SBX_SCHEMA_INT:
        memcpy(&i, slot, sizeof(i));
        return json_integer(i);
    case SBX_SCHEMA_NUMBER:
    case SBX_SCHEMA_DURATION:
        memcpy(&d, slot, sizeof(d));
        *set = isfinite(d) && !(f->type == SBX_SCHEMA_DURATION && d < 0);
        return *set ? json_real(d) : json_null();
    case SBX_SCHEMA_ENUM: {
        memcpy(&e, slot, sizeof(e));
        int n = 0;
        while (f->choices[n])
            n++;
        *set = e >= 0 && e < n;
        return *set ? json_string(f->choices[e]) : json_null();
    }
    case SBX_SCHEMA_SECTION:
        break;
    }
    return NULL;
}

/* The level `v` of `cfg` as a JSON object; NULL with *err set when it cannot be. */
static json_t *dump_level(const struct view *v, const char *cfg, sbx_error **err, int *rc)
{
    json_t *obj = json_object();
    for (size_t i = 0; obj && i < v->n; i++) {
        sbx_schema_field f;
        field_at(v, i, &f);
        json_t *x = NULL;
        bool set = true;
        if (f.type == SBX_SCHEMA_SECTION) {
            struct view sub;
            if ((*rc = open_view(f.section, v->name, 1, &sub, err)) < 0 ||
                !(x = dump_level(&sub, cfg + f.offset, err, rc))) {
                json_decref(obj);
                return NULL;
            }
        } else if (!(x = dump_field(&f, cfg + f.offset, &set))) {
            json_decref(obj);
            *rc = sbx__set_error(err, SBX_EINVAL, "%s: %s holds text that is not UTF-8 or JSON",
                                 v->name, f.key);
            return NULL;
        } else if (set && (f.flags & SBX_SCHEMA_SECRET)) {
            json_decref(x);
            x = json_string("***");
        }
        /* json_object_set_new takes x, NULL included, and fails for NULL. */
        if (json_object_set_new(obj, f.key, x) < 0) {
            json_decref(obj);
            obj = NULL;
        }
    }
    if (!obj)
        *rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return obj;
}

int sbx_schema_dump(const sbx_schema *s, const void *cfg, char **json_out, sbx_error **err)
{
    struct view v;
    if (!cfg || !json_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_schema_dump: cfg or json_out is NULL");
    int rc = open_view(s, NULL, 0, &v, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *obj = dump_level(&v, cfg, err, &rc);
    if (rc < 0)
        return rc;
    char *text = sbx__json_dump(obj);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *json_out = text;
    return SBX_OK;
}

/* --- describe ------------------------------------------------------------ */

/* Text for a markdown table cell: '|' escaped, line breaks made spaces. */
static int cell(sbx_buf *b, const char *s)
{
    int rc = SBX_OK;
    for (; rc == SBX_OK && *s; s++)
        rc = *s == '|'                  ? sbx__buf_append(b, "\\|", 2)
             : *s == '\n' || *s == '\r' ? sbx__buf_append(b, " ", 1)
                                        : sbx__buf_append(b, s, 1);
    return rc;
}

static int describe_level(const struct view *v, const char *path, sbx_buf *b, sbx_error **err)
{
    int rc = SBX_OK;
    for (size_t i = 0; rc == SBX_OK && i < v->n; i++) {
        sbx_schema_field f;
        field_at(v, i, &f);
        sbx_buf what = {0};
        rc = describe_type(&what, &f);
        if (rc == SBX_OK)
            rc = sbx__buf_printf(b, "| `%s%s%s` | ", path, *path ? "." : "", f.key);
        if (rc == SBX_OK)
            rc = cell(b, what.data ? what.data : "");
        sbx__buf_free(&what);
        if (rc == SBX_OK && (f.flags & SBX_SCHEMA_SECRET) && f.default_json)
            rc = sbx__buf_printf(b, " | *** | ");
        else if (rc == SBX_OK && f.default_json) {
            rc = sbx__buf_printf(b, " | `");
            if (rc == SBX_OK)
                rc = cell(b, f.default_json);
            if (rc == SBX_OK)
                rc = sbx__buf_printf(b, "` | ");
        } else if (rc == SBX_OK) {
            rc = sbx__buf_printf(b, " | %s | ", (f.flags & SBX_SCHEMA_REQUIRED) ? "required" : "-");
        }
        if (rc == SBX_OK)
            rc = f.env ? sbx__buf_printf(b, "`%s` | ", f.env) : sbx__buf_printf(b, "- | ");
        if (rc == SBX_OK && f.help)
            rc = cell(b, f.help);
        if (rc == SBX_OK && (f.flags & SBX_SCHEMA_SECRET))
            rc = sbx__buf_printf(b, "%sSecret: never shown.", f.help ? " " : "");
        if (rc == SBX_OK && f.alias)
            rc = sbx__buf_printf(b, "%sDeprecated name: `%s`.",
                                 f.help || (f.flags & SBX_SCHEMA_SECRET) ? " " : "", f.alias);
        if (rc == SBX_OK)
            rc = sbx__buf_printf(b, " |\n");
        if (rc == SBX_OK && f.type == SBX_SCHEMA_SECTION) {
            struct view sub;
            _cleanup_free_ char *sp = *path ? sbx__printf("%s.%s", path, f.key) : strdup(f.key);
            if (!sp)
                return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            rc = open_view(f.section, v->name, 1, &sub, err);
            if (rc < 0)
                return rc;
            rc = describe_level(&sub, sp, b, err);
            if (rc < 0)
                return rc;
        }
    }
    return rc < 0 ? sbx__set_error(err, SBX_ENOMEM, "out of memory") : SBX_OK;
}

int sbx_schema_describe(const sbx_schema *s, char **markdown_out, sbx_error **err)
{
    struct view v;
    if (!markdown_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_schema_describe: markdown_out is NULL");
    int rc = open_view(s, NULL, 0, &v, err);
    if (rc < 0)
        return rc;
    sbx_buf b = {0};
    rc = sbx__buf_printf(&b, "| key | type | default | env | help |\n|---|---|---|---|---|\n");
    if (rc < 0) {
        sbx__buf_free(&b);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    rc = describe_level(&v, "", &b, err);
    if (rc < 0) {
        sbx__buf_free(&b);
        return rc;
    }
    *markdown_out = b.data;
    return SBX_OK;
}
