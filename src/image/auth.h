/*
 * Registry authentication pieces: the WWW-Authenticate challenge (hostile
 * input: bounded, fuzzed) and credentials from Docker's config.json
 * (`auths`, `credHelpers`, `credsStore`).
 */
#ifndef SBX_IMAGE_AUTH_H
#define SBX_IMAGE_AUTH_H

#include "core/internal.h"

#define SBX_WWW_AUTH_MAX 8192

typedef struct sbx_www_auth {
    char *scheme; /* "bearer" or "basic" (lower case), else what the server said */
    char *realm;
    char *service;
    char *scope;
    char *error;
} sbx_www_auth;

/* Parses the first challenge of a WWW-Authenticate value. 0, or -1 when malformed. */
SBX_INTERNAL int sbx__www_auth_parse(const char *value, size_t len, sbx_www_auth *out);
SBX_INTERNAL void sbx__www_auth_free(sbx_www_auth *a);

/*
 * Credentials for `registry` (as a reference names it: "docker.io",
 * "host:port") from DIR/config.json, DIR being `config_dir`, else
 * $DOCKER_CONFIG, else ~/.docker. Returns 1 with *user and *secret set, 0
 * when none are configured, or a negative code (a helper that failed, a
 * malformed file).
 */
SBX_INTERNAL int sbx__docker_credentials(const char *config_dir, const char *registry,
                                         char **user, char **secret, sbx_error **err);

#endif
