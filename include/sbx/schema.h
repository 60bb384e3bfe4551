/*
 * sbx config schema: part of the remote kit, for provider authors.
 *
 * A provider declares its config's keys once, as a static const table of
 * field descriptors (like its sbx_provider_ops table), and gets the parsing,
 * the checks and the messages from sbx_schema_parse(), a printable effective
 * config from sbx_schema_dump() and a markdown table for its docs page from
 * sbx_schema_describe():
 *
 *   struct my_config { char *api_key; int64_t retries; double timeout_s; };
 *   static const sbx_schema_field my_fields[] = {
 *       {.key = "api_key", .type = SBX_SCHEMA_STRING, .flags = SBX_SCHEMA_SECRET,
 *        .offset = offsetof(struct my_config, api_key), .env = "MY_API_KEY",
 *        .help = "The service's API key."},
 *       {.key = "retries", .type = SBX_SCHEMA_INT, .offset = offsetof(struct my_config, retries),
 *        .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX, .int_min = 0, .int_max = 100,
 *        .default_json = "2", .help = "Create attempts after the first."},
 *       {.key = "timeout_s", .type = SBX_SCHEMA_DURATION,
 *        .offset = offsetof(struct my_config, timeout_s), .default_json = "60"},
 *       {.key = NULL},
 *   };
 *   static const sbx_schema my_schema = {SBX_SCHEMA_HEADER, .name = "mine",
 *       .fields = my_fields, .config_size = sizeof(struct my_config)};
 *
 * Then init is sbx_schema_parse(&my_schema, config_json, &cfg, err), and
 * release is sbx_schema_free(&my_schema, &cfg). docs/remote-kit/config-schema.md
 * has the whole story, with every type and message.
 *
 * The ABI grows by appending: members of sbx_schema_field and sbx_schema are
 * only ever added at their ends, never reordered or removed, and each table
 * says the size it was built with (SBX_SCHEMA_HEADER sets struct_size and
 * field_size). A table built against an older header still works: the
 * members it does not have read as 0/NULL.
 *
 * Nothing here blocks (no I/O, no locks) or keeps state. Tables are read,
 * never written; calls on different config structs may run in any threads
 * at once. sbx_schema_parse() reads the environment with getenv(), so it
 * must not race a setenv()/putenv() in another thread (POSIX's rule).
 */
#ifndef SBX_SCHEMA_H
#define SBX_SCHEMA_H

#include <sbx.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version 1: every member below. */
#define SBX_SCHEMA_VERSION 1

/*
 * A field's type, and the C member it fills (at `offset` in the config
 * struct). "Unset" is a key that is absent (or null on a nullable field)
 * with no environment variable and no default. Zero is no type, so a
 * descriptor that forgot its type is refused.
 */
typedef enum sbx_schema_type {
    SBX_SCHEMA_STRING = 1, /* char *: malloc'd copy; NULL when unset */
    SBX_SCHEMA_BOOL,       /* bool: JSON true or false */
    SBX_SCHEMA_INT,        /* int64_t: a JSON integer (1.0 is not one) */
    SBX_SCHEMA_NUMBER,     /* double: any finite JSON number */
    SBX_SCHEMA_LIST,       /* char **: NULL-ended malloc'd strings; NULL when unset */
    SBX_SCHEMA_MAP,        /* char **: NULL-ended key, value, key, value...; NULL when unset */
    SBX_SCHEMA_DURATION,   /* double: seconds >= 0, or SBX_SCHEMA_NONE for null / unset */
    SBX_SCHEMA_ENUM,       /* int: index into `choices`; -1 when unset */
    SBX_SCHEMA_JSON,       /* char *: any JSON value as compact JSON text; NULL when unset */
    SBX_SCHEMA_SECTION,    /* a nested struct of `section->config_size` bytes */
} sbx_schema_type;

/* What a duration holds for null ("none": no timeout, no deadline) and when unset. */
#define SBX_SCHEMA_NONE (-1.0)

