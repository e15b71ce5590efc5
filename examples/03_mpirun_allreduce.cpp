// 03: chorus inside an MPI job. Launch it with mpirun and pick how the ranks talk:
//
//   mpirun -np 4 ./build/examples/03_mpirun_allreduce --transport mpi [--count N] [--bench K]
//   mpirun -np 4 ./build/examples/03_mpirun_allreduce --transport tcp [--count N]
//
//   mpi  MPI_Init_thread, then chorus::CreateMpiCommunicator(MPI_COMM_WORLD): chorus's ring
//        algorithms over MPI's point-to-point messages (and so over whatever fabric the MPI
//        drives). --bench K also times K all-reduces against MPI_Allreduce on the same buffer.
//   tcp  no MPI at all: chorus reads the rank and size that mpirun puts in the environment
//        (CommOptionsFromEnvironment) and connects the ranks itself over TCP.
//
// Element i of rank r is (i mod 4096) * (r + 1), so the sum over p ranks is
// (i mod 4096) * p(p+1)/2: an integer below 2^24 for up to 64 ranks, exact in float32 whatever
// the order of additions. Every rank checks every element; the ranks then agree (with one more
// all-reduce) and rank 0 prints one line. The exit status is 1 on any error or wrong element.
// As root, Open MPI wants `mpirun --allow-run-as-root`.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "chorus/mpi.h"

namespace {

struct Args {
  std::string transport;
  size_t count = size_t{1} << 20;
  int bench = 0;
};

bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--transport" && has_value) {
      args->transport = argv[++i];
    } else if (arg == "--count" && has_value) {
      args->count = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--bench" && has_value) {
      args->bench = std::atoi(argv[++i]);
    } else {
      return false;
    }
  }
  return args->transport == "mpi" || args->transport == "tcp";
}

float Input(size_t i, int rank) {
  return static_cast<float>(i % 4096) * static_cast<float>(rank + 1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The all-reduce and its check on one rank; 0 when every rank got every element right.
int Run(chorus::Communicator& comm, const Args& args) {
  const int rank = comm.rank();
  const int size = comm.size();
  std::vector<float> data(args.count);
  for (size_t i = 0; i < args.count; ++i) data[i] = Input(i, rank);
  if (chorus::Status s = comm.AllReduce(std::span<float>(data), chorus::ReduceOp::kSum); !s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
  int32_t wrong = 0;
  for (size_t i = 0; i < args.count; ++i) {
    const float want = static_cast<float>(i % 4096) * ranks_sum;
    if (data[i] != want && wrong++ == 0) {
      std::fprintf(stderr, "rank %d: element %zu is %g, want %g\n", rank, i, data[i], want);
    }
  }
  // Every rank learns whether any rank saw a wrong element.
  if (chorus::Status s = comm.AllReduce(std::span<int32_t>(&wrong, 1), chorus::ReduceOp::kSum);
      !s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  const std::string over(chorus::TransportKindName(comm.transport()));
  if (rank == 0) {
    std::printf("allreduce over %s: %d ranks, %zu floats, %s\n", over.c_str(), size, args.count,
                wrong == 0 ? "correct" : (std::to_string(wrong) + " wrong elements").c_str());
  }
  return wrong == 0 ? 0 : 1;
}

// Medians of `iters` chorus all-reduces and as many MPI_Allreduce calls of the same buffer.
int Bench(chorus::Communicator& comm, const Args& args) {
  std::vector<float> data(args.count, 1.0f);
  std::vector<double> ours;
  std::vector<double> theirs;
  using Ms = std::chrono::duration<double, std::milli>;
  for (int it = 0; it < args.bench; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = std::chrono::steady_clock::now();
    if (chorus::Status s = comm.AllReduce(std::span<float>(data), chorus::ReduceOp::kSum);
        !s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", comm.rank(), s.ToString().c_str());
      return 1;
    }
    ours.push_back(Ms(std::chrono::steady_clock::now() - start).count());
    MPI_Barrier(MPI_COMM_WORLD);
    start = std::chrono::steady_clock::now();
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(args.count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    theirs.push_back(Ms(std::chrono::steady_clock::now() - start).count());
  }
  if (comm.rank() == 0) {
    std::printf("%zu floats, median of %d: chorus over mpi %.3f ms, MPI_Allreduce %.3f ms\n",
                args.count, args.bench, Median(ours), Median(theirs));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr, "usage: mpirun -np N %s --transport mpi|tcp [--count N] [--bench ITERS]\n",
                 argv[0]);
    return 2;
  }
  if (args.transport == "tcp") {
    auto options = chorus::CommOptionsFromEnvironment({.transport = chorus::TransportKind::kTcp});
    if (!options.ok()) {
      std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
      return 1;
    }
    auto comm = chorus::Communicator::Create(*options);
    if (!comm.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", options->rank, comm.status().ToString().c_str());
      return 1;
    }
    return Run(*comm, args);
  }

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int status = 0;
  {  // every chorus communicator must be gone before MPI_Finalize
    auto comm = chorus::CreateMpiCommunicator(MPI_COMM_WORLD);
    if (!comm.ok()) {
      std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
      status = 1;
    } else {
      status = Run(*comm, args);
      if (status == 0 && args.bench > 0) status = Bench(*comm, args);
    }
  }
  MPI_Finalize();
  return status;
}
