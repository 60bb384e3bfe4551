/*
 * The reference's first-run example in C: a spec with a startup file and
 * resources; one command; print its result; stop. With no workdir the box
 * gets its own: on `local`, a scratch directory that stop removes, so the
 * example leaves nothing behind.
 *
 *   cc first_run.c $(pkg-config --cflags --libs sbx) -o first_run && ./first_run [PROVIDER]
 */
#include <stdio.h>
#include <string.h>

#include <sbx.h>

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "local";
    char config[256];
    snprintf(config, sizeof(config), "{\"%s\": {}}", name);

    sbx_error *err = NULL;
    sbx_provider *provider = NULL;
    sbx_sandbox *box = NULL;
    sbx_exec_result *result = NULL;
    int rc = 1;

    if (sbx_provider_new(config, &provider, &err) != SBX_OK)
        goto out;

    sbx_spec *spec = sbx_spec_new();
    const char *script = "print('hello from a sandbox')\n";
    sbx_spec_add_file(spec, "hello.py", script, strlen(script)); /* relative: in the workdir */
    sbx_spec_set_cpu(spec, 1.0);
    sbx_spec_set_memory_mib(spec, 512);

    if (sbx_sandbox_new(provider, spec, &box, &err) != SBX_OK ||
        sbx_sandbox_start(box, NULL, &err) != SBX_OK)
        goto out_spec;
    printf("started %s\n", sbx_sandbox_id(box));

    if (sbx_sandbox_exec(box, "python3 hello.py", NULL, &result, &err) != SBX_OK)
        goto out_spec;
    size_t len = 0;
    const char *out = sbx_exec_result_stdout(result, &len);
    printf("return code %d, stdout: %.*s", sbx_exec_result_return_code(result), (int)len,
           out ? out : "");
    rc = sbx_exec_result_return_code(result) == 0 ? 0 : 1;

    if (sbx_sandbox_stop(box, &err) != SBX_OK)
        rc = 1;
out_spec:
    sbx_spec_free(spec);
out:
    if (err)
        fprintf(stderr, "first_run: %s\n", sbx_error_message(err));
    sbx_error_free(err);
    sbx_exec_result_free(result);
    sbx_sandbox_free(box);
    sbx_provider_free(provider);
    return rc;
}
