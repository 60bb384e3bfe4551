/*
 * The Sbxfile parser (src/image/sbxfile.c) and the config changes it shares
 * with `sbx commit --change`: steps, their lines across comments and
 * continuations, exec and shell forms, and errors that name the line.
 */
#include "tap.h"

#include "image/sbxfile.h"

static sbx_sbxfile *parse_ok(const char *text)
{
    sbx_sbxfile *f = NULL;
    sbx_error *e = NULL;
    if (sbx__sbxfile_parse(text, strlen(text), &f, &e) != SBX_OK)
        TAP_FAIL("parse: %s", sbx_error_message(e));
    return f;
}

static char *parse_err(const char *text)
{
    static char msg[512];
    sbx_sbxfile *f = NULL;
    sbx_error *e = NULL;
    if (sbx__sbxfile_parse(text, strlen(text), &f, &e) == SBX_OK)
        TAP_FAIL("parsed: %s", text);
    snprintf(msg, sizeof(msg), "%s", sbx_error_message(e));
    sbx_error_free(e);
    return msg;
}

static void test_steps_and_lines(void)
{
    sbx_sbxfile *f = parse_ok("# a comment\n"
                              "\n"
                              "from bb\n"
                              "RUN echo a && \\\n"
                              "  # inside\n"
                              "  echo b\n"
                              "COPY [\"a b\", \"/dst/\"]\r\n"
                              "CMD [\"/bin/sh\", \"-c\", \"x\"]\n"
                              "ENTRYPOINT run me\n"
                              "ENV A=1 B=2");
    TAP_EQ_INT(f->n, 6);
    TAP_EQ_INT(f->steps[5].line, 10);
    TAP_EQ_INT(f->steps[0].kind, SBXF_FROM);
    TAP_EQ_INT(f->steps[0].line, 3);
    TAP_EQ_STR(f->steps[0].args, "bb");
    TAP_EQ_INT(f->steps[1].kind, SBXF_RUN);
    TAP_EQ_INT(f->steps[1].line, 4);
    TAP_EQ_STR(f->steps[1].args, "echo a &&  echo b");
    TAP_EQ_INT(f->steps[2].line, 7);
    TAP_EQ_INT(f->steps[2].nwords, 2);
    TAP_EQ_STR(f->steps[2].words[0], "a b");
    TAP_EQ_INT(f->steps[3].nwords, 3);
    TAP_NULL(f->steps[4].words);
    TAP_EQ_STR(f->steps[4].text, "ENTRYPOINT run me");
    sbx__sbxfile_free(f);
}

static void test_errors_name_the_line(void)
{
    TAP_CONTAINS(parse_err("FROM a\nRUN x\n\nADD a b\n"), "line 4: ADD is not supported");
    TAP_CONTAINS(parse_err("FROM a\nFROM b\n"), "line 2: a second FROM: multi-stage");
    TAP_CONTAINS(parse_err("FROM a AS b\n"), "line 1: FROM takes one image name");
    TAP_CONTAINS(parse_err("RUN x\n"), "line 1: the first instruction must be FROM");
    TAP_CONTAINS(parse_err("FROM a\nCOPY x/../../y /z\n"), "line 2: COPY source");
    TAP_CONTAINS(parse_err("FROM a\nCOPY --from=b x /z\n"), "not supported");
    TAP_CONTAINS(parse_err("FROM a\nCOPY x\n"), "line 2: COPY needs SOURCE... DEST");
    TAP_CONTAINS(parse_err("FROM a\n\\\nCMD [1]\n"), "line 2: CMD's exec form");
    TAP_CONTAINS(parse_err("FROM a\nFOO bar\n"), "line 2: unknown instruction FOO");
    TAP_CONTAINS(parse_err("FROM a\nRUN\n"), "line 2: RUN needs arguments");
    TAP_CONTAINS(parse_err("# only\n"), "no instructions");
    TAP_CONTAINS(parse_err("FROM a\nENV =x\n"), "line 2: ENV needs KEY=VALUE");
    char nul[] = "FROM a\0\n";
    sbx_sbxfile *f = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__sbxfile_parse(nul, sizeof(nul) - 1, &f, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "NUL");
    sbx_error_free(e);
}

static void test_changes(void)
{
    json_t *cfg = json_pack("{s:[s, s], s:[s]}", "Env", "PATH=/bin", "A=1", "Cmd", "sh");
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__image_apply_change(cfg, "ENV A=2 B=3", &e), SBX_OK);
    TAP_EQ_INT(sbx__image_apply_change(cfg, "env C hello world", &e), SBX_OK);
    TAP_EQ_INT(sbx__image_apply_change(cfg, "WORKDIR /a", &e), SBX_OK);
    TAP_EQ_INT(sbx__image_apply_change(cfg, "WORKDIR b", &e), SBX_OK);
    TAP_EQ_INT(sbx__image_apply_change(cfg, "USER 1000:1000", &e), SBX_OK);
    TAP_EQ_INT(sbx__image_apply_change(cfg, "ENTRYPOINT [\"/bin/app\"]", &e), SBX_OK);
    TAP_EQ_INT(sbx__image_apply_change(cfg, "CMD run it", &e), SBX_OK);
    char *t = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
    TAP_EQ_STR(t, "{\"Cmd\":[\"/bin/sh\",\"-c\",\"run it\"],\"Entrypoint\":[\"/bin/app\"],"
                  "\"Env\":[\"PATH=/bin\",\"A=2\",\"B=3\",\"C=hello world\"],"
                  "\"User\":\"1000:1000\",\"WorkingDir\":\"/a/b\"}");
    free(t);
    TAP_EQ_INT(sbx__image_apply_change(cfg, "RUN x", &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "not supported");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx__image_apply_change(cfg, "CMD [\"a\", 2]", &e), SBX_EINVAL);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx__image_apply_change(cfg, "USER a b", &e), SBX_EINVAL);
    sbx_error_free(e);
    json_decref(cfg);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_steps_and_lines),
        TAP(test_errors_name_the_line),
        TAP(test_changes),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
