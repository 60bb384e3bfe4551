/*
 * YAML (and JSON) text to jansson values, through libyaml's event parser.
 * Scalars are typed as PyYAML (YAML 1.1) types them, since reference configs
 * are loaded by OmegaConf over PyYAML: null/~, true/false/yes/no/on/off,
 * ints (with 0x/0o and underscores), floats (.inf/.nan). Quoted scalars are
 * always strings. Anchors and aliases work; merge keys (<<) are applied.
 */
#include "internal.h"

#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>

#include <yaml.h>

struct anchor {
    json_t *value;
    size_t weight; /* nodes in the anchored value, aliases expanded */
    size_t bytes;  /* bytes of scalar text in it, aliases expanded */
    bool complete; /* false while the anchored node is still being parsed */
};

struct yparser {
    yaml_parser_t p;
    struct anchor *anchors;
    size_t n_anchors, cap_anchors;
    /*
     * Anchor name -> index in `anchors` (the latest definition wins, as YAML
     * says): a hashed lookup, so that many aliases to many anchors stay
     * linear instead of scanning every anchor for every alias.
     */
    json_t *by_name;
    int depth;
    size_t nodes; /* nodes built so far, every alias counted at its expanded size */
    size_t bytes; /* scalar text built so far, aliases expanded */
    size_t alias_nodes; /* of `nodes`, those built by copying aliases */
};

/*
 * Bounds on what a document may build, so that parsing time and memory stay
 * linear in the text with a small constant, whatever the text is. Specs and
 * provider configs are a few KiB; each bound is orders of magnitude above
 * what a real one uses, and each refusal names the bound it hit.
 *
 * An alias is copied where it is used (so that interpolating one use cannot
 * change another), and nested aliases grow exponentially ("billion laughs"):
 * nodes and text are counted with every alias at its expanded size. What
 * aliases build has a tighter bound of its own: written-out values cost
 * their text, but copies come from a few bytes each (1,000,000 copied values
 * took 0.2 s and 90 MB, and 8 s and 700 MB in the ASan fuzz build).
 */
#define YAML_MAX_DEPTH 256
#define YAML_MAX_NODES 1000000
#define YAML_MAX_ALIAS_NODES 100000
#define YAML_MAX_BYTES (32u << 20)
#define YAML_MAX_KEY_BYTES (64u << 10)

static bool ieq(const char *a, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(a, *set) == 0)
            return true;
    return false;
}

/*
 * The implicit int and float forms of PyYAML (YAML 1.1) as OmegaConf loads
 * them: OmegaConf widens PyYAML's float pattern so "1e3" is a float too.
 * Both are anchored POSIX EREs, compiled once.
 */
static const char int_re_src[] = "^([-+]?0b[0-1_]+"
                                 "|[-+]?0[0-7_]+"
                                 "|[-+]?(0|[1-9][0-9_]*)"
                                 "|[-+]?0x[0-9a-fA-F_]+"
                                 "|[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+)$";
static const char float_re_src[] = "^([-+]?[0-9][0-9_]*\\.[0-9_]*([eE][-+]?[0-9]+)?"
                                   "|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
                                   "|\\.[0-9_]+([eE][-+][0-9]+)?"
                                   "|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\\.[0-9_]*"
                                   "|[-+]?\\.(inf|Inf|INF)"
                                   "|\\.(nan|NaN|NAN))$";
static regex_t int_re, float_re;
static bool regex_ok;
static pthread_once_t regex_once = PTHREAD_ONCE_INIT;

static void compile_regexes(void)
{
    regex_ok = regcomp(&int_re, int_re_src, REG_EXTENDED | REG_NOSUB) == 0 &&
               regcomp(&float_re, float_re_src, REG_EXTENDED | REG_NOSUB) == 0;
}

