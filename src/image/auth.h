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
 * Whether a registry's credentials may go to a bearer token `realm` (the
 * challenge's URL: hostile input). `registry_base` is "https://host[:port]"
 * or "http://host[:port]", the registry as sbx reaches it. True only when
 * the realm is an http(s) URL without user info whose host is the
 * registry's (ports aside; Docker Hub's registry-1.docker.io and
 * index.docker.io also have auth.docker.io), and whose scheme is at least
 * the registry's (an https registry's credentials never travel over plain
 * http). Docker and containerd hand the credentials to any realm.
 */
SBX_INTERNAL bool sbx__realm_may_get_credentials(const char *registry_base, const char *realm);

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
