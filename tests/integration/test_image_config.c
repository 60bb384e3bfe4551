/*
 * The image's config (issue #10, item 3): an OCI layout whose config sets
 * Env (PATH too), WorkingDir (missing from the rootfs), User (in the
 * image's /etc/passwd), Entrypoint+Cmd, ExposedPorts and Labels, imported
 * and run in real linux boxes; `sbx image inspect/ls --json/--format/tag`;
 * hostile configs refused at import, leaving nothing.
 */
#include "tap.h"
#include "common.h"
#include "lib/proc.h"
#include "lib/box.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"

#include <dirent.h>
#include <sys/stat.h>

/*
 * A busybox tree with a user "app" (1234:1234) and no /srv, packed as a
 * tarball: the one layer of every layout here.
 */
static void busybox_tar(char *tar, size_t tn)
{
    if (!have_file("/bin/busybox"))
        TAP_SKIP("busybox-static is not installed");
    const char *t = tap_tmpdir();
    snprintf(tar, tn, "%s/bb.tar", t);
    if (have_file(tar))
        return;
    char out[4096];
    if (run_cmd(out, sizeof(out),
                "set -e; d=%s/bb; mkdir -p $d/bin $d/etc $d/tmp; chmod 1777 $d/tmp; "
                "cp /bin/busybox $d/bin/; "
                "for a in sh echo cat id pwd sleep stat test ls mv true; do ln -s busybox "
                "$d/bin/$a; done; "
                "printf 'root:x:0:0:root:/root:/bin/sh\\napp:x:1234:1234:app:/home/app:/bin/sh\\n'"
                " > $d/etc/passwd; printf 'root:x:0:\\napp:x:1234:\\n' > $d/etc/group; "
                "tar -C $d -cf %s .",
                t, tar) != 0)
        TAP_FAIL("building the busybox tree: %s", out);
}

/*
 * An OCI layout at DIR/NAME holding the busybox layer and `config` (JSON
 * text) as its config blob. `tamper`: the blob is changed after its digest
 * went into the manifest.
 */
static void make_layout(char *layout, size_t ln, const char *name, const char *config, bool tamper)
{
    char tar[512];
    busybox_tar(tar, sizeof(tar));
    const char *t = tap_tmpdir();
    snprintf(layout, ln, "%s/%s", t, name);
    char cfg[700], out[8192];
    snprintf(cfg, sizeof(cfg), "%s/%s.config.json", t, name);
    if (write_text(cfg, config) < 0)
        TAP_FAIL("writing %s", cfg);
    int rc = run_cmd(
        out, sizeof(out),
        "set -e; L=%s; rm -rf $L; mkdir -p $L/blobs/sha256; "
        "l=$(sha256sum %s | cut -d' ' -f1); cp %s $L/blobs/sha256/$l; ls=$(stat -c %%s %s); "
        /* The config's placeholder diff_id becomes the layer's own (the store checks it). */
        "sed -i \"s/sha256:0\\{64\\}/sha256:$l/\" %s; "
        "c=$(sha256sum %s | cut -d' ' -f1); cp %s $L/blobs/sha256/$c; cs=$(stat -c %%s %s); "
        "%s"
        "printf '{\"schemaVersion\":2,\"config\":{\"mediaType\":"
        "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:%%s\",\"size\":%%s},"
        "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":"
        "\"sha256:%%s\",\"size\":%%s}]}' $c $cs $l $ls > $L/m.json; "
        "m=$(sha256sum $L/m.json | cut -d' ' -f1); mv $L/m.json $L/blobs/sha256/$m; "
        "printf '{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha256:%%s\",\"annotations\":"
        "{\"org.opencontainers.image.ref.name\":\"v1\"}}]}' $m > $L/index.json; "
        "echo '{\"imageLayoutVersion\":\"1.0.0\"}' > $L/oci-layout",
        layout, tar, tar, tar, cfg, cfg, cfg, cfg, tamper ? "echo ' ' >> $L/blobs/sha256/$c; " : "");
    if (rc != 0)
        TAP_FAIL("building the OCI layout: %s", out);
}

static const char *const good_config =
    "{\"architecture\":\"amd64\",\"os\":\"linux\",\"created\":\"2026-01-02T03:04:05Z\","
    "\"config\":{\"Env\":[\"PATH=/opt/tools:/bin\",\"IMG_ONLY=from-image\",\"SHARED=image\","
    "\"WITH_EQ=a=b\"],"
    "\"WorkingDir\":\"/srv/app\",\"User\":\"app\","
    "\"Entrypoint\":[\"/bin/sh\",\"-c\",\"echo \\\"$0 $1 $(id -u) $(pwd)\\\" > /tmp/ep.tmp; "
    "mv /tmp/ep.tmp /tmp/ep; exec sleep 1000\"],"
    "\"Cmd\":[\"cmd-a\",\"cmd-b\"],\"ExposedPorts\":{\"8080/tcp\":{},\"53/udp\":{}},"
    "\"Labels\":{\"org.example.k\":\"v\"},\"StopSignal\":\"SIGTERM\"},"
    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:"
    "0000000000000000000000000000000000000000000000000000000000000000\"]}}";

