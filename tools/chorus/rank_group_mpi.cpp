// RunMpiRank: the CLI's ranks as the ranks of an MPI job, over chorus::mpi. Compiled in every
// build so that the commands need no #if of their own; without MPI it only says so.
#include <string>

#include "rank_group.h"

#if CHORUS_CLI_WITH_MPI
#include <mpi.h>

#include "chorus/mpi.h"
#endif

namespace chorus::cli {

bool CliHasMpi() { return CHORUS_CLI_WITH_MPI != 0; }

#if CHORUS_CLI_WITH_MPI

Status RunMpiRank(const CommOptions& base, const RankBody& body, const Watchdog::Options& watch) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  const bool owns_mpi = initialized == 0;
  if (owns_mpi) {
    // Every MPI call comes from this thread: the body runs here, and the watchdog's Abort() only
    // records the failure, which this thread sends at its next poll (chorus/mpi.h). So
    // SERIALIZED is enough, and asks less of the MPI than MULTIPLE.
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      return Unavailable("MPI_Init_thread failed");
    }
  }
  Status status;
  {
    CommOptions options = base;
    options.transport = TransportKind::kMpi;
    Result<Communicator> comm = CreateMpiCommunicator(MPI_COMM_WORLD, options);
    if (comm.ok()) {
      status = RunRankOn(*comm, base.timeout, body, watch);
    } else {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      status =
          Status(comm.status().code(), "rank " + std::to_string(rank) +
                                           ": CreateMpiCommunicator: " + comm.status().message());
    }
  }  // the communicator's teardown is collective and must come before MPI_Finalize
  if (owns_mpi) MPI_Finalize();
  return status;
}

#else

Status RunMpiRank(const CommOptions&, const RankBody&, const Watchdog::Options&) {
  return FailedPrecondition(
      "--transport mpi: this chorus was built without MPI (chorus::mpi needs CMake to find an "
      "MPI, e.g. Debian's libopenmpi-dev, and is left out of sanitizer builds)");
}

#endif

}  // namespace chorus::cli
