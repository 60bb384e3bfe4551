/*
 * An OCI distribution (v2) client that pulls an image into an OCI layout
 * (image/layout.h): the manifest chain, the config and every layer, each
 * verified against its digest as it streams, layers fetched in parallel
 * (curl multi), resumed with HTTP Range after a broken connection, retried
 * with backoff. Blocking: run it on a worker thread.
 *
 * A registry is hostile: every document is bounded, a manifest whose
 * declared sizes pass opts->max_bytes or the free space is refused before a
 * byte of its blobs, a blob never grows past its declared size, and a pull
 * that fails for anything but a broken connection or a cancel leaves no
 * partial blob behind (those two keep theirs for the next pull to resume).
 */
#ifndef SBX_IMAGE_REGISTRY_H
#define SBX_IMAGE_REGISTRY_H

#include "core/internal.h"

#include <stdint.h>

typedef enum {
    SBX_PULL_WAITING,
    SBX_PULL_DOWNLOADING,
    SBX_PULL_VERIFYING,
    SBX_PULL_DONE,
    SBX_PULL_CACHED,
    SBX_PULL_RETRYING,
} sbx_pull_state;

SBX_INTERNAL const char *sbx__pull_state_name(sbx_pull_state s);

/* One blob's progress; `kind` is "manifest", "config" or "layer". Called on the pulling thread. */
typedef void (*sbx_pull_progress_cb)(const char *digest, const char *kind, uint64_t done,
                                     uint64_t total, sbx_pull_state state, void *data);

typedef struct sbx_pull_opts {
    const char *platform;      /* "os/arch[/variant]"; NULL: the host's */
    char **mirrors;            /* NULL-ended; for docker.io: "host[:port]" or "https://host" */
    char **insecure;           /* NULL-ended "host[:port]" that may be reached over plain HTTP */
    char **certs_dirs;         /* NULL-ended; NULL: /etc/sbx/certs.d, /etc/docker/certs.d */
    const char *docker_config; /* directory of config.json; NULL: $DOCKER_CONFIG, ~/.docker */
    int parallel;              /* layers at once; 0: 3 */
    int retries;               /* per blob and request; 0: 5 */
    sbx_pull_progress_cb progress;
    void *data;
    bool (*cancelled)(void *data); /* polled; true stops the pull (partials kept) */
    /*
     * Bytes the config and layers of one image may declare, each and all
     * together; 0: no bound but the free space. A manifest past it, or past
     * the free space of the layout's filesystem, is refused before any blob
     * is fetched, with `max_bytes_hint` (what to raise) in the error.
     */
    uint64_t max_bytes;
    const char *max_bytes_hint;
} sbx_pull_opts;

/*
 * Pulls `ref` (any Docker reference) into the layout at `layout` (made when
 * missing) and tags its image manifest there with the canonical reference,
 * which *canonical receives (malloc'd). SBX_EINVAL for a bad reference,
 * SBX_ENOENT for an unknown image or platform, SBX_EAUTH for missing or refused
 * credentials, SBX_EIO for the registry's or the network's failures,
 * SBX_ECANCELED when cancelled.
 */
SBX_INTERNAL int sbx__registry_pull(const char *layout, const char *ref, const sbx_pull_opts *o,
                                    char **canonical, sbx_error **err);

#endif
