/*
 * Compiles only if include/sbx.h declares every fixed prototype of
 * shared/C-API.md with exactly that type: each is assigned to a pointer of
 * the contract's type. Built by tests/integration/test_install.sh against an
 * installed sbx through pkg-config, as a user's program would be.
 */
#include <sbx.h>
#include <stdio.h>

#define FIXED(type, name)                                                                          \
    do {                                                                                           \
        __typeof__(type) p_ = name;                                                                \
        (void)p_;                                                                                  \
    } while (0)

int main(void)
{
    FIXED(int (*)(const sbx_error *), sbx_error_code);
    FIXED(const char *(*)(const sbx_error *), sbx_error_message);
    FIXED(void (*)(sbx_error *), sbx_error_free);
    FIXED(const char *(*)(int), sbx_strerror);
    FIXED(void (*)(void *), sbx_free);
    FIXED(sbx_spec *(*)(void), sbx_spec_new);
    FIXED(void (*)(sbx_spec *), sbx_spec_free);
    FIXED(int (*)(sbx_spec *, const char *), sbx_spec_set_image);
    FIXED(int (*)(sbx_spec *, const char *), sbx_spec_set_workdir);
    FIXED(int (*)(sbx_spec *, double), sbx_spec_set_ttl);
    FIXED(int (*)(sbx_spec *, const char *, const char *), sbx_spec_set_env);
    FIXED(int (*)(sbx_spec *, const char *, const void *, size_t), sbx_spec_add_file);
    FIXED(int (*)(sbx_spec *, const char *, const char *), sbx_spec_set_metadata);
    FIXED(int (*)(sbx_spec *, int, sbx_error **), sbx_spec_add_port);
    FIXED(int (*)(const char *, sbx_spec **, sbx_error **), sbx_spec_from_json);
    FIXED(int (*)(const char *, sbx_provider **, sbx_error **), sbx_provider_new);
    FIXED(void (*)(sbx_provider *), sbx_provider_free);
    FIXED(int (*)(const char *, const char *, char **, sbx_error **), sbx_resolve_provider_config);
    FIXED(int (*)(const char *, const char *, char **, sbx_error **), sbx_resolve_provider_metadata);
    FIXED(int (*)(const char *, const char *, char **, sbx_error **), sbx_rewrite_image);
    FIXED(sbx_exec_opts *(*)(void), sbx_exec_opts_new);
    FIXED(void (*)(sbx_exec_opts *), sbx_exec_opts_free);
    FIXED(int (*)(sbx_exec_opts *, const char *), sbx_exec_opts_set_cwd);
    FIXED(int (*)(sbx_exec_opts *, const char *, const char *), sbx_exec_opts_set_env);
    FIXED(int (*)(sbx_exec_opts *, double), sbx_exec_opts_set_timeout);
    FIXED(int (*)(sbx_exec_opts *, const char *), sbx_exec_opts_set_user);
    FIXED(int (*)(sbx_exec_opts *, const void *, size_t), sbx_exec_opts_set_stdin);
    FIXED(const char *(*)(const sbx_exec_result *, size_t *), sbx_exec_result_stdout);
    FIXED(const char *(*)(const sbx_exec_result *, size_t *), sbx_exec_result_stderr);
    FIXED(int (*)(const sbx_exec_result *), sbx_exec_result_return_code);
    FIXED(const char *(*)(const sbx_exec_result *), sbx_exec_result_error_type);
    FIXED(void (*)(sbx_exec_result *), sbx_exec_result_free);
    FIXED(const char *(*)(const sbx_endpoint *), sbx_endpoint_url);
    FIXED(void (*)(sbx_endpoint *), sbx_endpoint_free);
    FIXED(int (*)(sbx_provider *, const sbx_spec *, sbx_sandbox **, sbx_error **), sbx_sandbox_new);
    FIXED(int (*)(sbx_sandbox *, const sbx_spec *, sbx_error **), sbx_sandbox_start);
    FIXED(int (*)(sbx_sandbox *, const char *, const sbx_exec_opts *, sbx_exec_result **,
                  sbx_error **), sbx_sandbox_exec);
    FIXED(int (*)(sbx_sandbox *, const char *, const char *, sbx_error **), sbx_sandbox_upload);
    FIXED(int (*)(sbx_sandbox *, const char *, const char *, sbx_error **), sbx_sandbox_download);
    FIXED(int (*)(sbx_sandbox *, sbx_status *, sbx_error **), sbx_sandbox_status);
    FIXED(int (*)(sbx_sandbox *, int, sbx_endpoint **, sbx_error **), sbx_sandbox_endpoint);
    FIXED(int (*)(sbx_sandbox *, const char *, char **, sbx_error **), sbx_sandbox_serialize);
    FIXED(int (*)(sbx_provider *, const char *, sbx_sandbox **, sbx_error **), sbx_sandbox_connect);
    FIXED(int (*)(sbx_sandbox *, sbx_error **), sbx_sandbox_stop);
    FIXED(const char *(*)(const sbx_sandbox *), sbx_sandbox_id);
    FIXED(void (*)(sbx_sandbox *), sbx_sandbox_free);
    FIXED(const char *(*)(sbx_status), sbx_status_name);
    /* And it links and runs: the status names are the reference's strings. */
    printf("%s %s\n", sbx_status_name(SBX_STATUS_RUNNING), sbx_strerror(SBX_EINVAL));
    return 0;
}
