#include "mpi_common.h"
int main(int argc, char **argv) { mc_init(&argc, &argv, "test_mpi_misuse"); return mc_finish(); }