static void import_ok(sbx_provider *p, const char *name, const char *layout)
{
    char *json = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_image_import(p, name, layout, NULL, &json, &e) != SBX_OK)
        TAP_FAIL("import %s: %s", layout, sbx_error_message(e));
    free(json);
}

/* The entrypoint's report (it writes /tmp/ep once, atomically, when it has run). */
static const char *entrypoint_report(sbx_sandbox *sb)
{
    return out_as(sb, "0", "while ! test -e /tmp/ep; do sleep 0.05; done; cat /tmp/ep");
}

static void test_config_applies_in_a_box(void)
{
    need_boxes();
    char layout[600];
    make_layout(layout, sizeof(layout), "good", good_config, false);
    sbx_provider *p = provider(NULL);
    import_ok(p, "cfg", layout);

    /* Nothing in the spec: the image's env, workdir (made), user; no service. */
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "cfg");
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "echo $PATH"), "/opt/tools:/bin\n");
    TAP_EQ_STR(out_of(sb, "echo $IMG_ONLY $SHARED $WITH_EQ"), "from-image image a=b\n");
    TAP_EQ_STR(out_of(sb, "pwd"), "/srv/app\n");
    TAP_EQ_STR(out_of(sb, "id -u; id -g"), "1234\n1234\n");
    TAP_EQ_STR(out_of(sb, "echo $HOME"), "/home/app\n");
    /* An exec that names a user wins over the image's. */
    TAP_EQ_STR(out_as(sb, "root", "id -u"), "0\n");
    TAP_EQ_STR(out_as(sb, "0", "id -u"), "0\n");
    /* Without image_entrypoint the image's command does not run (the reference's keepalive). */
    TAP_EQ_STR(out_of(sb, "test -e /tmp/ep && echo ran || echo none"), "none\n");
    stop_free(sb);
    sbx_spec_free(s);

    /* The spec wins: env per name, workdir. */
    s = sbx_spec_new();
    sbx_spec_set_image(s, "cfg");
    sbx_spec_set_env(s, "SHARED", "spec");
    sbx_spec_set_env(s, "PATH", "/bin");
    sbx_spec_set_workdir(s, "/work");
    sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "echo $PATH $SHARED $IMG_ONLY"), "/bin spec from-image\n");
    TAP_EQ_STR(out_of(sb, "pwd"), "/work\n");
    TAP_EQ_STR(out_of(sb, "test -d /srv/app && echo made || echo absent"), "absent\n");
    stop_free(sb);
    sbx_spec_free(s);

    /* image_entrypoint: Entrypoint + Cmd run as the box's service, as the image's User. */
    s = sbx_spec_new();
    sbx_spec_set_image(s, "cfg");
    TAP_OK(sbx_spec_set_provider_options(s, "{\"image_entrypoint\": true}", &e_));
    sb = start(p, s);
    TAP_EQ_STR(entrypoint_report(sb), "cmd-a cmd-b 1234 /srv/app\n");
    stop_free(sb);
    sbx_spec_free(s);

    /* provider_options.command replaces Cmd (the image's Entrypoint stays). */
    s = sbx_spec_new();
    sbx_spec_set_image(s, "cfg");
    TAP_OK(sbx_spec_set_provider_options(s, "{\"command\": [\"x\", \"y\"]}", &e_));
    sb = start(p, s);
    TAP_EQ_STR(entrypoint_report(sb), "x y 1234 /srv/app\n");
    stop_free(sb);
    sbx_spec_free(s);

    /* spec.entrypoint replaces Entrypoint and drops Cmd (docker run --entrypoint). */
    s = sbx_spec_new();
    sbx_spec_set_image(s, "cfg");
    const char *const ep[] = {"/bin/sh", "-c",
                              "echo \"spec[$0] $(id -u)\" > /tmp/ep.tmp; mv /tmp/ep.tmp /tmp/ep; "
                              "exec sleep 1000",
                              NULL};
    TAP_OK(sbx_spec_set_entrypoint(s, ep));
    sb = start(p, s);
    TAP_EQ_STR(entrypoint_report(sb), "spec[/bin/sh] 1234\n");
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_inspect_ls_format_tag(void)
{
    need_boxes();
    char layout[600], sbx[1100], out[16384];
    make_layout(layout, sizeof(layout), "good", good_config, false);
    snprintf(sbx, sizeof(sbx), "%s", sbx_bin());
    sbx_provider *p = provider(NULL);
    import_ok(p, "cfg", layout);

    /* The C API. */
    char *text = NULL;
    TAP_OK(sbx_provider_image_inspect(p, "cfg", &text, &e_));
    json_t *j = json_loads(text, 0, NULL);
    free(text);
    TAP_EQ_STR(json_string_value(json_object_get(j, "name")), "cfg");
    TAP_CONTAINS(json_string_value(json_object_get(j, "digest")), "sha256:");
    TAP_TRUE(json_integer_value(json_object_get(j, "size")) > 0);
    json_t *c = json_object_get(j, "config");
    TAP_TRUE(json_is_object(json_object_get(json_object_get(c, "ExposedPorts"), "8080/tcp")));
    TAP_EQ_STR(json_string_value(json_object_get(c, "User")), "app");
    TAP_EQ_STR(json_string_value(json_object_get(c, "WorkingDir")), "/srv/app");
    TAP_EQ_INT(json_array_size(json_object_get(j, "layers")), 1);
    char digest[80];
    snprintf(digest, sizeof(digest), "%s", json_string_value(json_object_get(j, "digest")));
    json_decref(j);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_image_inspect(p, "nope", &text, &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), "no image named nope");
    sbx_error_free(e);

    /* tag: a second name for the same tree; removing one keeps the other working. */
    TAP_OK(sbx_provider_image_tag(p, "cfg", "cfg2", &e_));
    e = NULL;
    TAP_EQ_INT(sbx_provider_image_tag(p, "nope", "x", &e), SBX_ENOENT);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_provider_image_tag(p, "cfg", "Bad/Name", &e), SBX_EINVAL);
    sbx_error_free(e);

    /* The CLI: inspect, ls --json, --format, tag. */
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s image inspect cfg2", sbx), 0);
    j = json_loads(out, 0, NULL);
    TAP_TRUE(json_is_array(j) && json_array_size(j) == 1);
    json_t *o = json_array_get(j, 0);
    TAP_EQ_STR(json_string_value(json_object_get(o, "name")), "cfg2");
    TAP_EQ_STR(json_string_value(json_object_get(o, "digest")), digest);
    TAP_TRUE(json_is_object(
        json_object_get(json_object_get(json_object_get(o, "config"), "ExposedPorts"), "53/udp")));
    json_decref(j);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s image ls --json", sbx), 0);
    j = json_loads(out, 0, NULL);
    TAP_TRUE(json_is_array(j) && json_array_size(j) == 2);
    json_decref(j);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s image ls --format '{{.Name}}\\t{{ .Digest }}'", sbx),
               0);
    char want[300];
    snprintf(want, sizeof(want), "cfg\t%s\ncfg2\t%s\n", digest, digest);
    TAP_EQ_STR(out, want);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s image ls --format '{{.Nope}}'", sbx), 2);
    TAP_CONTAINS(out, "'{{.Nope}}' is not one of");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s image ls --format '{{.Name' ", sbx), 2);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s image tag cfg2 cfg3 && %s image ls -q", sbx, sbx), 0);
    TAP_EQ_STR(out, "cfg\ncfg2\ncfg3\n");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s image inspect nope", sbx), 1);
    TAP_CONTAINS(out, "no image named nope");

    /* A directory image has no config: inspect says null, and a box gets none of cfg's. */
    char bb[600];
    snprintf(bb, sizeof(bb), "%s/bb", tap_tmpdir());
    import_ok(p, "dirimg", bb);
    TAP_OK(sbx_provider_image_inspect(p, "dirimg", &text, &e_));
    j = json_loads(text, 0, NULL);
    free(text);
    TAP_TRUE(json_is_null(json_object_get(j, "config")));
    TAP_CONTAINS(json_string_value(json_object_get(j, "digest")), "dir:");
    json_decref(j);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "dirimg");
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "pwd; id -u; echo ${IMG_ONLY:-unset}"), "/\n0\nunset\n");
    stop_free(sb);
    sbx_spec_free(s);

    /* Asking for the image's command of an image that has none fails the create, saying so. */
    s = sbx_spec_new();
    sbx_spec_set_image(s, "dirimg");
    TAP_OK(sbx_spec_set_provider_options(s, "{\"image_entrypoint\": true}", &e_));
    start_fails(p, s, SBX_ECREATE, "image dirimg has no Entrypoint or Cmd to run");
    sbx_spec_free(s);

    TAP_OK(sbx_provider_image_remove(p, "cfg", 0, &e_));
    s = sbx_spec_new();
    sbx_spec_set_image(s, "cfg3");
    sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "pwd; id -u"), "/srv/app\n1234\n");
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* What an import may leave in the store: names/, sources/, and trees of good imports only. */
static int entries_in(const char *dir, const char *skip_prefix)
{
    static const char *const fixed[] = { "names", "sources", "layers", "records",
                                         "refs",  "srcs",    "blobs",  "locks" };
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        bool skip = de->d_name[0] == '.' ||
                    (*skip_prefix && !strncmp(de->d_name, skip_prefix, strlen(skip_prefix)));
        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
            skip |= !strcmp(de->d_name, fixed[i]);
        n += !skip;
    }
    closedir(d);
    return n;
}

