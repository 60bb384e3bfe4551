/* sbx: command dispatch, global options, help text and error printing. */
#include "cli/cli.h"

#include <getopt.h>
#include <stdarg.h>

#define SPEC_OPTIONS_HELP                                                                          \
    "Provider:\n"                                                                                  \
    "  --provider NAME        provider to use (default: $SBX_PROVIDER or " SBX_CLI_DEFAULT_PROVIDER \
    ")\n"                                                                                          \
    "  --config FILE          YAML/JSON file with provider blocks\n"                              \
    "  --block NAME           top-level block of --config to use\n"                               \
    "Box:\n"                                                                                       \
    "  --spec FILE            a whole spec (YAML/JSON); options below override it\n"             \
    "  --image IMAGE          image: a name from 'sbx image import', a registry\n"            \
    "                         reference (python:3.12, host:5000/org/x:tag; linux pulls\n"   \
    "                         it when missing), or (linux) a directory, tarball or\n"     \
    "                         OCI layout path; none: the host's system directories\n"     \
    "  --pull WHEN            missing (default), always or never: when to pull --image\n"  \
    "  -w, --workdir DIR      working directory of commands\n"                                    \
    "  -e, --env K=V|K        environment variable; K alone: $K's value (repeatable)\n"          \
    "  --cpu N                CPUs (may be fractional)\n"                                         \
    "  --memory MIB           memory limit in MiB\n"                                              \
    "  --disk GIB             disk size in GiB\n"                                                 \
    "  --ttl S                seconds the box may live\n"                                         \
    "  --ready-timeout S      seconds the box may take to become ready\n"                         \
    "  --port P               declare a box port (`sbx endpoint` reaches it) (repeatable)\n"      \
    "  -p, --publish [[ADDR:]HOSTPORT:]PORT  declare PORT, listening on HOSTPORT of ADDR\n"     \
    "                         (default 127.0.0.1; no HOSTPORT: any free port) (repeatable)\n"  \
    "  --label K=V            label, also stored as spec metadata (repeatable)\n"                 \
    "  --file REMOTE=LOCAL    copy LOCAL into the box at REMOTE at start (repeatable)\n"  \
    "  -v, --volume SRC:DST[:ro]\n"                                                             \
    "                         (linux) mount host path SRC (absolute) or named volume\n"       \
    "                         SRC at DST in the box; :ro read-only (repeatable)\n"            \
    "  --cap-add CAP          (linux) add capability CAP, e.g. NET_ADMIN (repeatable)\n"     \
    "  --shm-size SIZE        (linux) size of /dev/shm, e.g. 256m, 1g\n"                        \
    "  --network MODE         (linux) none (loopback only), host, nat (outbound through\n"    \
    "                         user-mode NAT), or NAME, a box-to-box network (`sbx network\n"  \
    "                         create NAME`); see docs/networking.md\n"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
    const char *summary;
    const char *help;
    const char *notes; /* after the options, or NULL */
};