/* `s` without '_' and without a leading sign; *neg tells the sign. */
static bool strip_number(const char *s, char *buf, size_t n, bool *neg)
{
    *neg = *s == '-';
    if (*s == '-' || *s == '+')
        s++;
    size_t k = 0;
    for (; *s; s++) {
        if (*s == '_')
            continue;
        if (k + 1 >= n)
            return false;
        buf[k++] = *s;
    }
    buf[k] = 0;
    return true;
}

/* An implicit int as PyYAML builds it; false when it does not fit 64 bits. */
static bool yaml_int(const char *s, long long *out)
{
    char buf[96];
    bool neg;
    if (!strip_number(s, buf, sizeof(buf), &neg) || !buf[0])
        return false;
    unsigned long long v = 0;
    errno = 0;
    char *end = NULL;
    if (strchr(buf, ':')) {
        /* Sexagesimal: "1:30" is 90. */
        for (char *p = buf; *p;) {
            unsigned long long part = strtoull(p, &end, 10);
            if (errno || end == p || v > (ULLONG_MAX - part) / 60)
                return false;
            v = v * 60 + part;
            p = *end == ':' ? end + 1 : end;
        }
    } else if (buf[0] == '0' && buf[1] == 'b') {
        v = strtoull(buf + 2, &end, 2);
    } else if (buf[0] == '0' && buf[1] == 'x') {
        v = strtoull(buf + 2, &end, 16);
    } else if (buf[0] == '0' && buf[1]) {
        v = strtoull(buf + 1, &end, 8);
    } else {
        v = strtoull(buf, &end, 10);
    }
    if (errno || (end && *end) || v > (unsigned long long)LLONG_MAX + neg)
        return false;
    *out = neg ? (long long)(0 - v) : (long long)v;
    return true;
}

/* An implicit float; false for .nan and infinities, which JSON cannot hold. */
static bool yaml_float(const char *s, double *out)
{
    char buf[128];
    bool neg;
    if (!strip_number(s, buf, sizeof(buf), &neg))
        return false;
    double v;
    if (strchr(buf, ':')) {
        /* Sexagesimal: "1:30.5" is 90.5; the last part carries the fraction. */
        v = 0;
        for (char *p = buf; *p;) {
            char *end = NULL;
            double part = strchr(p, ':') ? (double)strtoull(p, &end, 10) : strtod(p, &end);
            if (end == p)
                return false;
            v = v * 60 + part;
            p = *end == ':' ? end + 1 : end;
        }
    } else {
        char *end = NULL;
        v = strtod(buf, &end);
        if (*end)
            return false;
    }
    if (!isfinite(v))
        return false;
    *out = neg ? -v : v;
    return true;
}

/* NULL when the scalar is a float JSON cannot represent (.inf, .nan). */
static json_t *plain_scalar(const char *s)
{
    static const char *const nulls[] = { "", "~", "null", "Null", "NULL", NULL };
    static const char *const trues[] = { "true", "True", "TRUE", "yes", "Yes", "YES",
                                         "on",   "On",   "ON",   NULL };
    static const char *const falses[] = { "false", "False", "FALSE", "no", "No", "NO",
                                          "off",   "Off",   "OFF",   NULL };
    if (ieq(s, nulls))
        return json_null();
    if (ieq(s, trues))
        return json_true();
    if (ieq(s, falses))
        return json_false();
    pthread_once(&regex_once, compile_regexes);
    if (!regex_ok)
        return json_string(s);
    /* PyYAML tries the float pattern before the int one; they do not overlap. */
    if (regexec(&float_re, s, 0, NULL, 0) == 0) {
        double d;
        return yaml_float(s, &d) ? json_real(d) : NULL;
    }
    long long i;
    if (regexec(&int_re, s, 0, NULL, 0) == 0 && yaml_int(s, &i))
        return json_integer(i);
    /* An int too large for 64 bits stays text rather than losing digits. */
    return json_string(s);
}

