/*
 * libFuzzer target for the Sbxfile parser (src/image/sbxfile.c): a build
 * file may be anyone's. Whatever the bytes, the parser returns a file that
 * starts with FROM, whose steps each have a known kind, a line within the
 * input, text and args, and COPY at least two words none of which climbs
 * with "..", or an error with a message; it never reads past the input.
 * Each config step is then applied (sbx__image_apply_change, what `sbx
 * commit --change` takes too): it succeeds or says why, and leaves Env an
 * array of strings and Entrypoint/Cmd arrays of strings.
 */
#include "image/sbxfile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so reading past the input is caught by ASan. */
    char *text = malloc(size ? size : 1);
    if (!text)
        abort();
    memcpy(text, data, size);
    unsigned lines = 1;
    for (size_t i = 0; i < size; i++)
        lines += text[i] == '\n';
    sbx_sbxfile *f = NULL;
    sbx_error *e = NULL;
    int rc = sbx__sbxfile_parse(text, size, &f, &e);
    if (rc == SBX_OK) {
        if (!f || f->n == 0 || f->steps[0].kind != SBXF_FROM || e)
            abort();
        for (size_t i = 0; i < f->n; i++) {
            const sbx_sbxfile_step *s = &f->steps[i];
            if (s->kind > SBXF_CMD || s->line < 1 || s->line > lines || !s->text || !s->args)
                abort();
            if (i > 0 && s->kind == SBXF_FROM)
                abort();
            if (s->kind == SBXF_COPY && s->nwords < 2)
                abort();
            for (size_t k = 0; s->kind == SBXF_COPY && k + 1 < s->nwords; k++)
                if (!strcmp(s->words[k], "..") || strstr(s->words[k], "../") == s->words[k] ||
                    strstr(s->words[k], "/../"))
                    abort();
        }
        json_t *cfg = json_object();
        for (size_t i = 1; cfg && i < f->n; i++) {
            const sbx_sbxfile_step *s = &f->steps[i];
            if (s->kind == SBXF_RUN || s->kind == SBXF_COPY)
                continue;
            sbx_error *ce = NULL;
            if (sbx__image_apply_change(cfg, s->text, &ce) < 0 && !ce)
                abort();
            sbx_error_free(ce);
            static const char *const arrays[] = {"Env", "Entrypoint", "Cmd"};
            for (size_t k = 0; k < 3; k++) {
                json_t *a = json_object_get(cfg, arrays[k]);
                size_t j;
                json_t *v;
                if (a && !json_is_array(a))
                    abort();
                json_array_foreach(a, j, v) if (!json_is_string(v)) abort();
            }
        }
        json_decref(cfg);
        sbx__sbxfile_free(f);
    } else if (!e || !sbx_error_message(e) || f) {
        abort();
    }
    sbx_error_free(e);
    free(text);
    return 0;
}