static const struct command commands[] = {
    { "run", cli_cmd_run, "sbx run [-d [--name NAME]] [OPTIONS] [--] [CMD...]",
      "create a box, run CMD, stop the box; exit with CMD's status",
      SPEC_OPTIONS_HELP "Command:\n"
                        "  --timeout S            seconds CMD may run (default 180; 0: none)\n"
                        "  -u, --user U           user to run CMD as (name or uid[:gid])\n"
                        "  --rm                   accepted (as docker run --rm): the box is always removed\n"
                        "  -d, --detach           keep the box and make CMD (argv as given) its service;\n"
                        "                         print its id (as docker run -d; see sbx logs)\n"
                        "  --name NAME            with -d: name the box (as sbx create --name)\n"
                        "  --entrypoint PROG      run PROG with CMD's words as its arguments, in place\n"
                        "                         of the image's Entrypoint and Cmd (as docker run)\n"
                        "  --no-stdin             do not pass stdin to CMD\n"
                        "  --output-limit BYTES   stdout/stderr bytes kept (default 16 MiB each)\n"
                        "  --json                 print the result as JSON\n"
                        "  --raw                  the command's bytes exactly, also on a terminal\n"
                        "  -t                     run CMD on a terminal (stdin must be one); -i is accepted\n",
      "CMD's words run as argv, without a shell (as docker run), unless the first\n"
      "asks for one (cd, export, VAR=value, a keyword): then they are quoted and\n"
      "joined into one shell command. Use sh -c '...' for pipes. With --image and\n"
      "no CMD, the image's Entrypoint and Cmd are CMD.\n"
      "stdin, when it is not a terminal, is streamed to CMD as it comes.\n"
      "The box is stopped on exit, also on SIGINT/SIGTERM.\n" },
    { "create", cli_cmd_create, "sbx create [--name NAME] [OPTIONS]",
      "create a box that outlives the command; print its id",
      SPEC_OPTIONS_HELP "Output:\n"
                        "  --name NAME            a name other commands take in place of the id\n"
                        "                         (its label name=NAME; unique among the boxes)\n"
                        "  --json                 print the box's record as JSON\n",
      "The box keeps running until 'sbx stop ID', 'sbx gc' after its TTL, or the\n"
      "provider ends it.\n" },
    { "exec", cli_cmd_exec, "sbx exec [-it|-d] [-w D] [-e K=V] [-u U] [--timeout S] ID [--] CMD...",
      "run CMD in a box (see `sbx ls`); exit with CMD's status",
      "  -t                     run CMD on a terminal (stdin must be one); -i is accepted\n"
      "  -d                     run CMD in the background: print its number, return at once\n"
      "                         (see `sbx top --sessions`, `sbx attach`, `sbx wait`, `sbx kill`);\n"
      "                         with -t, on a terminal of its own (`sbx attach` from a terminal)\n"
      "  -w, --workdir, --cwd DIR  working directory (default: the box's workdir)\n"
      "  -e, --env K=V|K        environment variable; K alone: $K's value (repeatable)\n"
      "  -u, --user U           user to run CMD as (name or uid[:gid])\n"
      "  --timeout S            seconds CMD may run (default 180; 0: none)\n"
      "  --no-stdin             do not pass stdin to CMD\n"
      "  --output-limit BYTES   stdout/stderr bytes kept (default 16 MiB each)\n"
      "  --json                 print the result as JSON\n"
      "  --raw                  the command's bytes exactly, also on a terminal\n",
      "Options may also come between ID and CMD. The box keeps running. CMD's\n"
      "words run as argv, without a shell (as docker exec), unless the first asks\n"
      "for one (cd, export, VAR=value, a keyword).\n" },
    { "shell", cli_cmd_shell, "sbx shell ID",
      "open the box's shell on this terminal (exit with its status)", "",
      "Ctrl-P Ctrl-Q detaches and leaves the shell running: `sbx attach ID N` comes\n"
      "back to session N, replaying what it printed meanwhile (the last 1 MiB).\n" },
    { "attach", cli_cmd_attach, "sbx attach [--no-stdin|--no-follow] ID SESSION",
      "come back to a terminal session, or follow a background process",
      "  --no-stdin             do not pass stdin to a background process\n"
      "  --no-follow            print a background process's output so far and return\n"
      "  --raw                  its bytes exactly, also on a terminal\n",
      "Takes the session over from whoever holds it; replays its kept output first.\n"
      "A background process (`sbx exec -d`) is followed on stdout and stderr, stdin\n"
      "passed to it (EOF closes its stdin), until it ends: sbx exits with its status.\n"
      "--no-follow leaves it listed (`sbx wait` still gets its status).\n" },
    /* [procs] background processes and the box's processes (procs.c) */
    { "top", cli_cmd_top, "sbx top [--sessions] [--json] ID",
      "list a box's processes (as docker top), or its sessions and background processes",
      "  --sessions             list the PTY sessions and background processes instead:\n"
      "                         number, pid, mode, held or not, running or exit status,\n"
      "                         start, bytes of output, command\n"
      "  --json                 print the JSON the C API returns\n",
      "At most 4096 processes (said when the box has more); commands cut at 512 bytes.\n" },
    { "stats", cli_cmd_stats, "sbx stats [--no-stream] [--json] [ID...]",
      "what boxes use: CPU %, memory against its limit, processes (as docker stats)",
      "  --no-stream            one table, then exit (default: repaint each second\n"
      "                         until Ctrl-C)\n"
      "  --json                 one reading of each, as a JSON array\n"
      "  -a, --all              accepted (as docker stats -a): every box is shown\n",
      "With no ID, every box sbx knows. CPU % is of one CPU over the last second\n"
      "(more than 100% on several); MEM's limit is the host's memory when the box\n"
      "has none. linux boxes keep these accounts; other providers show --.\n" },
    { "wait", cli_cmd_wait, "sbx wait ID N", "wait for background process N to end; print its status",
      "", "128+S for a signal S. The process is then forgotten by the box.\n" },
    { "kill", cli_cmd_kill, "sbx kill [-s SIG] ID N", "send a signal to background process N",
      "  -s, --signal SIG       the signal: TERM, INT, HUP, KILL (default), ... or a number\n",
      NULL },
    { "cp", cli_cmd_cp, "sbx cp [-a] SRC DST",
      "copy a file or directory into or out of a box (one side is ID:PATH)",
      "  -a, --archive          keep numeric owners of a directory copied out of a box\n",
      "Exactly one of SRC and DST is ID:PATH; the other may be '-', a tar stream on\n"
      "stdout (of PATH, named by its last component) or stdin (unpacked into the\n"
      "box's directory PATH), as docker cp. A directory is copied with its\n"
      "contents and modes: DST becomes that directory (created when missing).\n"
      "A DST ending in '/' (or an existing local directory) receives a file under\n"
      "its own name. Directories need sh, mktemp and tar in the box. Out of a box,\n"
      "setuid/setgid bits are dropped and device nodes, FIFOs and sockets skipped.\n" },
    { "ls", cli_cmd_ls, "sbx ls [--label K=V] [--json]",
      "list the boxes made by `sbx create` and all the provider's boxes, with their status",
      "  --label K=V            only boxes with this label (repeatable)\n"
      "  -q, --quiet            print only ids\n"
      "  --json                 print a JSON array\n",
      "The default provider ($SBX_PROVIDER, or linux) lists its boxes, whoever made\n"
      "them (for linux: its state directory's); their labels are their metadata.\n" },
    { "logs", cli_cmd_logs, "sbx logs [-f] [--since T] [--tail N] [-t] [--raw] ID",
      "print the output of a box's service (its entrypoint)",
      "  -f, --follow           keep printing new output until the service ends or the\n"
      "                         box is stopped\n"
      "  --since T              only output since T: a duration back from now (90s,\n"
      "                         5m, 2h, 1d), unix seconds, or 2026-01-01T00:00:00Z\n"
      "  -n, --tail N           only the last N lines (or all)\n"
      "  -t, --timestamps       start each line with the time it was read (UTC)\n"
      "  --raw                  the box's bytes exactly, also on a terminal; no events\n",
      "stdout goes to stdout, stderr to stderr. sbx's events (the service's end, the\n"
      "agent's death) are lines on stderr starting with 'sbx: '; a box's line that\n"
      "starts with 'sbx:' or 'sbx-agent:' is shown after 'box: '. On a terminal,\n"
      "control sequences are shown, not obeyed. The linux provider keeps up to\n"
      "log_max_bytes (8 MiB) and one older file of the same size.\n" },
    { "status", cli_cmd_status, "sbx status [--json] ID", "print a box's live status",
      "  --json                 print the record and status as JSON\n", NULL },
    { "inspect", cli_cmd_inspect, "sbx inspect ID...",
      "print boxes' records and live status as a JSON array (as docker inspect)", "",
      "The same object as `sbx status --json ID` for each box. A box not found is\n"
      "said on stderr (exit 3); the others are still printed.\n" },
    { "pause", cli_cmd_pause, "sbx pause ID...", "freeze boxes' processes, keeping their state",
      "",
      "The box's processes stop and use no CPU until `sbx unpause`; exec and cp wait\n"
      "for nothing: they fail at once on the handle that paused it, and time out\n"
      "elsewhere. Its TTL keeps running. linux (the cgroup freezer) and docker.\n" },
    { "unpause", cli_cmd_unpause, "sbx unpause ID...", "continue paused boxes (also: sbx resume)",
      "", NULL },
    { "resume", cli_cmd_unpause, "sbx resume ID...", "continue paused boxes (as sbx unpause)", "",
      NULL },
    { "stop", cli_cmd_stop, "sbx stop [--force] ID...", "stop boxes and forget them",
      "  --force                forget the box even when stopping it fails\n", NULL },
    { "gc", cli_cmd_gc, "sbx gc [--dry-run] [--label K=V] [--run-id R] [--json]",
      "stop and forget boxes whose TTL passed or that are no longer running",
      "  --dry-run              only print what would be collected\n"
      "  --label K=V            also stop every box with this label (repeatable)\n"
      "  --run-id R             the same as --label run_id=R\n"
      "  --json                 print a JSON array\n",
      "Also runs the default provider's own collector ($SBX_PROVIDER, or linux): for\n"
      "linux, what dead boxes left (orphans: shim gone), boxes whose TTL passed, and\n"
      "the temporary trees of image imports whose process is gone. A linux box still\n"
      "being created is never touched, not even by --label.\n" },
    { "image", cli_cmd_image, "sbx image pull|build|import|ls|inspect|tag|rm|prune ...",
      "manage the default provider's images ($SBX_PROVIDER, or linux)",
      "  sbx image pull [--platform OS/ARCH[/VARIANT]] [--json] REF\n"
      "                         fetch REF (python:3.12, host:5000/org/x:tag,\n"
      "                         x@sha256:...) from its registry, named by its canonical\n"
      "                         reference; bars on a terminal, --json: a line per event\n"
      "  sbx image import [--progress] [--json] [--max-bytes N] NAME SOURCE\n"
      "                         unpack SOURCE (a tarball, compressed or not, such as\n"
      "                         docker export or mmdebstrap make; a directory; an OCI\n"
      "                         layout, or oci:DIR[:TAG]) and name it NAME; progress\n"
      "                         goes to stderr on a terminal or with --progress;\n"
      "                         --max-bytes caps the unpacked data (K, M, G, T;\n"
      "                         default: 16G or half the free space, the smaller)\n"
      "  sbx image ls [-a] [-q] [--json] [--format TEMPLATE]\n"
      "                         imported images: name, digest, size, created, source;\n"
      "                         -a also lists image build's cache (sbx-build-cache:...);\n"
      "                         --format prints TEMPLATE per image: {{.Name}},\n"
      "                         {{.Digest}}, {{.Size}}, {{.SizeBytes}}, {{.Created}},\n"
      "                         {{.Source}}; \\t and \\n are a tab and a newline\n"
      "  sbx image inspect NAME...\n"
      "                         a JSON array: each image's digest, size, source,\n"
      "                         layers and config (Env, WorkingDir, User, Entrypoint,\n"
      "                         Cmd, ExposedPorts, Labels)\n"
      "  sbx image tag SOURCE NEW_NAME\n"
      "                         a second name for the same image\n"
      "  sbx image rm [--force] NAME...\n"
      "                         forget NAME (and its layers when no other image has\n"
      "                         them); refused while a box runs it, unless --force\n"
      "  sbx image prune [--dry-run]\n"
      "                         remove layers and images no name uses, and what dead\n"
      "                         imports left; --dry-run only lists them\n"
      "  sbx image build [-f SBXFILE] [-t NAME[:TAG]] [--no-cache] [CONTEXT]\n"
      "                         run a Sbxfile (FROM, RUN, ENV, WORKDIR, COPY, USER,\n"
      "                         ENTRYPOINT, CMD) with a box per RUN/COPY, committed\n"
      "                         after each; unchanged steps are CACHED\n",
      "Images live in the linux provider's image store: $SBX_STATE_DIR/linux/images\n"
      "when SBX_STATE_DIR is set, else /var/lib/sbx/linux/images as root (the\n"
      "image_store key sets it). `--image NAME` on run/create uses them.\n" },
    /* [img-commit] */
    { "commit", cli_cmd_commit, "sbx commit [--change INSTR]... [--no-pause] [--json] BOX NAME[:TAG]",
      "make a new image of a running box's changes (as docker commit)",
      "  -c, --change INSTR     apply a Dockerfile instruction to the image's config:\n"
      "                         ENV K=V, WORKDIR D, USER U, ENTRYPOINT/CMD (JSON exec\n"
      "                         form [\"a\",\"b\"] or a shell command) (repeatable)\n"
      "  --no-pause             do not freeze the box while its changes are copied\n"
      "  --json                 print {id, name, layer, layers, paused, size}\n",
      "The new image is the box image's layers plus one layer of what the box\n"
      "changed (added and changed files, deletions, replaced directories), with the\n"
      "box image's config. Prints the new image's id. Linux provider, as root.\n" },
    { "volume", cli_cmd_volume, "sbx volume create|ls|inspect|rm ...",
      "manage the linux provider's named volumes",
      "  sbx volume create [--json] NAME\n"
      "                         make volume NAME (nothing when it exists)\n"
      "  sbx volume ls [-q] [--json]\n"
      "                         volumes: name, boxes using it, created, mountpoint\n"
      "  sbx volume inspect NAME...\n"
      "                         a JSON array: each volume's mountpoint and users\n"
      "  sbx volume rm [--force] NAME...\n"
      "                         remove NAME and its files; refused while a running\n"
      "                         box mounts it, unless --force\n",
      "A box mounts a volume with -v NAME:/path (made when missing). Volumes live in\n"
      "the linux provider's volume store: /var/lib/sbx/linux/volumes as root,\n"
      "$SBX_STATE_DIR/linux/volumes when SBX_STATE_DIR is set (the volume_store key\n"
      "sets it). See docs/volumes.md.\n" },
    /* [netw] */
    { "network", cli_cmd_network, "sbx network create|ls|inspect|rm ...",
      "manage the linux provider's box-to-box networks",
      "  sbx network create [--json] NAME\n"
      "                         make network NAME (nothing when it exists; root)\n"
      "  sbx network ls [-q] [--json]\n"
      "                         networks: name, subnet, boxes in it\n"
      "  sbx network inspect NAME...\n"
      "                         a JSON array: each network's subnet and boxes\n"
      "  sbx network rm NAME...\n"
      "                         remove NAME; refused while boxes are in it\n",
      "A box joins a network with --network NAME on run or create\n"
      "(provider_options.network). Boxes of one network reach each other by\n"
      "hostname or id, and nothing else. See docs/networking.md.\n" },
    /* [endpoint] */
    { "endpoint", cli_cmd_endpoint, "sbx endpoint [--json] ID PORT",
      "print the URL a declared port of a box is reached at",
      "  --json                 print {endpoint, headers}\n",
      "PORT must be declared at create (--port or -p). The URL's connections are\n"
      "carried into the box by its agent: a server listening on the box's own\n"
      "127.0.0.1:PORT answers, with no network in the box.\n" },
    { "port-forward", cli_cmd_port_forward, "sbx port-forward ID [[HOSTADDR:]HOSTPORT:]PORT...",
      "forward host ports into a box until Ctrl-C", "",
      "Listens on HOSTADDR:HOSTPORT (default 127.0.0.1; a bare PORT: the same port\n"
      "number; an empty HOSTPORT, as in :PORT: any free port) and carries each\n"
      "connection to 127.0.0.1:PORT in the box, declared or not. Prints\n"
      "'Forwarding from ADDR:HOSTPORT -> PORT' per mapping, then runs until\n"
      "SIGINT/SIGTERM (exit 130/143) or the box's end (exit 1).\n" },
    { "providers", cli_cmd_providers, "sbx providers [-q] [--json]", "list the available providers and where each comes from",
      "  --json                 print a JSON array\n", NULL },
};

