/* Option parsing for cake-demo: getopt_long, strict number parsing, one clear message per
 * mistake. Nothing is printed here because every rank parses the same argv. */
#include "demo_options.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const partition_names[] = {"contiguous", "uneven", "zigzag"};

const char *demo_partition_name(demo_partition_kind kind) { return partition_names[kind]; }

void demo_print_usage(FILE *out, const char *argv0) {
    fprintf(
        out,
        "usage: mpirun -np P %s [options]\n"
        "\n"
        "Runs cake's context-parallel forward and backward on a synthetic packed batch shaped\n"
        "like the q, k, v short convolutions of a KDA layer, recomputes the whole batch on one\n"
        "rank, and reports the exchange and whether y, dx and dw agree bit for bit.\n"
        "\n"
        "  --tokens T          global tokens (default 32768)\n"
        "  --channels C1,C2..  channels per tensor, each a positive multiple of 8, at most %d\n"
        "                      tensors (default 1024,1024,2048)\n"
        "  --mean-length L     mean sequence length; lengths are random in [1, 2L-1] (default "
        "2048)\n"
        "  --partition KIND    contiguous (equal split), uneven (contiguous, random boundaries\n"
        "                      from the seed) or zigzag (default contiguous)\n"
        "  --seed N            seed of lengths, boundaries and data (default 1)\n"
        "  --iterations K      forward + backward repeats, for timing (default 3)\n"
        "  --threads N         CPU threads per rank (default: cores / ranks on this node)\n"
        "  --check             cake's check mode: ranks compare every call's fingerprint\n"
        "  --timeout S         a cake exchange not done in S seconds fails the run\n"
        "                      (default: no limit)\n"
        "  --help              this text\n"
        "\n"
        "Rank 0 prints the report, and a progress line per step once the run passes 2 s.\n"
        "Exit status: 0 all results agree, 1 some differ, 2 bad options, 3 a call failed.\n",
        argv0, DEMO_MAX_TENSORS);
}

static demo_parse_result fail(char *message, size_t size, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(message, size, format, args);
    va_end(args);
    return DEMO_PARSE_ERROR;
}

/* A whole-string integer in [lo, hi]; 0 on success. */
static int parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    const long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_channels(const char *text, demo_options *o) {
    o->num_tensors = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        const long long c = strtoll(p, &end, 10);
        if (errno || end == p || c <= 0 || c % 8 != 0 || c > ((int64_t)1 << 24)) return -1;
        if (o->num_tensors == DEMO_MAX_TENSORS) return -1;
        o->channels[o->num_tensors++] = c;
        if (*end == '\0') return 0;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

demo_parse_result demo_parse_options(int argc, char **argv, demo_options *o, char *message,
                                     size_t size) {
    *o = (demo_options){.tokens = 32768, .mean_length = 2048, .num_tensors = 3,
                        .channels = {1024, 1024, 2048}, .partition = DEMO_PARTITION_CONTIGUOUS,
                        .seed = 1, .iterations = 3};
    static const struct option long_options[] = {
        {"tokens", required_argument, 0, 'T'},     {"channels", required_argument, 0, 'C'},
        {"mean-length", required_argument, 0, 'L'}, {"partition", required_argument, 0, 'p'},
        {"seed", required_argument, 0, 's'},       {"iterations", required_argument, 0, 'k'},
        {"threads", required_argument, 0, 't'},    {"check", no_argument, 0, 'c'},
        {"timeout", required_argument, 0, 'o'},    {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    opterr = 0; /* messages are ours, printed once by rank 0 */
    optind = 1;
    int opt;
    int64_t v;
    while ((opt = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
        switch (opt) {
        case 'T':
            if (parse_int(optarg, 1, (int64_t)1 << 40, &o->tokens))
                return fail(message, size, "--tokens: expected an integer >= 1, got '%s'", optarg);
            break;
        case 'C':
            if (parse_channels(optarg, o))
                return fail(message, size,
                            "--channels: expected 1 to %d comma-separated positive multiples of "
                            "8 (up to 16777216), got '%s'", DEMO_MAX_TENSORS, optarg);
            break;
        case 'L':
            if (parse_int(optarg, 1, (int64_t)1 << 40, &o->mean_length))
                return fail(message, size, "--mean-length: expected an integer >= 1, got '%s'",
                            optarg);
            break;
        case 'p': {
            int found = -1;
            for (int k = 0; k < 3; k++)
                if (strcmp(optarg, partition_names[k]) == 0) found = k;
            if (found < 0)
                return fail(message, size,
                            "--partition: expected contiguous, uneven or zigzag, got '%s'", optarg);
            o->partition = (demo_partition_kind)found;
            break;
        }
        case 's': {
            char *end;
            errno = 0;
            const unsigned long long s = strtoull(optarg, &end, 0);
            if (errno || end == optarg || *end != '\0' || optarg[0] == '-')
                return fail(message, size, "--seed: expected an unsigned integer, got '%s'",
                            optarg);
            o->seed = s;
            break;
        }
        case 'k':
            if (parse_int(optarg, 1, 1000000, &v))
                return fail(message, size, "--iterations: expected an integer in [1, 1000000], "
                            "got '%s'", optarg);
            o->iterations = (int)v;
            break;
        case 't':
            if (parse_int(optarg, 1, 4096, &v))
                return fail(message, size, "--threads: expected an integer in [1, 4096], got '%s'",
                            optarg);
            o->threads = (int)v;
            break;
        case 'c': o->check = 1; break;
        case 'o': {
            char *end;
            errno = 0;
            const double t = strtod(optarg, &end);
            if (errno || end == optarg || *end != '\0' || !(t > 0.0 && t <= 1e9))
                return fail(message, size, "--timeout: expected seconds > 0, got '%s'", optarg);
            o->timeout = t;
            break;
        }
        case 'h': return DEMO_PARSE_HELP;
        case ':':
            return fail(message, size, "%s: expected a value", argv[optind - 1]);
        default: /* '?' */
            if (optopt)
                return fail(message, size, "-%c: unknown option (see --help)", optopt);
            return fail(message, size, "%s: unknown option (see --help)",
                        argv[optind - 1]);
        }
    }
    if (optind < argc)
        return fail(message, size, "'%s': unexpected argument (options start with --; see --help)",
                    argv[optind]);
    return DEMO_PARSE_RUN;
}