/* A scalar with an explicit core tag (!!str, !!int, !!float, !!bool, !!null). */
static json_t *tagged_scalar(const char *tag, const char *text, size_t len)
{
    if (!strcmp(tag, YAML_INT_TAG) || !strcmp(tag, YAML_BOOL_TAG) || !strcmp(tag, YAML_NULL_TAG))
        return plain_scalar(text);
    if (!strcmp(tag, YAML_FLOAT_TAG)) {
        json_t *v = plain_scalar(text);
        if (json_is_integer(v)) {
            json_t *r = json_real((double)json_integer_value(v));
            json_decref(v);
            return r;
        }
        return v;
    }
    /* !!str and every other tag: the text as written. */
    return json_stringn(text, len);
}

static int perr(struct yparser *y, sbx_error **err)
{
    return sbx__set_error(err, SBX_EINVAL, "invalid YAML at line %zu, column %zu: %s",
                          y->p.problem_mark.line + 1, y->p.problem_mark.column + 1,
                          y->p.problem ? y->p.problem : "syntax error");
}

/* Registers an anchor when its node starts; finish_anchor() completes it. */
static ssize_t start_anchor(struct yparser *y, const yaml_char_t *name, json_t *v)
{
    if (!name)
        return -1;
    if (y->n_anchors == y->cap_anchors) {
        size_t cap = y->cap_anchors ? 2 * y->cap_anchors : 16;
        struct anchor *a = realloc(y->anchors, cap * sizeof(*a));
        if (!a)
            return -2;
        y->anchors = a;
        y->cap_anchors = cap;
    }
    if ((!y->by_name && !(y->by_name = json_object())) ||
        json_object_set_new(y->by_name, (const char *)name,
                            json_integer((json_int_t)y->n_anchors)) < 0)
        return -2;
    y->anchors[y->n_anchors] = (struct anchor){ json_incref(v), 0, 0, false };
    return (ssize_t)y->n_anchors++;
}

static void finish_anchor(struct yparser *y, ssize_t idx, size_t nodes_before, size_t bytes_before)
{
    if (idx < 0)
        return;
    y->anchors[idx].weight = y->nodes - nodes_before;
    y->anchors[idx].bytes = y->bytes - bytes_before;
    y->anchors[idx].complete = true;
}

/*
 * Counts `n` more nodes holding `bytes` of text (copies of an alias when
 * `alias`); fails once the document grows past a bound.
 */
static int add_nodes(struct yparser *y, size_t n, size_t bytes, bool alias,
                     const yaml_mark_t *mark, sbx_error **err)
{
    if (alias && (n > YAML_MAX_ALIAS_NODES || y->alias_nodes + n > YAML_MAX_ALIAS_NODES))
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid YAML at line %zu: aliases expand to more than %d values "
                              "in all; write the document without nested aliases",
                              mark->line + 1, YAML_MAX_ALIAS_NODES);
    if (n > YAML_MAX_NODES || y->nodes + n > YAML_MAX_NODES)
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid YAML at line %zu: the document expands to more than %d "
                              "values (aliases counted at their expanded size); write it "
                              "without nested aliases",
                              mark->line + 1, YAML_MAX_NODES);
    if (bytes > YAML_MAX_BYTES || y->bytes + bytes > YAML_MAX_BYTES)
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid YAML at line %zu: the document expands to more than %u "
                              "MiB of text (aliases counted at their expanded size); write it "
                              "without nested aliases",
                              mark->line + 1, YAML_MAX_BYTES >> 20);
    y->nodes += n;
    y->bytes += bytes;
    if (alias)
        y->alias_nodes += n;
    return 0;
}

static int parse_node(struct yparser *y, yaml_event_t *ev, json_t **out, sbx_error **err);

static int next_event(struct yparser *y, yaml_event_t *ev, sbx_error **err)
{
    if (!yaml_parser_parse(&y->p, ev))
        return perr(y, err);
    return 0;
}

