/*
 * The provider registry: explicitly registered providers, then built-ins,
 * then plugins: those on SBX_PLUGIN_PATH (the reference's entry points),
 * then those in the provider directory sbx installs its own plugins in
 * (docs/provider-guide.md, "Where plugins are found"). Plugin discovery
 * runs once per process and is cached, as the reference's.
 */
#include "internal.h"

#include <dirent.h>
#include <stddef.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SBX_PROVIDERDIR
#define SBX_PROVIDERDIR "/usr/local/lib/sbx/providers"
#endif

struct plugin_entry {
    const struct sbx_provider_ops *ops;
    char *file;
};

/* A plugin file that did not load: kept so asking for its provider says why. */
struct plugin_failure {
    char *file;
    char *why;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

/* Held across fork() so a child forked while another thread looks up a provider can too. */
static void reg_lock_take(void) { pthread_mutex_lock(&reg_lock); }
static void reg_lock_give(void) { pthread_mutex_unlock(&reg_lock); }
__attribute__((constructor)) static void reg_atfork(void)
{
    pthread_atfork(reg_lock_take, reg_lock_give, reg_lock_give);
}
static const struct sbx_provider_ops **registered;
static size_t n_registered;

static bool plugins_scanned;
static struct plugin_entry *plugins;
static size_t n_plugins;
static sbx_error *plugin_error; /* a duplicate found during discovery */
static struct plugin_failure *failures;
static size_t n_failures;
static char **scanned_files; /* realpaths, so a file on two paths loads once */
static size_t n_scanned_files;
static bool scanning_default; /* the provider directory: its names yield to earlier ones */

/*
 * Warnings found during discovery are queued and logged after reg_lock is
 * released: the application's log callback may itself call into the
 * registry (sbx_list_providers, say), which would deadlock under the lock.
 */
static char **pending_warnings;
static size_t n_pending_warnings;

/* Caller holds reg_lock. */
static void queue_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void queue_warning(const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    char **q = realloc(pending_warnings, (n_pending_warnings + 1) * sizeof(char *));
    if (!q) {
        free(msg);
        return;
    }
    pending_warnings = q;
    pending_warnings[n_pending_warnings++] = msg;
}

/* Called without reg_lock held. */
static void flush_warnings(void)
{
    pthread_mutex_lock(&reg_lock);
    char **q = pending_warnings;
    size_t n = n_pending_warnings;
    pending_warnings = NULL;
    n_pending_warnings = 0;
    pthread_mutex_unlock(&reg_lock);
    for (size_t i = 0; i < n; i++) {
        sbx_log(SBX_LOG_WARNING, "%s", q[i]);
        free(q[i]);
    }
    free(q);
}

static const struct sbx_provider_ops *find_builtin(const char *name)
{
    const struct sbx_provider_ops *const *b = sbx__builtin_providers();
    for (; *b; b++)
        if (!strcmp((*b)->name, name))
            return *b;
    return NULL;
}

static const struct sbx_provider_ops *find_registered(const char *name)
{
    for (size_t i = 0; i < n_registered; i++)
        if (!strcmp(registered[i]->name, name))
            return registered[i];
    return NULL;
}

/* The bytes of a table of ABI 1: everything before struct_size. */
#define ABI1_SIZE offsetof(struct sbx_provider_ops, struct_size)
/* The smallest table of ABI 2: up to and including capabilities. */
#define ABI2_MIN_SIZE (offsetof(struct sbx_provider_ops, capabilities) + sizeof(unsigned long long))

static int check_ops(const struct sbx_provider_ops *ops, const char *origin, sbx_error **err)
{
    if (!ops || !ops->name || !*ops->name)
        return sbx__set_error(err, SBX_EINVAL, "Provider name must be non-empty");
    /* Older tables load (the core reads only what they have); a newer ABI cannot be read. */
    if (ops->abi_version < 1 || ops->abi_version > SBX_PROVIDER_ABI_VERSION)
        return sbx__set_error(err, SBX_EINVAL,
                              "provider '%s'%s%s was built for provider ABI %d; this libsbx "
                              "speaks ABI 1 to %d: rebuild it against this version of "
                              "sbx/provider.h, or update sbx",
                              ops->name, origin ? " from " : "", origin ? origin : "",
                              ops->abi_version, SBX_PROVIDER_ABI_VERSION);
    if (ops->abi_version >= 2 && ops->struct_size < ABI2_MIN_SIZE)
        return sbx__set_error(err, SBX_EINVAL,
                              "provider '%s'%s%s says ABI %d but its struct_size is %zu: set "
                              ".struct_size = sizeof(struct sbx_provider_ops) (or use "
                              "SBX_PROVIDER_OPS_HEADER)",
                              ops->name, origin ? " from " : "", origin ? origin : "",
                              ops->abi_version, ops->struct_size);
    const char *missing = !ops->create          ? "create"
                          : !ops->exec          ? "exec"
                          : !ops->upload_file   ? "upload_file"
                          : !ops->download_file ? "download_file"
                          : !ops->status        ? "status"
                          : !ops->close         ? "close"
                          : !ops->box_id        ? "box_id"
                          : !ops->box_free      ? "box_free"
                                                : NULL;
    if (missing)
        return sbx__set_error(err, SBX_EINVAL,
                              "provider '%s' lacks the required operation %s(); every provider "
                              "must implement create, exec, upload_file, download_file, status, "
                              "close, box_id and box_free",
                              ops->name, missing);
    return SBX_OK;
}

/* --- plugins ------------------------------------------------------------- */

static void note_failure(const char *path, const char *why)
{
    struct plugin_failure *n = realloc(failures, (n_failures + 1) * sizeof(*n));
    if (!n)
        return;
    failures = n;
    failures[n_failures].file = strdup(path);
    failures[n_failures].why = strdup(why ? why : "unknown error");
    if (failures[n_failures].file && failures[n_failures].why) {
        n_failures++;
        return;
    }
    free(failures[n_failures].file);
    free(failures[n_failures].why);
}

/* True the first time a file is seen (by its real path). */
static bool first_sight(const char *path)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return true;
    for (size_t i = 0; i < n_scanned_files; i++)
        if (!strcmp(scanned_files[i], real))
            return false;
    char **n = realloc(scanned_files, (n_scanned_files + 1) * sizeof(char *));
    if (n && (n[n_scanned_files] = strdup(real))) {
        scanned_files = n;
        n_scanned_files++;
    } else if (n) {
        scanned_files = n;
    }
    return true;
}

