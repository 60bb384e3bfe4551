/*
 * libFuzzer target for the linux provider's box record parser
 * (src/providers/linux/state.c): a box's record.json is written by its shim
 * in a directory the box's owner controls, so every field is input. The
 * bytes become <tmp>/boxes/<id>/record.json, read on its own and through
 * the listing (with a label filter), as `sbx ls` and `sbx gc` read it.
 * Nothing here signals or removes anything: stop and gc are not called.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char state[64], box[128], record[160];

static void remove_state(void)
{
    unlink(record);
    rmdir(box);
    char boxes[96];
    snprintf(boxes, sizeof(boxes), "%s/boxes", state);
    rmdir(boxes);
    rmdir(state);
}

static void setup(void)
{
    if (state[0])
        return;
    snprintf(state, sizeof(state), "%s/sbx-fuzz-record.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(state))
        abort();
    snprintf(box, sizeof(box), "%s/boxes", state);
    mkdir(box, 0700);
    snprintf(box, sizeof(box), "%s/boxes/sbx-0123456789ab", state);
    mkdir(box, 0700);
    snprintf(record, sizeof(record), "%s/record.json", box);
    atexit(remove_state);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    FILE *f = fopen(record, "wb");
    if (!f)
        abort();
    fwrite(data, 1, size, f);
    fclose(f);
    chmod(record, 0600);

    sbx_linux_record rec;
    if (sbx__linux_record_read(box, &rec, NULL) == SBX_OK) {
        /* What the listing and gc look at: strings are C strings, the rest typed. */
        if (!rec.id || !rec.box_dir || !json_is_object(rec.metadata) ||
            !json_is_array(rec.cgroups))
            abort();
        (void)strlen(rec.id);
        if (rec.socket)
            (void)strlen(rec.socket);
        sbx__linux_record_free(&rec);
    }

    sbx_kv labels = { 0 };
    sbx__kv_set(&labels, "run_id", "r1");
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    if (sbx__linux_list(state, &labels, &boxes, &n, NULL) == SBX_OK)
        sbx__linux_list_free(boxes, n);
    boxes = NULL;
    if (sbx__linux_list(state, NULL, &boxes, &n, NULL) == SBX_OK) {
        if (n != 1)
            abort();
        sbx__linux_list_free(boxes, n);
    }
    sbx__kv_free(&labels);
    return 0;
}
