/*
 * YAML (and JSON) text to jansson values, through libyaml's event parser.
 * Scalars are typed as PyYAML (YAML 1.1) types them, since reference configs
 * are loaded by OmegaConf over PyYAML: null/~, true/false/yes/no/on/off,
 * ints (with 0x/0o and underscores), floats (.inf/.nan). Quoted scalars are
 * always strings. Anchors and aliases work; merge keys (<<) are applied.
 */
#include "internal.h"

#include <ctype.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>

#include <yaml.h>

struct anchor {
    char *name;
    json_t *value;
};

struct yparser {
    yaml_parser_t p;
    struct anchor *anchors;
    size_t n_anchors;
    int depth;
};

#define YAML_MAX_DEPTH 256

static bool ieq(const char *a, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(a, *set) == 0)
            return true;
    return false;
}

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

    /* Integers: [-+]?(0|[1-9][0-9_]*) | 0x[0-9a-fA-F_]+ | 0o?[0-7_]+ */
    const char *p = s;
    bool neg = false;
    if (*p == '-' || *p == '+') {
        neg = *p == '-';
        p++;
    }
    if (*p && isdigit((unsigned char)*p)) {
        char digits[80];
        size_t k = 0;
        int base = 10;
        const char *q = p;
        if (q[0] == '0' && (q[1] == 'x' || q[1] == 'X')) {
            base = 16;
            q += 2;
        } else if (q[0] == '0' && q[1] == 'o') {
            base = 8;
            q += 2;
        } else if (q[0] == '0' && q[1]) {
            base = 8;
            q += 1;
        }
        bool ok = *q != 0;
        for (; *q && ok; q++) {
            if (*q == '_')
                continue;
            if (!isxdigit((unsigned char)*q) || k + 1 >= sizeof(digits)) {
                ok = false;
                break;
            }
            digits[k++] = *q;
        }
        if (ok && k) {
            digits[k] = 0;
            errno = 0;
            char *end = NULL;
            long long v = strtoll(digits, &end, base);
            if (!errno && end && !*end)
                return json_integer(neg ? -v : v);
        }
    }
    /* Floats, as PyYAML: needs a dot, or is .inf/.nan. */
    static const char *const infs[] = { ".inf", ".Inf", ".INF", NULL };
    static const char *const nans[] = { ".nan", ".NaN", ".NAN", NULL };
    if (ieq(p, infs))
        return json_real(neg ? -INFINITY : INFINITY); /* jansson refuses: falls to NULL */
    if (ieq(s, nans))
        return NULL;
    if (strchr(s, '.') && (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1])))) {
        char buf[128];
        size_t k = 0;
        for (const char *q = s; *q && k + 1 < sizeof(buf); q++)
            if (*q != '_')
                buf[k++] = *q;
        buf[k] = 0;
        char *end = NULL;
        double v = strtod(buf, &end);
        if (end && !*end && isfinite(v))
            return json_real(v);
    }
    return json_string(s);
}

static int perr(struct yparser *y, sbx_error **err)
{
    return sbx__set_error(err, SBX_EINVAL, "invalid YAML at line %zu, column %zu: %s",
                          y->p.problem_mark.line + 1, y->p.problem_mark.column + 1,
                          y->p.problem ? y->p.problem : "syntax error");
}

static int save_anchor(struct yparser *y, const yaml_char_t *name, json_t *v)
{
    if (!name)
        return 0;
    struct anchor *a = realloc(y->anchors, (y->n_anchors + 1) * sizeof(*a));
    if (!a)
        return -1;
    y->anchors = a;
    a[y->n_anchors].name = strdup((const char *)name);
    a[y->n_anchors].value = json_incref(v);
    y->n_anchors++;
    return 0;
}

static int parse_node(struct yparser *y, yaml_event_t *ev, json_t **out, sbx_error **err);

static int next_event(struct yparser *y, yaml_event_t *ev, sbx_error **err)
{
    if (!yaml_parser_parse(&y->p, ev))
        return perr(y, err);
    return 0;
}

static int merge_into(json_t *obj, json_t *src)
{
    /* "<<": a mapping or a list of mappings; keys already present win. */
    if (json_is_object(src)) {
        const char *k;
        json_t *v;
        json_object_foreach(src, k, v) {
            if (!json_object_get(obj, k))
                json_object_set(obj, k, v);
        }
        return 0;
    }
    if (json_is_array(src)) {
        for (size_t i = 0; i < json_array_size(src); i++)
            if (merge_into(obj, json_array_get(src, i)) < 0)
                return -1;
        return 0;
    }
    return -1;
}

