// peer_mean.h: force-included (-include) into ../shared/peers/mpi_coll_bench.cpp by
// scripts/compare-peers.sh, so that the MPI peers report the mean per call as
// `chorus bench --mean` does, without a change to their source.
//
// The peer max-reduces its per-iteration times (MPI_DOUBLE, MPI_MAX, one element per timed
// call) right before it prints a size's row. This header routes the program's MPI_Allreduce
// calls through one that, for such a reduction of more than one element, lets rank 0 print
// `#mean_us,MEAN,CALLS,SECONDS,MAX_US` on stdout, the line chorus bench prints before its row;
// every other call goes straight to PMPI_Allreduce.
#pragma once

#include <mpi.h>

#include <cstdio>

inline int ChorusPeerMeanAllreduce(const void* send, void* recv, int count, MPI_Datatype type,
                                   MPI_Op op, MPI_Comm comm) {
  const int rc = PMPI_Allreduce(send, recv, count, type, op, comm);
  if (rc != MPI_SUCCESS || type != MPI_DOUBLE || op != MPI_MAX || count < 2 ||
      send == MPI_IN_PLACE) {
    return rc;
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    const double* times = static_cast<const double*>(recv);
    double total = 0;
    double slowest = 0;
    for (int i = 0; i < count; ++i) {
      total += times[i];
      if (times[i] > slowest) slowest = times[i];
    }
    std::printf("#mean_us,%.3f,%d,%.3f,%.3f\n", total / count * 1e6, count, total, slowest * 1e6);
    std::fflush(stdout);
  }
  return rc;
}

#define MPI_Allreduce ChorusPeerMeanAllreduce
