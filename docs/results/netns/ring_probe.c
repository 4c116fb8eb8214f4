/* Task B's reproducer: fedshard's ring all-reduce pattern (src/comm/mpi_ops.cpp shift(): Irecv from rank-1,
 * Isend to rank+1, p-1 reduce-scatter steps then p-1 all-gather steps, segments of N/p) on raw MPI, so a
 * 2-rank ring and a 4-rank ring can be timed over the same shaped links without fedshard around them.
 * Prints seconds per all-reduce and per-rank bus bandwidth = 2(p-1)/p * N / time.
 * Build: mpicc -O2 -o ring_probe ring_probe.c   Run: ring_probe MIB REPS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int p, r;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  const long mib = argc > 1 ? atol(argv[1]) : 8, reps = argc > 2 ? atol(argv[2]) : 5;
  const long n = mib * (1 << 20) / 4 / p * p, seg = n / p;
  float* buf = calloc(n, 4);
  float* tmp = calloc(seg, 4);
  for (long k = 0; k < reps; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int s = 0; s < 2 * (p - 1); ++s) {
      MPI_Request q[2];
      int from = (r - 1 + p) % p, to = (r + 1) % p;
      MPI_Irecv(tmp, (int)seg, MPI_FLOAT, from, 7, MPI_COMM_WORLD, &q[0]);
      MPI_Isend(buf + ((r - s + 2 * p) % p) * seg, (int)seg, MPI_FLOAT, to, 7, MPI_COMM_WORLD, &q[1]);
      MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    }
    double t = MPI_Wtime() - t0, mx;
    MPI_Reduce(&t, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (r == 0)
      printf("p=%d MiB=%ld rep=%ld s=%.3f busMbit/s=%.1f\n", p, mib, k, mx, 2.0 * (p - 1) / p * n * 4 * 8 / mx / 1e6);
  }
  MPI_Finalize();
  return 0;
}
