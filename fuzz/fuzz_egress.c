/*
 * [nat] libFuzzer target for the egress policy of nat boxes
 * (src/providers/linux/egress.c): provider_options.egress comes from any
 * spec, and its rules become an nftables ruleset loaded as the host's root.
 * The input is a JSON policy or, when it is not JSON, one rule string. What
 * parses must be normalized (a prefix of at most 32 bits with no host bits
 * set, ports in order), and the ruleset made from it may hold only the
 * characters nft syntax needs here: no quote, semicolon or brace a rule
 * could smuggle in. Pure: nothing is loaded.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rule(const struct sbx_egress_rule *r)
{
    if (r->plen > 32 || (r->lo == 0) != (r->hi == 0) || r->hi < r->lo)
        abort();
    uint32_t mask = r->plen ? 0xffffffffu << (32 - r->plen) : 0;
    if (!r->host && (r->net & ~mask))
        abort();
}

/*
 * Each rule line of the ruleset's two chains ("in" by source, "out" by
 * destination): "    ip daddr|saddr A.B.C.D/N [meta l4proto { tcp, udp } th
 * dport|sport P-Q] VERDICT", and the fixed lines around them.
 */
static void check_ruleset(const char *s)
{
    const char *lines = strstr(s, "  chain in {");
    if (!lines || !strstr(lines, "  chain out {"))
        abort();
    for (const char *p = lines; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789 ./-{},;:\n\"!=", *p))
            abort();
    /* Quotes only around "lo"; semicolons only on the two hook lines; != only on the source check. */
    int quotes = 0, semis = 0;
    for (const char *q = strchr(lines, '"'); q; q = strchr(q + 4, '"'), quotes++)
        if (strncmp(q, "\"lo\"", 4))
            abort();
    for (const char *p = strchr(lines, ';'); p; p = strchr(p + 1, ';'))
        semis++;
    const char *ne = strchr(lines, '!');
    if (quotes != 2 || semis != 4 || !ne || strncmp(ne, "!= 10.0.2.100 drop\n", 19) ||
        strchr(ne + 1, '!') || strchr(lines, '=') != ne + 1 || strchr(ne + 2, '='))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *text = malloc(size + 1);
    struct sbx_egress *eg = malloc(sizeof(*eg));
    if (!text || !eg) {
        free(text);
        free(eg);
        return 0;
    }
    memcpy(text, data, size);
    text[size] = 0;
    char why[512];
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    if (v) {
        if (sbx__egress_parse(v, eg, why, sizeof(why)) == 0) {
            for (size_t i = 0; i < eg->nallow; i++)
                check_rule(&eg->allow[i]);
            for (size_t i = 0; i < eg->ndeny; i++)
                check_rule(&eg->deny[i]);
            uint32_t hosts[] = { 0xc0000202u, 0x0a000001u };
            char *rules = sbx__egress_nft(eg, hosts, 2);
            if (rules)
                check_ruleset(rules);
            free(rules);
        } else if (!why[0]) {
            abort(); /* a refusal always says why */
        }
        json_decref(v);
    } else {
        struct sbx_egress_rule r;
        if (sbx__egress_rule_parse(text, &r, why, sizeof(why)) == 0)
            check_rule(&r);
        else if (!why[0])
            abort();
    }
    free(eg);
    free(text);
    return 0;
}
