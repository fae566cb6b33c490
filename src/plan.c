/* One rank's plan: its fragments (maximal runs of local rows in one sequence, consecutive in
 * global order) and, for each, the owner of every history and future row. */
#include "internal.h"

#include <stdlib.h>

struct cake_plan {
    int rank;
    int64_t local_rows;
    int64_t num_fragments;
    cake_fragment *fragments;
};

void cake_plan_destroy(cake_plan *plan) {
    if (!plan) return;
    free(plan->fragments);
    free(plan);
}

static cake_halo_row halo_row(const cake_partition *partition, int rank, int64_t g,
                              int64_t seq_start, int64_t seq_end) {
    cake_halo_row row = {-1, -1, -1, 0};
    if (g < seq_start || g >= seq_end) return row; /* outside the sequence: +0.0 */
    row.global_row = g;
    cake_partition_owner(partition, g, &row.rank, &row.local_row);
    row.is_local = row.rank == rank;
    return row;
}

/* Fragments of one rank: each range is cut at sequence boundaries, and a piece that continues
 * the previous fragment (same sequence, next global row) extends it. */
static int64_t build_fragments(const cake_partition *partition, int rank, cake_fragment *out) {
    const int64_t *cu = cake_partition_cu_seqlens(partition);
    const int64_t num_seqs = cake_partition_num_seqs(partition);
    int64_t count = 0, local = 0, num_ranges;
    const cake_range *ranges = cake_partition_ranges(partition, rank, &num_ranges);
    for (int64_t i = 0; i < num_ranges; i++) {
        for (int64_t g = ranges[i].start; g < ranges[i].end;) {
            const int64_t s = cake_sequence_of_row(cu, num_seqs, g);
            const int64_t piece_end = cu[s + 1] < ranges[i].end ? cu[s + 1] : ranges[i].end;
            cake_fragment *prev = count > 0 ? &out[count - 1] : NULL;
            if (prev && prev->seq_index == s && prev->global_start + prev->length == g) {
                prev->length += piece_end - g;
            } else {
                out[count++] = (cake_fragment){.local_start = local,
                                               .length = piece_end - g,
                                               .global_start = g,
                                               .seq_index = s,
                                               .seq_start = cu[s],
                                               .seq_end = cu[s + 1]};
            }
            local += piece_end - g;
            g = piece_end;
        }
    }
    return count;
}

/* Upper bound on the fragments of a rank: one per (range, sequence) piece. */
static int64_t count_pieces(const cake_partition *partition, int rank) {
    const int64_t *cu = cake_partition_cu_seqlens(partition);
    const int64_t num_seqs = cake_partition_num_seqs(partition);
    int64_t count = 0, num_ranges;
    const cake_range *ranges = cake_partition_ranges(partition, rank, &num_ranges);
    for (int64_t i = 0; i < num_ranges; i++)
        if (ranges[i].end > ranges[i].start)
            count += cake_sequence_of_row(cu, num_seqs, ranges[i].end - 1) -
                     cake_sequence_of_row(cu, num_seqs, ranges[i].start) + 1;
    return count;
}

cake_status cake_plan_create(const cake_partition *partition, int rank, cake_plan **out) {
    cake_clear_error();
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    if (!partition)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "partition: expected a pointer, got NULL");
    const int num_ranks = cake_partition_num_ranks(partition);
    if (rank < 0 || rank >= num_ranks)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "rank: expected 0 <= rank < %d, got %d",
                         num_ranks, rank);
    cake_plan *plan = calloc(1, sizeof *plan);
    const int64_t pieces = count_pieces(partition, rank);
    if (plan) plan->fragments = malloc(sizeof(cake_fragment) * (size_t)(pieces > 0 ? pieces : 1));
    if (!plan || !plan->fragments) {
        cake_plan_destroy(plan);
        return cake_fail(CAKE_ERROR_OUT_OF_MEMORY, "plan: out of memory for %lld fragments",
                         (long long)pieces);
    }
    plan->rank = rank;
    cake_partition_local_rows(partition, rank, &plan->local_rows);
    plan->num_fragments = build_fragments(partition, rank, plan->fragments);
    for (int64_t f = 0; f < plan->num_fragments; f++) {
        cake_fragment *frag = &plan->fragments[f];
        const int64_t end = frag->global_start + frag->length;
        for (int j = 0; j < CAKE_HALO_ROWS; j++) {
            frag->history[j] = halo_row(partition, rank, frag->global_start - CAKE_HALO_ROWS + j,
                                        frag->seq_start, frag->seq_end);
            /* end + j only when it is inside the sequence (it could overflow near INT64_MAX). */
            frag->future[j] = j < frag->seq_end - end
                                  ? halo_row(partition, rank, end + j, frag->seq_start, frag->seq_end)
                                  : (cake_halo_row){-1, -1, -1, 0};
        }
    }
    *out = plan;
    return CAKE_SUCCESS;
}

int cake_plan_rank(const cake_plan *plan) { return plan ? plan->rank : -1; }
int64_t cake_plan_local_rows(const cake_plan *plan) { return plan ? plan->local_rows : 0; }
int64_t cake_plan_num_fragments(const cake_plan *plan) { return plan ? plan->num_fragments : 0; }
int64_t cake_plan_pool_rows(const cake_plan *plan) {
    return plan ? plan->num_fragments * CAKE_HALO_ROWS : 0;
}
const cake_fragment *cake_plan_fragments(const cake_plan *plan) { return plan->fragments; }

cake_status cake_plan_fragment(const cake_plan *plan, int64_t index, cake_fragment *out) {
    cake_clear_error();
    if (!plan) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "plan: expected a pointer, got NULL");
    if (!out) return cake_fail(CAKE_ERROR_INVALID_ARGUMENT, "out: expected a pointer, got NULL");
    if (index < 0 || index >= plan->num_fragments)
        return cake_fail(CAKE_ERROR_INVALID_ARGUMENT,
                         "index: expected 0 <= index < %lld fragments, got %lld",
                         (long long)plan->num_fragments, (long long)index);
    *out = plan->fragments[index];
    return CAKE_SUCCESS;
}
