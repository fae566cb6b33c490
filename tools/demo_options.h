/* Command-line options of cake-demo. */
#ifndef CAKE_DEMO_OPTIONS_H
#define CAKE_DEMO_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DEMO_MAX_TENSORS 16

typedef enum demo_partition_kind {
    DEMO_PARTITION_CONTIGUOUS,
    DEMO_PARTITION_UNEVEN,
    DEMO_PARTITION_ZIGZAG
} demo_partition_kind;

typedef struct demo_options {
    int64_t tokens;      /* T, global */
    int64_t mean_length; /* mean sequence length */
    int num_tensors;
    int64_t channels[DEMO_MAX_TENSORS];
    demo_partition_kind partition;
    uint64_t seed;
    int iterations;
    int threads;     /* CPU threads per rank; 0: cores / ranks on this node */
    int check;       /* cake's check mode */
    double timeout;  /* seconds an exchange may take; 0: no limit */
} demo_options;

typedef enum demo_parse_result {
    DEMO_PARSE_RUN,
    DEMO_PARSE_HELP,
    DEMO_PARSE_ERROR
} demo_parse_result;

/* Parses argv without printing (every rank parses; rank 0 alone prints). On DEMO_PARSE_ERROR
 * `message` holds one line saying which option is wrong and why. */
demo_parse_result demo_parse_options(int argc, char **argv, demo_options *out, char *message,
                                     size_t message_size);
void demo_print_usage(FILE *out, const char *argv0);
const char *demo_partition_name(demo_partition_kind kind);

#endif
