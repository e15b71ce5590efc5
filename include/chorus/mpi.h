// chorus/mpi.h: chorus communicators over an existing MPI communicator (library chorus::mpi,
// built when CMake finds MPI; CHORUS_WITH_MPI).
//
//   int provided = 0;
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
//   auto comm = chorus::CreateMpiCommunicator(MPI_COMM_WORLD);
//   if (!comm.ok()) { ... comm.status().message() ... }
//   std::vector<float> grad(n, 1.0f);
//   chorus::Status s = comm->AllReduce(std::span<float>(grad), chorus::ReduceOp::kSum);
//   ...
//   // destroy every chorus communicator before MPI_Finalize()
//
// chorus then runs its own algorithms (ring all-reduce, reduce-scatter, all-gather) over MPI
// point-to-point messages on a private duplicate of `comm`, so data moves over whatever fabric
// the MPI drives. Ranks and size are those of `comm`; comm.transport() is TransportKind::kMpi.
//
// Destruction is collective, like MPI_Comm_free: a rank's destructor waits (up to
// options.timeout) until every rank destroys its communicator, so that no message of it is
// left in flight. Destroy communicators in the same order on every rank, and before
// MPI_Finalize.
//
// Errors: as for any communicator (chorus/communicator.h): argument checks, sticky failures,
// every wait bounded by options.timeout. MPI cannot report a dead process, so a rank that never
// answers shows up as kDeadlineExceeded; Abort() and any rank's failure reach the other ranks
// as kAborted or the original error.
//
// Thread safety: a communicator is driven by one thread at a time. MPI must allow chorus's MPI
// calls from that thread: with MPI_THREAD_SINGLE or MPI_THREAD_FUNNELED only the main thread
// may create and drive it (creating it elsewhere is kFailedPrecondition); with
// MPI_THREAD_SERIALIZED any one thread at a time, and not while another thread of the process
// is inside MPI; several communicators driven from several threads at once need
// MPI_THREAD_MULTIPLE. Abort() from another thread reaches the peers at once only under
// MPI_THREAD_MULTIPLE, otherwise the next time the driving thread waits in chorus.
#pragma once

#include <mpi.h>

#include "chorus/communicator.h"
#include "chorus/export.h"

namespace chorus {
CHORUS_API_BEGIN

// Creates a communicator over `comm`'s ranks. Collective: every rank of `comm` calls it, with
// the same options.segment_bytes and options.pipeline_depth (checked: all ranks then return
// kFailedPrecondition). It blocks like MPI_Comm_dup until all ranks have called it.
// Honoured: options.timeout, segment_bytes, pipeline_depth, algorithm; options.transport must
// be kAuto or kMpi; rank, size, store and the other Communicator::Create fields are ignored.
// kFailedPrecondition when MPI is not initialised or already finalised.
Result<Communicator> CreateMpiCommunicator(MPI_Comm comm, const CommOptions& options = {});

CHORUS_API_END
}  // namespace chorus