/* Adds the keys of `src` (a mapping, or a list of mappings) that `obj` lacks. */
static int merge_into(json_t *obj, json_t *src)
{
    if (json_is_object(src)) {
        const char *k;
        json_t *v;
        json_object_foreach(src, k, v) {
            if (!json_object_get(obj, k) && json_object_set(obj, k, v) < 0)
                return -1;
        }
        return 0;
    }
    if (json_is_array(src)) {
        for (size_t i = 0; i < json_array_size(src); i++)
            if (!json_is_object(json_array_get(src, i)) ||
                merge_into(obj, json_array_get(src, i)) < 0)
                return -1;
        return 0;
    }
    return -1;
}

/*
 * "<<" merge keys: the mapping's own keys win over merged ones, and an
 * earlier merge source wins over a later one. As in PyYAML, merged keys come
 * first in the result. `v` is rebuilt in place: an anchor may point at it.
 */
static int apply_merges(json_t *v, json_t *merges)
{
    _cleanup_json_ json_t *m = json_object();
    if (!m)
        return -1;
    for (size_t i = 0; i < json_array_size(merges); i++)
        if (merge_into(m, json_array_get(merges, i)) < 0)
            return -1;
    if (json_object_update(m, v) < 0 || json_object_clear(v) < 0 || json_object_update(v, m) < 0)
        return -1;
    return 0;
}

/*
 * JSON keys are strings: a YAML key that is not (1, true, ~, 1.5) becomes
 * Python's str() of it ("1", "True", "None", "1.5"), which is what the
 * reference's str(key) makes of it. A mapping or list is not a key: PyYAML
 * refuses it as unhashable. (Turning it into its JSON text instead made each
 * level of mappings-as-keys escape the level below again: a few hundred bytes
 * of YAML grew into gigabytes.)
 */
static int key_text(const json_t *key, const yaml_mark_t *mark, char **out, sbx_error **err)
{
    if (json_is_object(key) || json_is_array(key))
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid YAML at line %zu, column %zu: a %s used as a mapping key; "
                              "keys must be text, numbers, booleans or null",
                              mark->line + 1, mark->column + 1,
                              json_is_object(key) ? "mapping" : "list");
    /* A JSON key is a C string here: "a\0b" would quietly become "a". */
    if (json_is_string(key) && strlen(json_string_value(key)) != json_string_length(key))
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid YAML at line %zu, column %zu: a mapping key holding a NUL "
                              "byte; keys are names and cannot hold one",
                              mark->line + 1, mark->column + 1);
    char *text = json_is_string(key) ? strdup(json_string_value(key)) : sbx__json_repr(key);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (strlen(text) > YAML_MAX_KEY_BYTES) {
        free(text);
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid YAML at line %zu, column %zu: a mapping key longer than %u "
                              "bytes; keys are names, put long text in values",
                              mark->line + 1, mark->column + 1, YAML_MAX_KEY_BYTES);
    }
    *out = text;
    return 0;
}

static int parse_sequence(struct yparser *y, json_t *v, sbx_error **err)
{
    for (;;) {
        yaml_event_t cev;
        int rc = next_event(y, &cev, err);
        if (rc < 0)
            return rc;
        if (cev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&cev);
            return 0;
        }
        json_t *item = NULL;
        rc = parse_node(y, &cev, &item, err);
        yaml_event_delete(&cev);
        if (rc < 0)
            return rc;
        if (json_array_append_new(v, item) < 0)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
}

