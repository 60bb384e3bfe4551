/*
 * Sbxfile: the subset of the Dockerfile language `sbx image build` runs
 * (docs/images.md, "Commit and build"): FROM (once, first), RUN, ENV,
 * WORKDIR, COPY, USER, ENTRYPOINT, CMD; '#' comment lines; a '\' at a
 * line's end continues it. Anything else (ADD, ARG, multi-stage FROM,
 * COPY --from/--chown, heredocs, parser directives) is an error naming
 * its line.
 */
#ifndef SBX_IMAGE_SBXFILE_H
#define SBX_IMAGE_SBXFILE_H

#include "core/internal.h"

enum sbx_sbxfile_kind {
    SBXF_FROM,
    SBXF_RUN,
    SBXF_ENV,
    SBXF_WORKDIR,
    SBXF_COPY,
    SBXF_USER,
    SBXF_ENTRYPOINT,
    SBXF_CMD,
};

typedef struct {
    enum sbx_sbxfile_kind kind;
    unsigned line; /* where the instruction starts, from 1 */
    char *text;    /* "KEYWORD args": the instruction, continuations joined */
    char *args;    /* what follows the keyword, trimmed */
    /*
     * RUN/ENTRYPOINT/CMD: the exec form's words, or NULL for the shell form;
     * COPY: its sources then its destination (at least two).
     */
    char **words;
    size_t nwords;
} sbx_sbxfile_step;

typedef struct {
    sbx_sbxfile_step *steps; /* steps[0] is FROM */
    size_t n;
} sbx_sbxfile;

/* Limits on what a Sbxfile may be. */
#define SBX_SBXFILE_MAX_BYTES (1u << 20)
#define SBX_SBXFILE_MAX_STEPS 500
#define SBX_SBXFILE_MAX_LINE 65536

/* Parses `len` bytes. Errors say "line N: what was wrong". */
SBX_INTERNAL int sbx__sbxfile_parse(const char *text, size_t len, sbx_sbxfile **out,
                                    sbx_error **err);
SBX_INTERNAL void sbx__sbxfile_free(sbx_sbxfile *f);
SBX_INTERNAL const char *sbx__sbxfile_keyword(enum sbx_sbxfile_kind k);

/*
 * Applies one Dockerfile-style config instruction (ENV, WORKDIR, USER,
 * ENTRYPOINT, CMD: what `docker commit --change` takes) to an image
 * config's "config" object `cfg`.
 */
SBX_INTERNAL int sbx__image_apply_change(json_t *cfg, const char *line, sbx_error **err);

#endif