static const struct sbx_provider_ops *find_plugin(const char *name);

/*
 * A plugin runs as this process: refuse one another local user could have
 * written (the file or its folder owned by someone else than root or us, or
 * writable by group or others). NULL when it may load, else why not.
 */
static const char *untrusted(const char *path)
{
    struct stat st;
    _cleanup_free_ char *dir = strdup(path);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (slash == dir)
        dir[1] = 0; /* a plugin in / */
    else if (slash)
        *slash = 0;
    const char *what[2] = { path, slash ? dir : "." };
    for (int i = 0; i < 2; i++) {
        if (stat(what[i], &st) < 0)
            return "it cannot be read";
        if (st.st_uid != 0 && st.st_uid != geteuid())
            return i ? "its folder belongs to another user" : "it belongs to another user";
        if (st.st_mode & (S_IWGRP | S_IWOTH))
            return i ? "its folder is writable by other users" : "it is writable by other users";
    }
    return NULL;
}

static void scan_file(const char *path)
{
    if (!first_sight(path))
        return;
    const char *bad = untrusted(path);
    if (bad) {
        note_failure(path, bad);
        queue_warning("not loading sbx plugin %s: %s (chmod go-w it, or install it as root)", path,
                      bad);
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        note_failure(path, why);
        queue_warning("cannot load sbx plugin %s: %s", path, why);
        return;
    }
    const struct sbx_provider_ops *const *table = dlsym(h, "sbx_plugin_providers");
    if (!table) {
        queue_warning("%s is not an sbx plugin: it does not export sbx_plugin_providers", path);
        dlclose(h);
        return;
    }
    /* The handle stays open for the life of the process: its tables are used by pointer. */
    for (; *table; table++) {
        sbx_error *e = NULL;
        if (check_ops(*table, path, &e) < 0) {
            queue_warning("ignoring sbx plugin provider in %s: %s", path, sbx_error_message(e));
            sbx_error_free(e);
            continue;
        }
        /* A provider already found on SBX_PLUGIN_PATH wins over the installed one. */
        if (scanning_default && find_plugin((*table)->name))
            continue;
        for (size_t i = 0; i < n_plugins; i++) {
            if (!strcmp(plugins[i].ops->name, (*table)->name) && !plugin_error) {
                /* The reference's wording ("entry point"), so its message checks carry over. */
                _cleanup_free_ char *rn = sbx__repr((*table)->name);
                _cleanup_free_ char *ra = sbx__repr(plugins[i].file);
                _cleanup_free_ char *rb = sbx__repr(path);
                plugin_error = sbx_error_new(SBX_EINVAL,
                                             "Duplicate sandbox provider entry point %s published "
                                             "by %s and %s. Rename one of them.",
                                             rn ? rn : "?", ra ? ra : "?", rb ? rb : "?");
            }
        }
        struct plugin_entry *n = realloc(plugins, (n_plugins + 1) * sizeof(*n));
        if (!n)
            return;
        plugins = n;
        plugins[n_plugins].ops = *table;
        if (!(plugins[n_plugins].file = strdup(path)))
            return;
        n_plugins++;
    }
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void scan_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) < 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        scan_file(dir);
        return;
    }
    DIR *d = opendir(dir);
    if (!d)
        return;
    /* Sorted, so which file is "first" in a duplicate message does not depend on the fs. */
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".so") != 0)
            continue;
        char **nn = realloc(names, (n + 1) * sizeof(char *));
        if (!nn)
            break;
        names = nn;
        names[n++] = sbx__printf("%s/%s", dir, de->d_name);
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof(char *), name_cmp);
    for (size_t i = 0; i < n; i++) {
        if (names[i])
            scan_file(names[i]);
        free(names[i]);
    }
    free(names);
}