/* Flags of a field. */
#define SBX_SCHEMA_REQUIRED (1u << 0)      /* unset is an error */
#define SBX_SCHEMA_NULLABLE (1u << 1)      /* null accepted, and means absent */
#define SBX_SCHEMA_SECRET (1u << 2)        /* its value never in a message or a dump */
#define SBX_SCHEMA_HAS_MIN (1u << 3)       /* int_min (INT) or num_min (NUMBER, DURATION) */
#define SBX_SCHEMA_HAS_MAX (1u << 4)       /* int_max or num_max */
#define SBX_SCHEMA_MIN_EXCLUSIVE (1u << 5) /* NUMBER, DURATION: > num_min, not >= */
#define SBX_SCHEMA_NONEMPTY (1u << 6)      /* STRING not "", LIST or MAP not empty */
#define SBX_SCHEMA_ABSOLUTE_PATH (1u << 7) /* STRING: starts with '/' */

struct sbx_schema;

/*
 * One key of a config mapping. Set it with designated initializers; what is
 * left out is 0/NULL. A table of fields ends with an entry whose key is NULL.
 */
typedef struct sbx_schema_field {
    const char *key;      /* the config key ("api_key") */
    sbx_schema_type type; /* SBX_SCHEMA_STRING, ... */
    size_t offset;        /* offsetof(your config struct, the member it fills) */
    unsigned flags;       /* SBX_SCHEMA_REQUIRED | ... */
    /*
     * JSON text of the value used when the key is absent and `env` gives
     * nothing ("30", "\"http\"", "[\"a\"]", "null"); checked as a config
     * value is. NULL: none.
     */
    const char *default_json;
    /*
     * An environment variable read when the key is absent, before the
     * default ("DAYTONA_API_KEY"); empty counts as unset. Its text is read
     * per the type: a string or enum as is; BOOL 1/true/yes/on or
     * 0/false/no/off; INT, NUMBER, DURATION a number; LIST comma-separated
     * items; MAP comma-separated KEY=VALUE pairs; JSON JSON text.
     */
    const char *env;
    const char *help;                 /* one line for the docs (sbx_schema_describe) */
    int64_t int_min, int_max;         /* INT bounds, inclusive, with HAS_MIN / HAS_MAX */
    double num_min, num_max;          /* NUMBER, DURATION bounds, with HAS_MIN / HAS_MAX */
    const char *const *choices;       /* ENUM: the accepted strings, NULL-ended */
    const struct sbx_schema *section; /* SECTION: the nested mapping's schema */
    /* A deprecated older name also accepted for this key (not in the known list). */
    const char *alias;
    /*
     * Words that replace the generated description after "must be" in every
     * refusal of this field ("a positive integer (execs running at once)");
     * the value seen is then not added. NULL: generated ("an integer from 1
     * to 64, got 100").
     */
    const char *what;
    /* The code of every refusal of this field. 0: SBX_ETYPE for a wrong type,
     * SBX_EINVAL for a value out of range, missing or not allowed. */
    int code;
} sbx_schema_field;

/*
 * A config mapping: the top level of a provider's config, or a section of it
 * (a SECTION field's `section`).
 */
typedef struct sbx_schema {
    int version;        /* SBX_SCHEMA_VERSION (SBX_SCHEMA_HEADER sets it) */
    size_t struct_size; /* sizeof(sbx_schema) as built (SBX_SCHEMA_HEADER) */
    size_t field_size;  /* sizeof(sbx_schema_field) as built (SBX_SCHEMA_HEADER) */
    /* The provider's name, which starts every message ("daytona: ..."); unused in a section. */
    const char *name;
    const sbx_schema_field *fields; /* ends with a field whose key is NULL */
    /* sizeof the struct the fields' offsets are in; parse zeroes all of it. */
    size_t config_size;
    /* The code for an unknown key. 0: SBX_ETYPE (the reference's constructors
     * raise TypeError for an unexpected keyword). */
    int unknown_code;
    /*
     * The unknown-key message, with {name} (the provider's name), {key} (the
     * key, escaped and cut to 64 bytes), {known} (the known keys, sorted,
     * comma-separated) and {section} (the section's dotted path, "" at the
     * top) replaced. NULL: "{name}: unknown key '{key}' (known: {known})", or
     * "{name}: unknown key '{key}' in {section} (known: {known})" in a section.
     */
    const char *unknown_message;
} sbx_schema;

