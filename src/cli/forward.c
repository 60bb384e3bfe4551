/*
 * sbx endpoint ID PORT: the URL a declared port of a box is reached at.
 * sbx port-forward ID [[HOSTADDR:]HOSTPORT:]PORT...: listens on the host and
 * carries each connection into the box through its agent, until Ctrl-C or
 * the box's end (kubectl port-forward's model). docs/networking.md.
 */
#include "cli/cli.h"
#include "kit/forward.h"
#include "kit/kit.h"

#include <arpa/inet.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>

static int parse_port(const char *s, size_t len, bool zero_ok, int *out)
{
    char buf[16];
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    long long v;
    if (strspn(buf, "0123456789") != len || sbx__parse_pyint(buf, &v) < 0 ||
        v < (zero_ok ? 0 : 1) || v > 65535)
        return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_port_map(const char *arg, char **addr, int *host_port, int *port)
{
    *addr = NULL;
    *host_port = -1;
    const char *last = strrchr(arg, ':');
    if (!last)
        return parse_port(arg, strlen(arg), false, port);
    if (parse_port(last + 1, strlen(last + 1), false, port) < 0)
        return -1;
    /* What is left: HOSTPORT, "" (any free port), ADDR:HOSTPORT or [V6]:HOSTPORT. */
    size_t rest = (size_t)(last - arg);
    const char *hp = arg;
    if (arg[0] == '[') {
        const char *close = memchr(arg, ']', rest);
        if (!close || close + 1 >= last || close[1] != ':')
            return -1;
        *addr = strndup(arg + 1, (size_t)(close - arg - 1));
        hp = close + 2;
    } else {
        const char *colon = memchr(arg, ':', rest);
        if (colon) {
            *addr = strndup(arg, (size_t)(colon - arg));
            hp = colon + 1;
        }
    }
    size_t hl = (size_t)(last - hp);
    if (hl == 0)
        *host_port = 0;
    else if (parse_port(hp, hl, true, host_port) < 0) {
        free(*addr);
        *addr = NULL;
        return -1;
    }
    unsigned char tmp[16];
    if (*addr && inet_pton(AF_INET, *addr, tmp) != 1 && inet_pton(AF_INET6, *addr, tmp) != 1) {
        free(*addr);
        *addr = NULL;
        return -1;
    }
    return 0;
}

int cli_cmd_endpoint(int argc, char **argv)
{
    struct cli_opts o;
    int rc;
    if (!cli_parse_opts("endpoint", argc, argv, CLI_TAKES_JSON, &o, &rc))
        return rc;
    bool json = o.json;
    cli_opts_free(&o);
    if (argc - optind != 2)
        return cli_usage_error("endpoint", "expects a box ID and a port");
    long long port;
    if (sbx__parse_pyint(argv[optind + 1], &port) < 0 || port < INT32_MIN || port > INT32_MAX)
        return cli_usage_error("endpoint", "PORT must be a number, got '%s'", argv[optind + 1]);
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    if ((rc = cli_box_open("endpoint", argv[optind], &p, &sb)) != CLI_EXIT_OK)
        return rc;
    sbx_endpoint *ep = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_endpoint(sb, (int)port, &ep, &e) < 0) {
        /* An undeclared or invalid port is the caller's to fix (the reference's ValueError). */
        rc = sbx_error_code(e) == SBX_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_SBX;
        cli_sbx_error(e, "endpoint");
    } else if (json) {
        json_t *h = json_object();
        for (size_t i = 0; i < sbx_endpoint_header_count(ep); i++) {
            const char *k, *v;
            sbx_endpoint_header(ep, i, &k, &v);
            json_object_set_new(h, k, json_string(v));
        }
        _cleanup_json_ json_t *j =
            json_pack("{s:s, s:o}", "endpoint", sbx_endpoint_url(ep), "headers", h);
        cli_print_json(j);
    } else {
        printf("%s\n", sbx_endpoint_url(ep));
    }
    sbx_endpoint_free(ep);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    return rc;
}

/* The agent's address from the provider: its socket and pid. */
static int agent_address(sbx_sandbox *sb, char **socket_path, pid_t *pid, sbx_error **err)
{
    sbx_future *f = NULL;
    int rc = sbx__sandbox_agent_address_async(sb, &f, err);
    if (rc < 0)
        return rc;
    char *text = NULL;
    if ((rc = cli_wait(f, err)) < 0 || (rc = sbx_future_take_string(f, &text, err)) < 0) {
        sbx_future_free(f);
        return rc;
    }
    sbx_future_free(f);
    _cleanup_json_ json_t *j = json_loads(text, 0, NULL);
    free(text);
    const char *path = json_string_value(json_object_get(j, "socket"));
    json_int_t p = json_integer_value(json_object_get(j, "pid"));
    if (!path || p <= 0 || !(*socket_path = strdup(path)))
        return sbx__set_error(err, SBX_EPROVIDER, "the provider gave no agent address");
    *pid = (pid_t)p;
    return SBX_OK;
}

