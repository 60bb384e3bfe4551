/*
 * Fuzzes config text: YAML/JSON parsing with interpolation
 * (sbx_config_to_json) and provider config resolution. The first line of the
 * input is also used as a `ref` against the rest as the merged config, so
 * names, inline mappings and documents are all exercised.
 */
#include <sbx.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void resolve_both(const char *ref, const char *doc)
{
    char *out = NULL;
    sbx_error *e = NULL;
    if (sbx_resolve_provider_config(ref, doc, &out, &e) == SBX_OK) {
        /* What resolves is JSON that loads back (unless it holds literal "${"). */
        char *again = NULL;
        if (!strstr(out, "${") && sbx_config_to_json(out, &again, NULL) != SBX_OK)
            abort();
        sbx_free(again);
    } else if (!e || !sbx_error_message(e)) {
        abort();
    }
    sbx_free(out);
    sbx_error_free(e);
    out = NULL;
    e = NULL;
    sbx_resolve_provider_metadata(ref, doc, &out, &e);
    sbx_free(out);
    sbx_error_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;

    char *json = NULL;
    sbx_error *e = NULL;
    if (sbx_config_to_json(text, &json, &e) == SBX_OK) {
        /*
         * Our own output is JSON and loads to the same text; a literal "${"
         * (from an escaped "\${") would be interpolated again, so skip those.
         */
        char *again = NULL;
        if (!strstr(json, "${") &&
            (sbx_config_to_json(json, &again, NULL) != SBX_OK || strcmp(json, again) != 0))
            abort();
        sbx_free(again);
        resolve_both("sandbox", json);
    }
    sbx_free(json);
    sbx_error_free(e);

    /* The whole input as an inline ref, then line 1 as a ref into the rest. */
    resolve_both(text, NULL);
    char *nl = strchr(text, '\n');
    if (nl) {
        *nl = 0;
        resolve_both(text, nl + 1);
    }

    char *img = NULL;
    if (sbx_rewrite_image("docker.io/library/python:3.12", nl ? nl + 1 : text, &img, NULL) ==
        SBX_OK)
        sbx_free(img);
    free(text);
    return 0;
}