/*
 * The provider directory: the first that exists of lib/sbx/providers beside
 * the program or library holding this code (the build tree: build/sbx and
 * build/libsbx.so), sbx/providers beside it (an installed libsbx in
 * PREFIX/lib), ../lib/sbx/providers (an installed CLI in PREFIX/bin), then
 * the configured one. A relocated prefix finds its own plugins, and a build
 * tree never loads an installed copy's.
 */
static char *provider_dir(void)
{
    const char *bases[2] = { NULL, NULL };
    Dl_info info;
    char self[PATH_MAX];
    if (dladdr((void *)provider_dir, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
        bases[0] = info.dli_fname;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = 0;
        bases[1] = self;
    }
    /*
     * Beside the program or library: lib/sbx/providers, sbx/providers (an
     * installed libsbx), then lib/sbx/providers one and two levels up (an
     * installed bin/sbx; build/ from a test in build/tests/integration/, as
     * the helper binaries are found).
     */
    static const char *const rel[] = { "lib/sbx/providers", "sbx/providers", "../lib/sbx/providers",
                                       "../../lib/sbx/providers" };
    for (int b = 0; b < 2; b++) {
        _cleanup_free_ char *real = bases[b] ? realpath(bases[b], NULL) : NULL;
        char *slash = real ? strrchr(real, '/') : NULL;
        if (!slash)
            continue;
        *slash = 0;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(rel); i++) {
            _cleanup_free_ char *cand = sbx__printf("%s/%s", real, rel[i]);
            struct stat st;
            if (cand && stat(cand, &st) == 0 && S_ISDIR(st.st_mode))
                return realpath(cand, NULL);
        }
    }
    return strdup(SBX_PROVIDERDIR);
}

/* Caller holds reg_lock. */
static void scan_plugins(void)
{
    if (plugins_scanned)
        return;
    plugins_scanned = true;
    const char *path = getenv("SBX_PLUGIN_PATH");
    _cleanup_free_ char *copy = path && *path ? strdup(path) : NULL;
    char *save = NULL;
    for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir;
         dir = strtok_r(NULL, ":", &save))
        scan_dir(dir);
    _cleanup_free_ char *installed = provider_dir();
    if (installed) {
        scanning_default = true;
        scan_dir(installed);
        scanning_default = false;
    }
    for (size_t i = 0; i < n_plugins; i++) {
        const char *name = plugins[i].ops->name;
        if (find_registered(name) || find_builtin(name))
            queue_warning("Sandbox provider plugin '%s' from '%s' is shadowed by the %s "
                          "provider of that name; it is ignored",
                          name, plugins[i].file, find_registered(name) ? "registered" : "built-in");
    }
}