/* Docker's names for verbs sbx has (docs/cli.md, "Coming from Docker"). */
static const struct {
    const char *alias, *name;
} aliases[] = { { "ps", "ls" }, { "rm", "stop" } };

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < SBX_ARRAY_SIZE(aliases); i++)
        if (!strcmp(aliases[i].alias, name))
            name = aliases[i].name;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(commands); i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

static void verror(const char *fmt, va_list ap)
{
    /*
     * [term] A message may carry a box's words (its agent's errors): on a
     * terminal its control sequences are shown, not obeyed (term.c).
     */
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) < 0) {
        fputs("sbx: (out of memory formatting an error)\n", stderr);
        return;
    }
    fflush(stderr);
    struct cli_out o;
    cli_out_init(&o, STDERR_FILENO, false);
    if (cli_out_write(&o, "sbx: ", 5) == 0 && cli_out_write(&o, msg, strlen(msg)) == 0 &&
        cli_out_flush(&o) == 0)
        (void)cli_write_all(STDERR_FILENO, "\n", 1);
    free(msg);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(fmt, ap);
    va_end(ap);
}

void cli_sbx_error(sbx_error *e, const char *what)
{
    if (e)
        cli_error("%s", sbx_error_message(e));
    else
        cli_error("%s failed", what);
    sbx_error_free(e);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(fmt, ap);
    va_end(ap);
    const struct command *c = cmd ? find_command(cmd) : NULL;
    if (c)
        fprintf(stderr, "usage: %s\nRun 'sbx %s --help' for more.\n", c->usage, c->name);
    else
        fputs("usage: sbx COMMAND [OPTIONS]\nRun 'sbx --help' for more.\n", stderr);
    return CLI_EXIT_USAGE;
}