/* The first members of every schema: `static const sbx_schema s = {SBX_SCHEMA_HEADER, ...};` */
#define SBX_SCHEMA_HEADER                                                                          \
    .version = SBX_SCHEMA_VERSION, .struct_size = sizeof(sbx_schema),                              \
    .field_size = sizeof(sbx_schema_field)

/*
 * Parses `json_text`, a JSON mapping (the provider's config as init gets it;
 * NULL is "{}"), into `out`, a config struct of `s->config_size` bytes:
 * zeroes it, refuses unknown keys, then fills each field in table order
 * from its key (or its alias), else its environment variable, else its
 * default, checking type and range. Messages start with the schema's name
 * and name the key ("daytona: create.retries must be an integer from 0 to
 * 100, got 500"), its variable when the value came from one, never the
 * value of a secret field; a key from the input is escaped and cut short.
 * `s` and `json_text` are borrowed for the call, not kept. What parse
 * allocates in `out` belongs to the caller, who frees it with
 * sbx_schema_free(). On failure everything parse allocated is freed and
 * `out` is left zeroed.
 * Returns SBX_OK; SBX_ETYPE for a value of the wrong type, or a text that is
 * not a mapping; SBX_EINVAL for a value out of range, a required key
 * missing, a key given under both its names, text that is not JSON, or an
 * invalid schema (a bug in the table: the message says which field);
 * the schema's unknown_code (SBX_ETYPE by default) for an unknown key; a
 * field's own code where it sets one; SBX_ENOMEM. Does not block.
 * Thread-safe, but reads the environment (see the top of this header).
 */
SBX_EXPORT int sbx_schema_parse(const sbx_schema *s, const char *json_text, void *out,
                                sbx_error **err);

/*
 * Frees what sbx_schema_parse() put in `out` (strings, lists, maps, JSON
 * text, in nested sections too) and zeroes the whole struct; a second call
 * does nothing more. NULL `s` or `out` is a no-op, as is an invalid schema
 * (parse never filled anything with one). Does not block; thread-safe for
 * different `out`s.
 */
SBX_EXPORT void sbx_schema_free(const sbx_schema *s, void *out);

/*
 * The effective config in `cfg` (as parse filled it) as one compact JSON
 * object, keys in table order, sections nested: unset values are null, a
 * duration of none is null, an enum its string, a JSON field its value, and
 * every secret field that is set is "***" (for `sbx providers` and debug
 * logs). `cfg` is borrowed; `*json_out` is the caller's, freed with
 * sbx_free(), and written only on success. Returns SBX_OK, SBX_EINVAL (an
 * invalid schema, NULL arguments, or a string in `cfg` that is not UTF-8)
 * or SBX_ENOMEM. Does not block; thread-safe.
 */
SBX_EXPORT int sbx_schema_dump(const sbx_schema *s, const void *cfg, char **json_out,
                               sbx_error **err);

/*
 * A markdown table of the schema for a provider's docs page, one row a key
 * (section keys dotted, "create.retries"): | key | type | default | env |
 * help |, the type as messages describe it ("an integer from 0 to 100"),
 * with "secret" and a deprecated alias noted in the help cell. A secret
 * field's default shows as ***. `*markdown_out` is the caller's, freed with
 * sbx_free(), and written only on success. Returns SBX_OK, SBX_EINVAL (an
 * invalid schema or NULL arguments) or SBX_ENOMEM. Does not block;
 * thread-safe.
 */
SBX_EXPORT int sbx_schema_describe(const sbx_schema *s, char **markdown_out, sbx_error **err);

#ifdef __cplusplus
}
#endif

#endif