/* What the store holds besides its fixed directories: layers, image records, names, temporaries. */
static int store_entries(const char *skip_prefix)
{
    static const char *const subs[] = { "", "/layers", "/records", "/refs" };
    int n = 0;
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        char dir[700];
        snprintf(dir, sizeof(dir), "%s/images%s", state_dir, subs[i]);
        n += entries_in(dir, i ? "" : skip_prefix);
    }
    return n;
}

static void refused(sbx_provider *p, const char *name, const char *config, bool tamper,
                    const char *why)
{
    char layout[600];
    make_layout(layout, sizeof(layout), name, config, tamper);
    char *json = NULL;
    sbx_error *e = NULL;
    int rc = sbx_provider_image_import(p, name, layout, NULL, &json, &e);
    if (rc != SBX_EINVAL)
        TAP_FAIL("import of %s: %d (%s), want SBX_EINVAL", name, rc,
                 e ? sbx_error_message(e) : "no error");
    TAP_CONTAINS(sbx_error_message(e), why);
    sbx_error_free(e);
    /* Nothing left: no tree, no temporary, no name. */
    TAP_EQ_INT(store_entries("none-"), 0);
    char np[800];
    snprintf(np, sizeof(np), "%s/images/names/%s", state_dir, name);
    TAP_TRUE(!have_file(np));
    /* A box from the layout itself is refused too, as a create. */
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, layout);
    start_fails(p, s, SBX_ECREATE, why);
    sbx_spec_free(s);
    TAP_EQ_INT(store_entries("none-"), 0);
}

