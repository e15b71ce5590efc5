// A user's MPI program on the installed chorus::mpi: every rank contributes {r+1, 10(r+1)} and
// checks the sums. Built by the find_package_mpi consumer and run under mpirun.
#include <chorus/chorus.h>
#include <chorus/mpi.h>
#include <mpi.h>

#include <cstdint>
#include <iostream>
#include <span>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int failed = 0;
  {  // every chorus communicator must be gone before MPI_Finalize
    auto comm = chorus::CreateMpiCommunicator(MPI_COMM_WORLD);
    if (!comm.ok()) {
      std::cerr << "CreateMpiCommunicator: " << comm.status() << "\n";
      failed = 1;
    } else {
      const int p = comm->size();
      const int32_t r = comm->rank() + 1;
      std::vector<int32_t> data = {r, 10 * r};
      const chorus::Status s = comm->AllReduce(std::span<int32_t>(data), chorus::ReduceOp::kSum);
      const int32_t sum = p * (p + 1) / 2;
      if (!s.ok() || data != std::vector<int32_t>{sum, 10 * sum}) {
        std::cerr << "rank " << comm->rank() << ": " << s << ", got " << data[0] << " " << data[1]
                  << "\n";
        failed = 1;
      } else if (comm->rank() == 0) {
        std::cout << "chorus consumer: all-reduce over " << p << " MPI ranks OK\n";
      }
    }
  }
  MPI_Finalize();
  return failed;
}