static int parse_mapping(struct yparser *y, json_t *v, sbx_error **err)
{
    _cleanup_json_ json_t *merges = NULL;
    for (;;) {
        yaml_event_t kev;
        int rc = next_event(y, &kev, err);
        if (rc < 0)
            return rc;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            break;
        }
        yaml_mark_t kmark = kev.start_mark;
        bool is_merge = kev.type == YAML_SCALAR_EVENT &&
                        kev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                        !strcmp((const char *)kev.data.scalar.value, "<<");
        json_t *key = NULL;
        rc = parse_node(y, &kev, &key, err);
        yaml_event_delete(&kev);
        if (rc < 0)
            return rc;
        _cleanup_free_ char *ktext = NULL;
        rc = key_text(key, &kmark, &ktext, err);
        json_decref(key);
        if (rc < 0)
            return rc;
        yaml_event_t vev;
        if ((rc = next_event(y, &vev, err)) < 0)
            return rc;
        json_t *val = NULL;
        rc = parse_node(y, &vev, &val, err);
        yaml_event_delete(&vev);
        if (rc < 0)
            return rc;
        if (is_merge) {
            if (!merges && !(merges = json_array())) {
                json_decref(val);
                return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            }
            json_array_append_new(merges, val);
            continue;
        }
        /* OmegaConf refuses a key written twice (PyYAML alone would keep the last). */
        if (json_object_get(v, ktext)) {
            json_decref(val);
            _cleanup_free_ char *r = sbx__repr(ktext);
            return sbx__set_error(err, SBX_EINVAL,
                                  "invalid YAML at line %zu, column %zu: duplicate key %s",
                                  kmark.line + 1, kmark.column + 1, r ? r : ktext);
        }
        if (json_object_set_new(v, ktext, val) < 0)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (merges && apply_merges(v, merges) < 0)
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid YAML: '<<' must merge a mapping or a list of mappings");
    return 0;
}

static int parse_node(struct yparser *y, yaml_event_t *ev, json_t **out, sbx_error **err)
{
    int rc = 0;
    json_t *v = NULL;
    ssize_t anchor = -1;
    size_t nodes_before = y->nodes, bytes_before = y->bytes;
    if (++y->depth > YAML_MAX_DEPTH) {
        y->depth--;
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid YAML at line %zu: nesting deeper than %d levels",
                              ev->start_mark.line + 1, YAML_MAX_DEPTH);
    }
    size_t text_len = ev->type == YAML_SCALAR_EVENT ? ev->data.scalar.length : 0;
    if (ev->type != YAML_ALIAS_EVENT &&
        (rc = add_nodes(y, 1, text_len, false, &ev->start_mark, err)) < 0) {
        y->depth--;
        return rc;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        const char *text = (const char *)ev->data.scalar.value;
        const char *tag = (const char *)ev->data.scalar.tag;
        /* A plain scalar is typed; a quoted one is always a string. */
        if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && (!tag || !strcmp(tag, "!")))
            v = tag ? json_stringn(text, ev->data.scalar.length) : plain_scalar(text);
        else if (tag)
            v = tagged_scalar(tag, text, ev->data.scalar.length);
        else
            v = json_stringn(text, ev->data.scalar.length);
        if (!v) {
            _cleanup_free_ char *r = sbx__repr(text);
            rc = sbx__set_error(err, SBX_EINVAL,
                                "invalid YAML at line %zu: value %s cannot be represented in "
                                "JSON (infinities, NaN and text that is not UTF-8 are refused)",
                                ev->start_mark.line + 1, r ? r : "?");
            break;
        }
        if ((anchor = start_anchor(y, ev->data.scalar.anchor, v)) == -2)
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        break;
    }
    case YAML_ALIAS_EVENT: {
        const char *name = (const char *)ev->data.alias.anchor;
        json_t *idx = y->by_name ? json_object_get(y->by_name, name) : NULL;
        struct anchor *a = idx ? &y->anchors[json_integer_value(idx)] : NULL;
        if (!a) {
            rc = sbx__set_error(err, SBX_EINVAL, "invalid YAML at line %zu: unknown alias *%s",
                                ev->start_mark.line + 1, name);
        } else if (!a->complete) {
            rc = sbx__set_error(err, SBX_EINVAL,
                                "invalid YAML at line %zu: alias *%s is inside the node it "
                                "names; recursive structures are not supported",
                                ev->start_mark.line + 1, name);
        } else if ((rc = add_nodes(y, a->weight, a->bytes, true, &ev->start_mark, err)) == 0) {
            /* A private copy: interpolating one use must not touch the others. */
            if (!(v = json_deep_copy(a->value)))
                rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
        break;
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool seq = ev->type == YAML_SEQUENCE_START_EVENT;
        const yaml_char_t *name =
            seq ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor;
        if (!(v = seq ? json_array() : json_object()) ||
            (anchor = start_anchor(y, name, v)) == -2)
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        else
            rc = seq ? parse_sequence(y, v, err) : parse_mapping(y, v, err);
        break;
    }
    default:
        rc = sbx__set_error(err, SBX_EINVAL, "invalid YAML at line %zu: unexpected event",
                            ev->start_mark.line + 1);
        break;
    }
    y->depth--;
    if (rc < 0) {
        json_decref(v);
        return rc;
    }
    finish_anchor(y, anchor, nodes_before, bytes_before);
    *out = v;
    return 0;
}

