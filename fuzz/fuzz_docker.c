/*
 * libFuzzer target for what the docker provider parses from outside
 * (src/providers/docker): the engine's error bodies, the lines of its pull
 * stream, API version strings, the provider config, an inspect answer's port
 * bindings (the endpoint), the exec session's multiplexed stream, the
 * archive API's path stat header and its one-file tar (agent: false), the time
 * prefix of a log message (logs.c). The first byte picks which; the rest is the input. An error text must be printable, one
 * line and at most 512 bytes; a config that parses must free cleanly.
 */
#include "core/internal.h"
#include "providers/docker/docker.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Case 7's directory: made once, removed (empty: each case unlinks its file) at exit. */
static char untar_dir[64];
static void untar_dir_remove(void)
{
    rmdir(untar_dir);
}

/* Payload bytes must come from the input and name a stream 0..2. */
static int count_out(int stream, const uint8_t *p, size_t n, void *data)
{
    (void)p;
    if (stream < 0 || stream > 2)
        abort();
    *(size_t *)data += n;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] % 9) {
    case 0: {
        char *t = sbx__dk_error_text(in, n);
        if (!t || strlen(t) > 512)
            abort();
        for (const char *p = t; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                abort();
        free(t);
        break;
    }
    case 1: {
        json_t *obj = NULL;
        const char *status, *id;
        long long cur, tot;
        char *msg = NULL;
        int r = sbx__dk_pull_line(in, n, &obj, &status, &id, &cur, &tot, &msg);
        if ((r == 1) != (msg != NULL) || cur < 0 || tot < 0)
            abort();
        free(msg);
        json_decref(obj);
        break;
    }
    case 2: {
        char *s = strndup(in, n);
        if (s) {
            int v = sbx__dk_version_num(s);
            if (v < 0 || v > 9999)
                abort();
            free(s);
        }
        break;
    }
    case 3: {
        char *s = strndup(in, n);
        struct dk_config c;
        sbx_error *e = NULL;
        if (s && sbx__dk_config_parse(s, &c, &e) == SBX_OK)
            sbx__dk_config_free(&c);
        sbx_error_free(e);
        free(s);
        break;
    }
    case 5: {
        /* The multiplexed stream, fed in two pieces split at a point the input picks. */
        struct sbx_dk_demux d;
        sbx__dk_demux_init(&d);
        size_t cut = n ? (unsigned char)in[0] % (n + 1) : 0;
        size_t total = 0;
        if (sbx__dk_demux_feed(&d, (const uint8_t *)in, cut, count_out, &total) == 0)
            sbx__dk_demux_feed(&d, (const uint8_t *)in + cut, n - cut, count_out, &total);
        if (total > n)
            abort();
        break;
    }
    case 6: {
        char *s = strndup(in, n);
        unsigned long long mode;
        char *link = NULL;
        long long sz = 0;
        if (s && sbx__dk_path_stat_parse(s, &mode, &link, &sz) < 0 && link)
            abort();
        if (link && strlen(link) >= 4096)
            abort();
        if (s && sz < -1)
            abort();
        free(link);
        free(s);
        break;
    }
    case 7: {
        /* A download's tar: only a regular file may come out, here, never a link. */
        char *dir = untar_dir;
        if (!dir[0]) {
            snprintf(untar_dir, sizeof(untar_dir), "/tmp/sbx-fuzz-docker.XXXXXX");
            if (!mkdtemp(untar_dir))
                abort();
            atexit(untar_dir_remove);
        }
        int fd = memfd_create("tar", MFD_CLOEXEC);
        if (fd < 0 || write(fd, in, n) != (ssize_t)n || lseek(fd, 0, SEEK_SET) != 0)
            abort();
        char out[128], msg[256];
        snprintf(out, sizeof(out), "%s/out", dir);
        if (sbx__dk_untar_one(fd, out, msg, sizeof(msg)) == 0) {
            struct stat st;
            if (lstat(out, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 07000))
                abort();
            unlink(out);
        }
        close(fd);
        break;
    }
    case 8: {
        /* A log message's time prefix: within the bytes, a sane time, or -1. */
        double t = -1;
        long k = sbx__dk_log_time(in, n, &t);
        if (k != -1 && (k < 21 || (size_t)k > n || in[k - 1] != ' ' || !(t > -1e6 && t < 3e11)))
            abort();
        break;
    }
    case 4: {
        /* An inspect answer's port bindings, port 8080. */
        json_t *info = json_loadb(in, n, 0, NULL);
        char *url = NULL;
        sbx_error *e = NULL;
        if (sbx__dk_endpoint_url(info, 8080, "::1", &url, &e) == SBX_OK &&
            (!url || strncmp(url, "http://", 7) || strlen(url) > 100))
            abort();
        free(url);
        sbx_error_free(e);
        json_decref(info);
        break;
    }
    }
    return 0;
}
