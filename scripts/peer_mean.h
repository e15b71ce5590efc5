// peer_mean.h: force-included (-include) into ../shared/peers/mpi_coll_bench.cpp by
// scripts/compare-peers.sh, so that the MPI peers report the mean per call as
// `chorus bench --mean` does, without a change to their source.
//
// The peer max-reduces its per-iteration times (MPI_DOUBLE, MPI_MAX, one element per timed
// call) right before it prints a size's row. This header routes the program's MPI_Allreduce
// calls through one that, for such a reduction of more than one element, lets rank 0 print
// `#mean_us,MEAN,CALLS,SECONDS,MAX_US` on stdout, the line chorus bench prints before its row;
// every other call goes straight to PMPI_Allreduce.
//
// Before that line, rank 0 prints `#loop_s,SECONDS`: the wall time of the timed loop (barrier
// and call per iteration). The peer sizes its loop from three probe iterations (a one-element
// MPI_MAX reduction of their mean time); when a busy process preempted a rank during the probe,
// the estimate is thousands of times too long and the loop covers milliseconds instead of
// --min-time seconds, too short to meet a single time slice: its mean is then its median.
// compare-peers.sh reads this line and runs such a peer again with --min-iters scaled up, as
// chorus bench extends a run planned from a stalled probe. The loop starts at the first
// MPI_Wtime after the probe's reduction (the peer's extra warm-up calls between the two read
// no clock).
#pragma once

#include <mpi.h>

#include <cstdio>

struct ChorusPeerLoop {
  bool armed = false;  // the probe's reduction ran; the next MPI_Wtime starts the timed loop
  double start = 0;
};

inline ChorusPeerLoop& ChorusPeerLoopState() {
  static ChorusPeerLoop loop;
  return loop;
}

inline double ChorusPeerWtime() {
  const double now = PMPI_Wtime();
  ChorusPeerLoop& loop = ChorusPeerLoopState();
  if (loop.armed) {
    loop.armed = false;
    loop.start = now;
  }
  return now;
}

inline int ChorusPeerMeanAllreduce(const void* send, void* recv, int count, MPI_Datatype type,
                                   MPI_Op op, MPI_Comm comm) {
  const double loop_end = PMPI_Wtime();
  const int rc = PMPI_Allreduce(send, recv, count, type, op, comm);
  if (rc != MPI_SUCCESS || type != MPI_DOUBLE || op != MPI_MAX || send == MPI_IN_PLACE) {
    return rc;
  }
  ChorusPeerLoop& loop = ChorusPeerLoopState();
  if (count == 1) {  // the probe's reduction: the timed loop comes next
    loop.armed = true;
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
    std::printf("#loop_s,%.6f\n", loop_end - loop.start);
    std::printf("#mean_us,%.3f,%d,%.3f,%.3f\n", total / count * 1e6, count, total, slowest * 1e6);
    std::fflush(stdout);
  }
  return rc;
}

#define MPI_Allreduce ChorusPeerMeanAllreduce
#define MPI_Wtime ChorusPeerWtime
