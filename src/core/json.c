/* JSON helpers: Python-style type names and reprs for the reference's messages. */
#include "internal.h"

#include <stdio.h>

const char *sbx__json_typename(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "dict";
    case JSON_ARRAY:
        return "list";
    case JSON_STRING:
        return "str";
    case JSON_INTEGER:
        return "int";
    case JSON_REAL:
        return "float";
    case JSON_TRUE:
    case JSON_FALSE:
        return "bool";
    case JSON_NULL:
        return "NoneType";
    }
    return "object";
}

static void repr_into(sbx_buf *b, const json_t *v)
{
    char num[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        sbx__buf_append(b, "{", 1);
        const char *k;
        json_t *x;
        bool first = true;
        json_object_foreach((json_t *)v, k, x) {
            if (!first)
                sbx__buf_append(b, ", ", 2);
            first = false;
            char *kr = sbx__repr(k);
            if (kr)
                sbx__buf_printf(b, "%s: ", kr);
            free(kr);
            repr_into(b, x);
        }
        sbx__buf_append(b, "}", 1);
        break;
    }
    case JSON_ARRAY: {
        sbx__buf_append(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                sbx__buf_append(b, ", ", 2);
            repr_into(b, json_array_get(v, i));
        }
        sbx__buf_append(b, "]", 1);
        break;
    }
    case JSON_STRING: {
        char *r = sbx__repr(json_string_value(v));
        if (r)
            sbx__buf_append(b, r, strlen(r));
        free(r);
        break;
    }
    case JSON_INTEGER:
        sbx__buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        sbx__fmt_float(json_real_value(v), num, sizeof(num));
        sbx__buf_append(b, num, strlen(num));
        break;
    case JSON_TRUE:
        sbx__buf_append(b, "True", 4);
        break;
    case JSON_FALSE:
        sbx__buf_append(b, "False", 5);
        break;
    case JSON_NULL:
        sbx__buf_append(b, "None", 4);
        break;
    }
}

char *sbx__json_repr(const json_t *v)
{
    sbx_buf b = { 0 };
    if (!v)
        return strdup("None");
    repr_into(&b, v);
    return b.data ? b.data : strdup("");
}

char *sbx__json_dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
}
