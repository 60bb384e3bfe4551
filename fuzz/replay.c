/*
 * Replays a fuzz target's corpus without libFuzzer, so `make test` runs every
 * saved input (and ASan builds check them). Arguments: files or directories.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf)
        return -1;
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int count = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0)
            continue;
        if (!S_ISDIR(st.st_mode)) {
            failed += replay_file(argv[i]) < 0;
            count++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            failed += replay_file(path) < 0;
            count++;
        }
        if (d)
            closedir(d);
    }
    /* One TAP test per corpus: reaching here means no input crashed the parser. */
    printf("1..1\n");
    if (failed)
        printf("not ok 1 - replayed %d inputs, %d unreadable\n", count, failed);
    else
        printf("ok 1 - replayed %d inputs without a crash\n", count);
    return failed ? 1 : 0;
}
