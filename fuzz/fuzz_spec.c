/*
 * Fuzzes sandbox specs: sbx_spec_from_json on YAML/JSON text, then the
 * to_json round trip, which must be a fixed point: parsing our own output
 * gives the same spec, and copying a spec keeps it equal.
 */
#include <sbx.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;

    sbx_spec *s = NULL;
    sbx_error *e = NULL;
    if (sbx_spec_from_json(text, &s, &e) == SBX_OK) {
        char *once = NULL, *twice = NULL, *copied = NULL;
        sbx_spec *s2 = NULL;
        if (sbx_spec_to_json(s, &once, NULL) != SBX_OK)
            abort();
        if (sbx_spec_from_json(once, &s2, NULL) != SBX_OK)
            abort();
        if (sbx_spec_to_json(s2, &twice, NULL) != SBX_OK || strcmp(once, twice) != 0)
            abort();
        sbx_spec *c = sbx_spec_copy(s);
        if (!c || sbx_spec_to_json(c, &copied, NULL) != SBX_OK || strcmp(once, copied) != 0)
            abort();
        sbx_spec_free(c);
        sbx_spec_free(s2);
        sbx_free(once);
        sbx_free(twice);
        sbx_free(copied);
        sbx_spec_free(s);
    } else if (!e || !sbx_error_message(e)) {
        abort();
    }
    sbx_error_free(e);

    /* The same text as a resources mapping on a fresh spec. */
    sbx_spec *r = sbx_spec_new();
    if (r) {
        sbx_spec_set_resources_json(r, text, NULL);
        sbx_spec_set_provider_options(r, text, NULL);
        sbx_spec_free(r);
    }
    free(text);
    return 0;
}
