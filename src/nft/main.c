/*
 * sbx-nft: loads an nftables ruleset (nft syntax, on stdin) into the
 * network namespace it runs in, through libnftables, and exits 0, or prints
 * libnftables' error and exits 1.
 *
 * [nat] sbx-shim runs it, setns'd into a nat box's namespace, to load the
 * box's egress policy (src/shim/nat.c). It is its own small program because
 * the shim is linked statically and libnftables comes only as a shared
 * library; and it runs before the box's first process, as the host's root,
 * on input the shim generated (src/providers/linux/egress.c), never on
 * anything a box wrote.
 */
#include <nftables/libnftables.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 256 allow and 256 deny rules of ~100 bytes each, and the frame: far below this bound. */
#define MAX_RULESET (1 << 20)

int main(int argc, char **argv)
{
    (void)argv;
    if (argc != 1 || isatty(0)) {
        fprintf(stderr, "usage: sbx-nft < RULESET (started by sbx-shim in a box's network "
                        "namespace)\n");
        return 2;
    }
    char *buf = malloc(MAX_RULESET + 1);
    size_t n = 0;
    ssize_t k;
    while (buf && n < MAX_RULESET && (k = read(0, buf + n, MAX_RULESET - n)) > 0)
        n += (size_t)k;
    if (!buf || n == 0 || n >= MAX_RULESET) {
        fprintf(stderr, "sbx-nft: %s\n", !buf ? "out of memory" : "empty or over-long ruleset");
        free(buf);
        return 1;
    }
    buf[n] = 0;
    struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!nft) {
        fprintf(stderr, "sbx-nft: cannot make an nftables context\n");
        free(buf);
        return 1;
    }
    nft_ctx_buffer_output(nft);
    nft_ctx_buffer_error(nft);
    int rc = nft_run_cmd_from_buffer(nft, buf);
    if (rc != 0) {
        const char *e = nft_ctx_get_error_buffer(nft);
        fprintf(stderr, "nftables: %s", e && *e ? e : "the ruleset was refused\n");
    }
    nft_ctx_free(nft);
    free(buf);
    return rc == 0 ? 0 : 1;
}