static int parse_node(struct yparser *y, yaml_event_t *ev, json_t **out, sbx_error **err)
{
    int rc = 0;
    json_t *v = NULL;
    if (++y->depth > YAML_MAX_DEPTH) {
        y->depth--;
        return sbx__set_error(err, SBX_EINVAL, "invalid YAML: nesting deeper than %d levels",
                              YAML_MAX_DEPTH);
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        const char *text = (const char *)ev->data.scalar.value;
        if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !ev->data.scalar.tag)
            v = plain_scalar(text);
        else if (ev->data.scalar.tag && !strcmp((char *)ev->data.scalar.tag, YAML_INT_TAG))
            v = plain_scalar(text);
        else
            v = json_stringn(text, ev->data.scalar.length);
        if (!v) {
            rc = sbx__set_error(err, SBX_EINVAL,
                                "invalid YAML at line %zu: value %s cannot be represented",
                                ev->start_mark.line + 1, text);
            break;
        }
        rc = save_anchor(y, ev->data.scalar.anchor, v);
        break;
    }
    case YAML_ALIAS_EVENT: {
        for (size_t i = y->n_anchors; i-- > 0;) {
            if (!strcmp(y->anchors[i].name, (const char *)ev->data.alias.anchor)) {
                v = json_incref(y->anchors[i].value);
                break;
            }
        }
        if (!v)
            rc = sbx__set_error(err, SBX_EINVAL, "invalid YAML: unknown alias *%s",
                                (const char *)ev->data.alias.anchor);
        break;
    }
    case YAML_SEQUENCE_START_EVENT: {
        v = json_array();
        if (save_anchor(y, ev->data.sequence_start.anchor, v) < 0)
            rc = SBX_ENOMEM;
        for (;;) {
            yaml_event_t cev;
            if ((rc = next_event(y, &cev, err)) < 0)
                break;
            if (cev.type == YAML_SEQUENCE_END_EVENT) {
                yaml_event_delete(&cev);
                break;
            }
            json_t *item = NULL;
            rc = parse_node(y, &cev, &item, err);
            yaml_event_delete(&cev);
            if (rc < 0)
                break;
            json_array_append_new(v, item);
        }
        break;
    }
    case YAML_MAPPING_START_EVENT: {
        v = json_object();
        if (save_anchor(y, ev->data.mapping_start.anchor, v) < 0)
            rc = SBX_ENOMEM;
        json_t *merges = NULL;
        for (;;) {
            yaml_event_t kev;
            if ((rc = next_event(y, &kev, err)) < 0)
                break;
            if (kev.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&kev);
                break;
            }
            json_t *key = NULL;
            bool is_merge = kev.type == YAML_SCALAR_EVENT &&
                            kev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                            !strcmp((const char *)kev.data.scalar.value, "<<");
            rc = parse_node(y, &kev, &key, err);
            yaml_event_delete(&kev);
            if (rc < 0)
                break;
            yaml_event_t vev;
            if ((rc = next_event(y, &vev, err)) < 0) {
                json_decref(key);
                break;
            }
            json_t *val = NULL;
            rc = parse_node(y, &vev, &val, err);
            yaml_event_delete(&vev);
            if (rc < 0) {
                json_decref(key);
                break;
            }
            if (is_merge) {
                if (!merges)
                    merges = json_array();
                json_array_append_new(merges, val);
                json_decref(key);
                continue;
            }
            /* JSON keys are strings; YAML's 1 or true keys become their text (as OmegaConf). */
            char *ktext;
            if (json_is_string(key))
                ktext = strdup(json_string_value(key));
            else if (json_is_null(key))
                ktext = strdup("null");
            else
                ktext = json_dumps(key, JSON_ENCODE_ANY);
            json_decref(key);
            if (!ktext) {
                json_decref(val);
                rc = SBX_ENOMEM;
                break;
            }
            json_object_set_new(v, ktext, val);
            free(ktext);
        }
        if (rc == 0 && merges && merge_into(v, merges) < 0)
            rc = sbx__set_error(err, SBX_EINVAL, "invalid YAML: '<<' must merge mappings");
        json_decref(merges);
        break;
    }
    default:
        rc = sbx__set_error(err, SBX_EINVAL, "invalid YAML: unexpected event");
        break;
    }
    y->depth--;
    if (rc < 0) {
        json_decref(v);
        return rc;
    }
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
    for (size_t i = 0; i < y.n_anchors; i++) {
        free(y.anchors[i].name);
        json_decref(y.anchors[i].value);
    }
    free(y.anchors);
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

static int interpolate_string(const char *s, json_t **replacement, sbx_error **err)
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
        if (open == s && close[1] == 0) {
            whole = true;
            whole_value = is_null ? json_null() : json_string(val);
        }
        sbx__buf_append(&b, val, strlen(val));
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

int sbx__interpolate(json_t *v, sbx_error **err)
{
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if (json_is_string(x)) {
                json_t *r = NULL;
                int rc = interpolate_string(json_string_value(x), &r, err);
                if (rc < 0)
                    return rc;
                if (r)
                    json_object_set_new(v, k, r);
            } else if (sbx__interpolate(x, err) < 0) {
                return SBX_EINVAL;
            }
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *x = json_array_get(v, i);
            if (json_is_string(x)) {
                json_t *r = NULL;
                int rc = interpolate_string(json_string_value(x), &r, err);
                if (rc < 0)
                    return rc;
                if (r)
                    json_array_set_new(v, i, r);
            } else if (sbx__interpolate(x, err) < 0) {
                return SBX_EINVAL;
            }
        }
    }
    return 0;
}