static const struct sbx_provider_ops *find_plugin(const char *name)
{
    for (size_t i = 0; i < n_plugins; i++)
        if (!strcmp(plugins[i].ops->name, name))
            return plugins[i].ops;
    return NULL;
}

/* --- public -------------------------------------------------------------- */

static int collect_names(char ***out, sbx_error **err)
{
    /* Caller holds reg_lock. */
    scan_plugins();
    if (plugin_error)
        return sbx__fail(err, sbx_error_copy(plugin_error));
    const struct sbx_provider_ops *const *b = sbx__builtin_providers();
    size_t n_builtin = 0;
    while (b[n_builtin])
        n_builtin++;
    size_t cap = n_registered + n_builtin + n_plugins + 1;
    char **names = calloc(cap, sizeof(char *));
    if (!names)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    size_t n = 0;
    const char *cand;
    for (size_t i = 0; i < n_registered + n_builtin + n_plugins; i++) {
        if (i < n_registered)
            cand = registered[i]->name;
        else if (i < n_registered + n_builtin)
            cand = b[i - n_registered]->name;
        else
            cand = plugins[i - n_registered - n_builtin].ops->name;
        bool dup = false;
        for (size_t j = 0; j < n; j++)
            dup |= !strcmp(names[j], cand);
        if (!dup && !(names[n++] = strdup(cand))) {
            sbx_strv_free(names);
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
    }
    qsort(names, n, sizeof(char *), name_cmp);
    *out = names;
    return SBX_OK;
}

int sbx_list_providers(char ***names_out, sbx_error **err)
{
    if (!names_out)
        return sbx__set_error(err, SBX_EINVAL, "names_out is NULL");
    pthread_mutex_lock(&reg_lock);
    int rc = collect_names(names_out, err);
    pthread_mutex_unlock(&reg_lock);
    flush_warnings();
    return rc;
}

/* The failed plugin file named for provider `name` (NAME.so or sbx-NAME.so). Caller holds reg_lock. */
static const struct plugin_failure *failure_named(const char *name)
{
    for (size_t i = 0; i < n_failures; i++) {
        const char *base = strrchr(failures[i].file, '/');
        base = base ? base + 1 : failures[i].file;
        if (!strncmp(base, "sbx-", 4))
            base += 4;
        size_t len = strlen(name);
        if (!strncmp(base, name, len) && !strcmp(base + len, ".so"))
            return &failures[i];
    }
    return NULL;
}

/*
 * Why a plugin did not load, and what to do. A library it needs that is not
 * installed is the usual cause (dlerror: "libX.so.N: cannot open shared
 * object file"): name it and how to find its package.
 */
static char *load_hint(const struct plugin_failure *f)
{
    const char *miss = strstr(f->why, ": cannot open shared object file");
    if (miss) {
        const char *start = miss;
        while (start > f->why && start[-1] != ' ' && start[-1] != ':')
            start--;
        int len = (int)(miss - start);
        return sbx__printf(". Its plugin %s is installed but did not load: it needs %.*s, "
                           "which is not installed; install the package that provides it "
                           "(Debian: apt-file search %.*s, or see docs/providers/)",
                           f->file, len, start, len, start);
    }
    return sbx__printf(". Its plugin %s is installed but did not load: %s", f->file, f->why);
}

int sbx__unknown_provider(const char *name, sbx_error **err)
{
    char **names = NULL;
    sbx_buf b = { 0 };
    if (collect_names(&names, NULL) == SBX_OK) {
        for (size_t i = 0; names[i]; i++)
            sbx__buf_printf(&b, "%s%s", i ? ", " : "", names[i]);
        sbx_strv_free(names);
    }
    _cleanup_free_ char *r = sbx__repr(name);
    const struct plugin_failure *f = failure_named(name);
    _cleanup_free_ char *hint = f ? load_hint(f) : NULL;
    int rc = sbx__set_error(err, SBX_EINVAL, "Unknown sandbox provider %s. Available providers: %s%s",
                            r ? r : name, b.data && *b.data ? b.data : "<none>",
                            hint ? hint : "");
    sbx__buf_free(&b);
    return rc;
}

/*
 * A table the core can read in full. One of this ABI and size is used as is;
 * an older or smaller one (ABI 1, or ABI 2 from an older header) is copied
 * once into a zeroed table of today's size, so every field it lacks reads
 * as NULL/0 and the core never reads past the end of the provider's. The
 * copies live as long as the process, as plugin tables do. Caller holds
 * reg_lock.
 */
struct widened {
    const struct sbx_provider_ops *src;
    struct sbx_provider_ops copy;
    struct widened *next;
};
static struct widened *widened_tables;

static const struct sbx_provider_ops *full_table(const struct sbx_provider_ops *ops)
{
    size_t have = ops->abi_version >= 2 ? ops->struct_size : ABI1_SIZE;
    if (have >= sizeof(*ops))
        return ops;
    for (struct widened *w = widened_tables; w; w = w->next)
        if (w->src == ops)
            return &w->copy;
    struct widened *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    memcpy(&w->copy, ops, have);
    w->copy.struct_size = have; /* what the provider has, for sbx_provider_supports */
    w->src = ops;
    w->next = widened_tables;
    widened_tables = w;
    return &w->copy;
}

int sbx__registry_find(const char *name, const struct sbx_provider_ops **out, sbx_error **err)
{
    pthread_mutex_lock(&reg_lock);
    const struct sbx_provider_ops *ops = find_registered(name);
    if (!ops)
        ops = find_builtin(name);
    int rc = SBX_OK;
    if (!ops) {
        scan_plugins();
        if (plugin_error)
            rc = sbx__fail(err, sbx_error_copy(plugin_error));
        else if (!(ops = find_plugin(name)))
            rc = sbx__unknown_provider(name, err);
    }
    if (rc == SBX_OK && !(ops = full_table(ops)))
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    pthread_mutex_unlock(&reg_lock);
    flush_warnings();
    if (rc == SBX_OK)
        *out = ops;
    return rc;
}

int sbx_provider_source(const char *name, char **out, sbx_error **err)
{
    if (!name || !out)
        return sbx__set_error(err, SBX_EINVAL, "name and out must not be NULL");
    *out = NULL;
    pthread_mutex_lock(&reg_lock);
    const char *src = find_registered(name) ? "registered" : find_builtin(name) ? "built-in" : NULL;
    if (!src) {
        scan_plugins();
        for (size_t i = 0; i < n_plugins && !src; i++)
            if (!strcmp(plugins[i].ops->name, name))
                src = plugins[i].file;
    }
    int rc = SBX_OK;
    if (!src)
        rc = sbx__unknown_provider(name, err);
    else if (!(*out = strdup(src)))
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    pthread_mutex_unlock(&reg_lock);
    flush_warnings();
    return rc;
}

int sbx_provider_lookup(const char *name, sbx_error **err)
{
    const struct sbx_provider_ops *ops;
    if (!name)
        name = "";
    return sbx__registry_find(name, &ops, err);
}

int sbx_register_provider(const struct sbx_provider_ops *ops, int override, sbx_error **err)
{
    if (!ops || !ops->name || !*ops->name)
        return sbx__set_error(err, SBX_EINVAL, "Provider name must be non-empty");
    int rc = check_ops(ops, NULL, err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&reg_lock);
    bool exists = find_registered(ops->name) || find_builtin(ops->name);
    if (exists && !override) {
        pthread_mutex_unlock(&reg_lock);
        _cleanup_free_ char *r = sbx__repr(ops->name);
        return sbx__set_error(err, SBX_EINVAL, "Sandbox provider %s is already registered",
                              r ? r : ops->name);
    }
    for (size_t i = 0; i < n_registered; i++) {
        if (!strcmp(registered[i]->name, ops->name)) {
            registered[i] = ops;
            pthread_mutex_unlock(&reg_lock);
            return SBX_OK;
        }
    }
    const struct sbx_provider_ops **n = realloc(registered, (n_registered + 1) * sizeof(*n));
    if (!n) {
        pthread_mutex_unlock(&reg_lock);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    registered = n;
    registered[n_registered++] = ops;
    pthread_mutex_unlock(&reg_lock);
    return SBX_OK;
}

int sbx_unregister_provider(const char *name, sbx_error **err)
{
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; name && i < n_registered; i++) {
        if (!strcmp(registered[i]->name, name)) {
            memmove(&registered[i], &registered[i + 1],
                    (n_registered - i - 1) * sizeof(*registered));
            n_registered--;
            pthread_mutex_unlock(&reg_lock);
            return SBX_OK;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    return sbx__set_error(err, SBX_ENOENT, "no registered provider named '%s'",
                          name ? name : "");
}