int cli_bad_option(const char *cmd, int c, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    char shortopt[3] = { '-', (char)optopt, 0 };
    /* optopt names a short option; a long one is the argv word itself. */
    if (optopt && optopt < 256)
        arg = shortopt;
    if (c == ':')
        return cli_usage_error(cmd, "option '%s' needs a value", arg);
    return cli_usage_error(cmd, "unknown option '%s'", arg);
}

int cli_provider_new(const char *config_json, sbx_provider **p)
{
    sbx_error *e = NULL;
    if (sbx_provider_new(config_json, p, &e) == SBX_OK)
        return CLI_EXIT_OK;
    /* A bad name or config is the caller's to fix; anything else is sbx's. */
    int code = sbx_error_code(e);
    int rc = code == SBX_EINVAL || code == SBX_ETYPE || code == SBX_ENOENT ? CLI_EXIT_USAGE
                                                                            : CLI_EXIT_SBX;
    cli_sbx_error(e, "creating the provider");
    return rc;
}

static void main_help(FILE *out)
{
    fputs("usage: sbx [--version] [--help] COMMAND [OPTIONS]\n\n"
          "Create isolated sandboxes, run commands in them, move files, tear them down.\n\n"
          "Commands:\n",
          out);
    for (size_t i = 0; i < SBX_ARRAY_SIZE(commands); i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs("\nDocker's names work too: ps (ls), rm (stop; -f is --force).\n"
          "\nRun 'sbx COMMAND --help' for a command's options.\n"
          "Exit codes: run/exec give the command's status; 2 usage error, 3 no such box,\n"
          "124 timed out, 125 sbx or provider failure, 130/143 interrupted.\n",
          out);
}

void cli_help(const char *cmd)
{
    const struct command *c = find_command(cmd);
    if (!c) {
        main_help(stdout);
        return;
    }
    printf("usage: %s\n\n%s.\n\n%s", c->usage, c->summary, c->help);
    printf("  -h, --help             show this help\n");
    if (c->notes)
        printf("\n%s", c->notes);
}

/*
 * The words a shell completion offers, from the command table itself, so
 * completions cannot lag behind the CLI (contrib/completion/ asks for them):
 * with no command, every command and alias; for a command, each option its
 * help names (a help line's leading "-x, --long" words) and, for the
 * commands with subcommands (image, volume, network), each "sbx CMD SUB".
 */
static void print_words(const char *cmd)
{
    if (!cmd) {
        for (size_t i = 0; i < SBX_ARRAY_SIZE(commands); i++)
            printf("%s\n", commands[i].name);
        for (size_t i = 0; i < SBX_ARRAY_SIZE(aliases); i++)
            printf("%s\n", aliases[i].alias);
        printf("help\n");
        return;
    }
    const struct command *c = find_command(cmd);
    if (!c)
        return;
    char prefix[64];
    int pl = snprintf(prefix, sizeof(prefix), "sbx %s ", c->name);
    for (const char *l = c->help; *l;) {
        size_t len = strcspn(l, "\n");
        size_t indent = strspn(l, " ");
        const char *p = l + indent;
        /* An option's line is indented by two; deeper lines continue a description. */
        if (*p == '-' && indent < 8) {
            /* "-e, --env K=V": words up to the first that is not an option. */
            while (*p == '-') {
                size_t w = strcspn(p, " ,\n");
                printf("%.*s\n", (int)w, p);
                p += w;
                if (strncmp(p, ", -", 3))
                    break;
                p += 2;
            }
        } else if (!strncmp(p, prefix, (size_t)pl)) {
            p += pl;
            printf("%.*s\n", (int)strcspn(p, " \n|"), p);
        }
        l += len + (l[len] == '\n');
    }
    printf("--help\n");
}

/* Text for a troff .nf block: backslashes doubled, a line's leading '.' or '\'' escaped. */
static void troff_text(const char *s)
{
    bool bol = true;
    for (; *s; s++) {
        if (bol && (*s == '.' || *s == '\''))
            fputs("\\&", stdout);
        if (*s == '\\')
            fputs("\\e", stdout);
        else if (*s == '-')
            fputs("\\-", stdout);
        else
            putchar(*s);
        bol = *s == '\n';
    }
}

/*
 * The man page's SYNOPSIS ("synopsis") or COMMANDS section, from the
 * command table (make puts them into docs/man/sbx.1.in): what `sbx CMD
 * --help` says.
 */
static void print_man_section(const char *which)
{
    if (!strcmp(which, "synopsis")) {
        printf(".SH SYNOPSIS\n.nf\n");
        for (size_t i = 0; i < SBX_ARRAY_SIZE(commands); i++) {
            troff_text(commands[i].usage);
            putchar('\n');
        }
        printf(".fi\n");
        return;
    }
    printf(".SH COMMANDS\n");
    for (size_t i = 0; i < SBX_ARRAY_SIZE(commands); i++) {
        const struct command *c = &commands[i];
        printf(".SS %s\n", c->name);
        troff_text(c->summary);
        printf(".\n");
        for (size_t a = 0; a < SBX_ARRAY_SIZE(aliases); a++)
            if (!strcmp(aliases[a].name, c->name))
                printf("Also called\n.BR %s .\n", aliases[a].alias);
        if (*c->help) {
            printf(".PP\n.nf\n");
            troff_text(c->help);
            printf(".fi\n");
        }
        if (c->notes) {
            printf(".PP\n");
            troff_text(c->notes);
        }
    }
}

/*
 * The library's warnings and errors (a plugin that did not load, a setting
 * a provider cannot honour, TLS checks turned off) reach the user on
 * stderr; without a callback the library drops them. May run on any thread:
 * one fprintf is one locked write.
 */
static void log_to_stderr(sbx_log_level level, const char *message, void *data)
{
    (void)data;
    fprintf(stderr, "sbx: %s: %s\n", level >= SBX_LOG_ERROR ? "error" : "warning", message);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        main_help(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *first = argv[1];
    if (!strcmp(first, "--version") || !strcmp(first, "-V")) {
        printf("sbx %s\n", sbx_version());
        return CLI_EXIT_OK;
    }
    if (!strcmp(first, "--help") || !strcmp(first, "-h")) {
        main_help(stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(first, "help")) {
        /* For completions and the man page (docs/cli.md, "Completions and the man page"). */
        if (argc > 2 && !strcmp(argv[2], "--words")) {
            print_words(argc > 3 ? argv[3] : NULL);
            return CLI_EXIT_OK;
        }
        if (argc == 4 && !strcmp(argv[2], "--man")) {
            print_man_section(argv[3]);
            return CLI_EXIT_OK;
        }
        if (argc > 2 && !find_command(argv[2]))
            return cli_usage_error(NULL, "unknown command '%s'", argv[2]);
        cli_help(argc > 2 ? argv[2] : "");
        return CLI_EXIT_OK;
    }
    const struct command *c = find_command(first);
    if (!c) {
        if (first[0] == '-')
            return cli_usage_error(NULL, "unknown option '%s'", first);
        return cli_usage_error(NULL, "unknown command '%s'", first);
    }
    sbx_set_log_cb(log_to_stderr, NULL, SBX_LOG_WARNING);
    /* Each command parses its own argv, with its name as argv[0]. */
    int rc = c->fn(argc - 1, argv + 1);
    if (fflush(stdout) != 0 && rc == CLI_EXIT_OK)
        rc = CLI_EXIT_FAIL;
    return rc;
}