static void test_hostile_configs_refused(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    refused(p, "tampered", good_config, true, "does not match its digest");
    refused(p, "array", "[1, 2]", false, "is not a JSON object");
    refused(p, "notjson", "{\"config\": ", false, "not JSON");
    refused(p, "cfgstr", "{\"config\": \"x\"}", false, "\"config\" is not a JSON object");
    refused(p, "noeq", "{\"config\": {\"Env\": [\"A=1\", \"JUSTNAME\"]}}", false,
            "Env[1] \"JUSTNAME\" is not NAME=VALUE");
    refused(p, "envnum", "{\"config\": {\"Env\": [1]}}", false, "Env[0] is not a string");
    refused(p, "relwd", "{\"config\": {\"WorkingDir\": \"rel/dir\"}}", false,
            "WorkingDir rel/dir is not an absolute path");
    refused(p, "nul", "{\"config\": {\"Env\": [\"A=x\\u0000y\"]}}", false, "not JSON");
    refused(p, "ports", "{\"config\": {\"ExposedPorts\": [\"80/tcp\"]}}", false,
            "ExposedPorts must be an object");
    /* A giant Env: 5000 entries, past the 4096 sbx accepts. */
    size_t cap = 5000 * 12 + 64;
    char *big = malloc(cap);
    size_t n = (size_t)snprintf(big, cap, "{\"config\": {\"Env\": [");
    for (int i = 0; i < 5000; i++)
        n += (size_t)snprintf(big + n, cap - n, "%s\"V%d=x\"", i ? "," : "", i);
    snprintf(big + n, cap - n, "]}}");
    refused(p, "giant", big, false, "Env has 5000 entries, more than the 4096");
    free(big);
    /* A blob past 4 MiB. */
    size_t huge = (5u << 20);
    char *h = malloc(huge + 64);
    n = (size_t)snprintf(h, huge + 64, "{\"pad\": \"");
    memset(h + n, 'x', huge);
    snprintf(h + n + huge, 64, "\"}");
    refused(p, "huge", h, false, "larger than 4 MiB");
    free(h);
    sbx_provider_free(p);
    census_check(state_dir);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_config_applies_in_a_box),
        TAP(test_inspect_ls_format_tag),
        TAP(test_hostile_configs_refused),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