static int parse_yaml(const char *text, json_t **out, sbx_error **err)
{
    struct yparser y = { 0 };
    if (!yaml_parser_initialize(&y.p))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    yaml_parser_set_input_string(&y.p, (const unsigned char *)text, strlen(text));
    json_t *doc = NULL;
    int rc = 0;
    bool in_doc = false, done = false;
    while (!done && rc == 0) {
        yaml_event_t ev;
        if ((rc = next_event(&y, &ev, err)) < 0)
            break;
        switch (ev.type) {
        case YAML_STREAM_START_EVENT:
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (doc)
                rc = sbx__set_error(err, SBX_EINVAL,
                                    "invalid YAML: expected one document, found several");
            in_doc = true;
            break;
        case YAML_DOCUMENT_END_EVENT:
            in_doc = false;
            break;
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        default:
            if (!in_doc || doc)
                rc = sbx__set_error(err, SBX_EINVAL, "invalid YAML: unexpected content");
            else
                rc = parse_node(&y, &ev, &doc, err);
            break;
        }
        yaml_event_delete(&ev);
    }
    for (size_t i = 0; i < y.n_anchors; i++)
        json_decref(y.anchors[i].value);
    free(y.anchors);
    json_decref(y.by_name);
    yaml_parser_delete(&y.p);
    if (rc < 0) {
        json_decref(doc);
        return rc;
    }
    *out = doc ? doc : json_null();
    return 0;
}

int sbx__parse_config_text(const char *text, json_t **out, sbx_error **err)
{
    if (!text)
        return sbx__set_error(err, SBX_EINVAL, "config text is NULL");
    /* JSON first: exact types, and the common case for bindings. */
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '{' || *p == '[') {
        json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (v) {
            *out = v;
            return 0;
        }
    }
    return parse_yaml(text, out, err);
}

/* --- ${oc.env:VAR[,default]} --------------------------------------------- */

/*
 * Interpolated text is bounded as parsed text is: the same ${oc.env:BIG}
 * written (or aliased) many times would otherwise copy one large variable
 * into every use.
 */
#define INTERPOLATED_MAX_BYTES YAML_MAX_BYTES