static void log_line(void *data, const char *msg)
{
    (void)data;
    cli_error("%s", msg);
}

int cli_cmd_port_forward(int argc, char **argv)
{
    struct cli_opts o;
    int rc;
    if (!cli_parse_opts("port-forward", argc, argv, 0, &o, &rc))
        return rc;
    cli_opts_free(&o);
    if (argc - optind < 2)
        return cli_usage_error("port-forward", "expects a box ID and at least one port mapping");
    size_t n = (size_t)(argc - optind - 1);
    if (n > 64)
        return cli_usage_error("port-forward", "at most 64 mappings at once");
    sbx_forward_listener ls[64];
    char *addrs[64] = { 0 };
    int hps[64];
    for (size_t i = 0; i < n; i++) {
        int port;
        if (cli_parse_port_map(argv[optind + 1 + i], &addrs[i], &hps[i], &port) < 0) {
            for (size_t k = 0; k < i; k++)
                free(addrs[k]);
            return cli_usage_error("port-forward",
                                   "'%s' is not [[HOSTADDR:]HOSTPORT:]PORT (ports 1..65535, "
                                   "HOSTPORT 0 or empty: any free port)",
                                   argv[optind + 1 + i]);
        }
        /* kubectl: a bare PORT listens on the same port number. */
        if (hps[i] < 0)
            hps[i] = port;
        ls[i] = (sbx_forward_listener){ -1, (uint16_t)port };
    }
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    char *sock = NULL;
    pid_t agent = 0;
    int stops[2] = { -1, -1 };
    sbx_error *e = NULL;
    rc = cli_signals_install() < 0 ? CLI_EXIT_SBX : CLI_EXIT_OK;
    if (rc == CLI_EXIT_OK)
        rc = cli_box_open("port-forward", argv[optind], &p, &sb);
    if (rc == CLI_EXIT_OK && !sbx_provider_supports(p, "port-forward")) {
        cli_error("port-forward: the box's provider cannot forward ports");
        rc = CLI_EXIT_SBX;
    }
    if (rc == CLI_EXIT_OK && agent_address(sb, &sock, &agent, &e) < 0) {
        rc = cli_signal_received() ? cli_interrupted(NULL) : CLI_EXIT_SBX;
        cli_sbx_error(e, "port-forward");
    }
    for (size_t i = 0; rc == CLI_EXIT_OK && i < n; i++) {
        char err[300];
        int bound = 0;
        /* Loopback unless an address is given, as kubectl and `docker run -p` here. */
        ls[i].fd = sbx__forward_listen(addrs[i], hps[i], &bound, err, sizeof(err));
        if (ls[i].fd < 0) {
            cli_error("port-forward: %s", err);
            rc = CLI_EXIT_FAIL;
            break;
        }
        const char *a = addrs[i] ? addrs[i] : "127.0.0.1";
        printf(strchr(a, ':') ? "Forwarding from [%s]:%d -> %u\n" : "Forwarding from %s:%d -> %u\n",
               a, bound, (unsigned)ls[i].port);
    }
    fflush(stdout);
    if (rc == CLI_EXIT_OK) {
        /* Ctrl-C (or a stop) ends it; so does the box's end (its agent exits). */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        sigprocmask(SIG_BLOCK, &set, NULL);
        struct sigaction ign = { .sa_handler = SIG_IGN };
        sigaction(SIGPIPE, &ign, NULL);
        /* Two descriptors per forwarded connection: as many as this process may have. */
        struct rlimit nf;
        if (getrlimit(RLIMIT_NOFILE, &nf) == 0 && nf.rlim_cur < nf.rlim_max) {
            nf.rlim_cur = nf.rlim_max;
            setrlimit(RLIMIT_NOFILE, &nf);
        }
        stops[0] = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        stops[1] = sbx__kit_pidfd_open(agent);
        int k = 0, fds[2];
        for (int i = 0; i < 2; i++)
            if (stops[i] >= 0)
                fds[k++] = stops[i];
        sbx_forward_opts fo = { .agent_socket = sock, .agent_pid = agent, .listeners = ls,
                                .n_listeners = n, .stop_fds = fds, .n_stop_fds = (size_t)k,
                                .log = log_line };
        char err[300];
        int which = stops[0] >= 0 ? sbx__forward_run(&fo, err, sizeof(err)) : -1;
        if (which < 0) {
            cli_error("port-forward: %s", stops[0] < 0 ? strerror(errno) : err);
            rc = CLI_EXIT_SBX;
        } else if (fds[which] == stops[0]) {
            struct signalfd_siginfo si;
            rc = read(stops[0], &si, sizeof(si)) == (ssize_t)sizeof(si) ? 128 + (int)si.ssi_signo
                                                                       : 130;
        } else {
            cli_error("port-forward: box %s stopped", argv[optind]);
            rc = CLI_EXIT_FAIL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (ls[i].fd >= 0)
            close(ls[i].fd);
        free(addrs[i]);
    }
    for (int i = 0; i < 2; i++)
        if (stops[i] >= 0)
            close(stops[i]);
    free(sock);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    return rc;
}