static int interpolate_string(const char *s, size_t *budget, json_t **replacement,
                              sbx_error **err)
{
    *replacement = NULL;
    if (!strstr(s, "${"))
        return 0;
    sbx_buf b = { 0 };
    const char *p = s;
    bool whole = false;
    json_t *whole_value = NULL;
    while (*p) {
        const char *open = strstr(p, "${");
        if (!open) {
            sbx__buf_append(&b, p, strlen(p));
            break;
        }
        /* "\${" stays literal, as OmegaConf's escape. */
        if (open > p && open[-1] == '\\') {
            sbx__buf_append(&b, p, (size_t)(open - p - 1));
            sbx__buf_append(&b, "${", 2);
            p = open + 2;
            continue;
        }
        sbx__buf_append(&b, p, (size_t)(open - p));
        const char *close = strchr(open, '}');
        if (!close) {
            sbx__buf_free(&b);
            return sbx__set_error(err, SBX_EINVAL, "unterminated interpolation in %s", s);
        }
        size_t n = (size_t)(close - open - 2);
        _cleanup_free_ char *expr = strndup(open + 2, n);
        if (!expr) {
            sbx__buf_free(&b);
            return SBX_ENOMEM;
        }
        if (strstr(expr, "${")) {
            sbx__buf_free(&b);
            return sbx__set_error(err, SBX_EINVAL,
                                  "unsupported nested interpolation in %s: sbx resolves only "
                                  "${oc.env:VAR} and ${oc.env:VAR,default} with a literal default",
                                  s);
        }
        if (strncmp(expr, "oc.env:", 7) != 0) {
            sbx__buf_free(&b);
            return sbx__set_error(err, SBX_EINVAL,
                                  "unsupported interpolation ${%s} in %s: sbx resolves only "
                                  "${oc.env:VAR} and ${oc.env:VAR,default}",
                                  expr, s);
        }
        char *name = expr + 7;
        char *def = strchr(name, ',');
        if (def)
            *def++ = 0;
        /* trim */
        while (isspace((unsigned char)*name))
            name++;
        for (char *e = name + strlen(name); e > name && isspace((unsigned char)e[-1]);)
            *--e = 0;
        if (def) {
            while (isspace((unsigned char)*def))
                def++;
            for (char *e = def + strlen(def); e > def && isspace((unsigned char)e[-1]);)
                *--e = 0;
            size_t dl = strlen(def);
            if (dl >= 2 && ((def[0] == '\'' && def[dl - 1] == '\'') ||
                            (def[0] == '"' && def[dl - 1] == '"'))) {
                def[dl - 1] = 0;
                def++;
            }
        }
        const char *val = getenv(name);
        bool is_null = false;
        if (!val) {
            if (!def) {
                sbx__buf_free(&b);
                return sbx__set_error(err, SBX_EINVAL,
                                      "Environment variable '%s' not found (in %s); set it or "
                                      "write ${oc.env:%s,default}",
                                      name, s, name);
            }
            if (!strcmp(def, "null")) {
                is_null = true;
                val = "";
            } else {
                val = def;
            }
        }
        size_t vlen = strlen(val);
        if (vlen > *budget) {
            sbx__buf_free(&b);
            return sbx__set_error(err, SBX_EINVAL,
                                  "${oc.env:%s} in %s: interpolation would produce more than %u "
                                  "MiB of text in this document; pass large values another way "
                                  "(a file, stdin)",
                                  name, s, INTERPOLATED_MAX_BYTES >> 20);
        }
        *budget -= vlen;
        if (open == s && close[1] == 0) {
            whole = true;
            whole_value = is_null ? json_null() : json_string(val);
        }
        sbx__buf_append(&b, val, vlen);
        p = close + 1;
    }
    if (whole) {
        sbx__buf_free(&b);
        *replacement = whole_value;
        return 0;
    }
    *replacement = json_string(b.data ? b.data : "");
    sbx__buf_free(&b);
    return 0;
}

/*
 * Interpolates one member of a mapping or list: a string gets its
 * replacement in `*r` (NULL when unchanged), anything else is walked.
 */
static int interpolate_value(json_t *v, size_t *budget, sbx_error **err);

static int interpolate_member(json_t *x, size_t *budget, json_t **r, sbx_error **err)
{
    *r = NULL;
    if (json_is_string(x))
        return interpolate_string(json_string_value(x), budget, r, err);
    return interpolate_value(x, budget, err) < 0 ? SBX_EINVAL : 0;
}

int sbx__interpolate(json_t *v, sbx_error **err)
{
    size_t budget = INTERPOLATED_MAX_BYTES;
    return interpolate_value(v, &budget, err);
}

static int interpolate_value(json_t *v, size_t *budget, sbx_error **err)
{
    json_t *r;
    int rc;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if ((rc = interpolate_member(x, budget, &r, err)) < 0)
                return rc;
            if (r)
                json_object_set_new(v, k, r);
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            if ((rc = interpolate_member(json_array_get(v, i), budget, &r, err)) < 0)
                return rc;
            if (r)
                json_array_set_new(v, i, r);
        }
    }
    return 0;
}
