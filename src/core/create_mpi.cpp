// CreateMpiCommunicator (chorus/mpi.h): a communicator over an existing MPI communicator, on
// the MPI transport. Built into chorus::mpi with the transport, so the core never needs MPI.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "base/hash.h"
#include "chorus/mpi.h"
#include "core/comm_state.h"
#include "core/validate.h"
#include "model/tuning.h"
#include "transport/mpi/mpi_transport.h"

namespace chorus {

namespace {

// Every rank learns whether all ranks may go on, so that none is left waiting in a collective
// that another rank will never call. `local` is this rank's own verdict.
Status Agree(MPI_Comm comm, int rank, const Status& local, const CommOptions& options) {
  const auto slot = static_cast<int64_t>(options.segment_bytes);
  const int64_t depth = options.pipeline_depth;
  // The algorithm a rank forces (CommOptions::algorithm, CHORUS_ALGO) is an input of every
  // selection: compared by its hash, in two halves that an int64 maximum carries exactly.
  const uint64_t algo = internal::Fnv1a(options.algorithm);
  const auto high = static_cast<int64_t>(algo >> 32);
  const auto low = static_cast<int64_t>(algo & 0xffffffffu);
  const int64_t mine[9] = {
      local.ok() ? 0 : rank + 1, slot, -slot, depth, -depth, high, -high, low, -low};
  int64_t all[9] = {};
  if (const int rc = MPI_Allreduce(mine, all, 9, MPI_INT64_T, MPI_MAX, comm); rc != MPI_SUCCESS) {
    return internal::MpiError("CreateMpiCommunicator: MPI_Allreduce", rc);
  }
  if (!local.ok()) return local;
  if (all[0] != 0) {
    return FailedPrecondition("CreateMpiCommunicator: rank " + std::to_string(all[0] - 1) +
                              " could not join (its own error says why)");
  }
  if (all[1] != -all[2] || all[3] != -all[4]) {
    return FailedPrecondition("CreateMpiCommunicator: ranks disagree on options.segment_bytes (" +
                              std::to_string(-all[2]) + " to " + std::to_string(all[1]) +
                              ") or options.pipeline_depth (" + std::to_string(-all[4]) + " to " +
                              std::to_string(all[3]) + "); every rank must pass the same values");
  }
  if (all[5] != -all[6] || all[7] != -all[8]) {
    return FailedPrecondition(
        "CreateMpiCommunicator: ranks disagree on options.algorithm (this rank's is \"" +
        options.algorithm +
        "\"; CHORUS_ALGO sets it): every rank must force the same algorithm, or none");
  }
  return Status::Ok();
}

// The cores the job's ranks share, the same on every rank: this host's CPUs per rank on it
// (the fewest any rank sees) times the ranks. The selection reads it, so every rank must see
// the same number.
Result<int> AgreeOnCores(MPI_Comm comm, const internal::Transport& t) {
  const int64_t mine =
      std::max<int64_t>(1, int64_t{internal::UsableCpus()} * 1000 / std::max(1, t.ranks_on_host()));
  int64_t fewest = 0;
  if (const int rc = MPI_Allreduce(&mine, &fewest, 1, MPI_INT64_T, MPI_MIN, comm);
      rc != MPI_SUCCESS) {
    return internal::MpiError("CreateMpiCommunicator: MPI_Allreduce", rc);
  }
  return static_cast<int>(std::max<int64_t>(1, fewest * t.size() / 1000));
}

// MPI_Comm_create_group's tag for Communicator::Shrink (on the split duplicate, where nothing
// else is sent).
constexpr int kShrinkTag = 0x5348;

}  // namespace

Result<Communicator> CreateMpiCommunicator(MPI_Comm comm, const CommOptions& options) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0) {
    return FailedPrecondition(
        "CreateMpiCommunicator: MPI is not initialised (call MPI_Init_thread first)");
  }
  if (finalized != 0) return FailedPrecondition("CreateMpiCommunicator: MPI is already finalised");
  if (comm == MPI_COMM_NULL) return InvalidArgument("CreateMpiCommunicator: comm is MPI_COMM_NULL");
  int inter = 0;
  MPI_Comm_test_inter(comm, &inter);
  if (inter != 0) {
    return InvalidArgument(
        "CreateMpiCommunicator: comm is an intercommunicator; pass an intracommunicator");
  }
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);

  // Checks that may differ between ranks are agreed on before anything else is collective.
  Status local = internal::ValidateCommOptions(options, size, "CreateMpiCommunicator");
  if (local.ok() && options.transport != TransportKind::kAuto &&
      options.transport != TransportKind::kMpi) {
    local = InvalidArgument("CreateMpiCommunicator: options.transport must be kAuto or kMpi");
  }
  int level = MPI_THREAD_SINGLE;
  int main_thread = 0;
  MPI_Query_thread(&level);
  MPI_Is_thread_main(&main_thread);
  if (local.ok() && level < MPI_THREAD_SERIALIZED && main_thread == 0) {
    local = FailedPrecondition(
        std::string("CreateMpiCommunicator: MPI was initialised with ") +
        (level == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : "MPI_THREAD_FUNNELED") +
        ", so only the main thread may call MPI; create and drive this communicator from the "
        "main thread, or initialise MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...)");
  }
  // Every rank uses rank 0's tuning, so that all pick the same algorithms; rank 0 reads it
  // before the agreement, so that a bad file stops every rank alike.
  Result<model::Tuning> tuning = model::DefaultTuning();
  if (local.ok() && rank == 0) {
    tuning = model::TuningFromFile(options.tuning_file);
    if (!tuning.ok()) {
      local = Status(tuning.status().code(), "CreateMpiCommunicator: " + tuning.status().message());
    }
  }
  CHORUS_RETURN_IF_ERROR(Agree(comm, rank, local, options));
  std::string text = rank == 0 ? model::FormatTuning(*tuning) : std::string();
  int64_t length = static_cast<int64_t>(text.size());
  if (const int rc = MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm); rc != MPI_SUCCESS) {
    return internal::MpiError("CreateMpiCommunicator: MPI_Bcast", rc);
  }
  text.resize(static_cast<size_t>(length));
  if (const int rc = MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, comm);
      rc != MPI_SUCCESS) {
    return internal::MpiError("CreateMpiCommunicator: MPI_Bcast", rc);
  }
  if (rank != 0) {
    tuning = model::ParseTuning(text, "rank 0's tuning");
    if (!tuning.ok()) return tuning.status();
  }
  auto transport = internal::MpiTransport::Connect(comm, options.segment_bytes,
                                                   options.pipeline_depth, options.timeout);
  if (!transport.ok()) return transport.status();
  auto cores = AgreeOnCores(comm, **transport);
  if (!cores.ok()) return cores.status();
  // Split and Shrink run on a duplicate of their own, so that their MPI calls never meet the
  // transport's (its teardown's collective, above all). Freed with the communicator.
  MPI_Comm own = MPI_COMM_NULL;
  if (const int rc = MPI_Comm_dup(comm, &own); rc != MPI_SUCCESS) {
    return internal::MpiError("CreateMpiCommunicator: MPI_Comm_dup", rc);
  }
  // Errors come back as codes, as on the transport's duplicate, rather than end the job.
  MPI_Comm_set_errhandler(own, MPI_ERRORS_RETURN);
  const std::shared_ptr<MPI_Comm> splits(new MPI_Comm(own), [](MPI_Comm* c) {
    int done = 0;
    MPI_Finalized(&done);
    if (done == 0) MPI_Comm_free(c);
    delete c;
  });
  auto state =
      std::make_unique<internal::CommState>(std::move(transport).value(), TransportKind::kMpi,
                                            options, tuning->For(TransportKind::kMpi), *cores);
  // Communicator::Split, all in MPI calls that every rank makes whatever happens, as MPI needs
  // (an MPI collective cannot time out, so no rank may leave one out): the colors checked, the
  // groups made by MPI_Comm_split, a communicator of each, and whether every group was made.
  state->SetSplit([splits, options, rank](int color,
                                          int key) -> Result<std::optional<Communicator>> {
    const MPI_Comm c = *splits;
    const int bad = color < Communicator::kNoColor ? rank + 1 : 0;
    int worst = 0;
    if (const int rc = MPI_Allreduce(&bad, &worst, 1, MPI_INT, MPI_MAX, c); rc != MPI_SUCCESS) {
      return internal::MpiError("split: MPI_Allreduce", rc);
    }
    if (worst != 0) {
      return InvalidArgument(
          bad != 0 ? internal::BadSplitColor(color)
                   : "split: rank " + std::to_string(worst - 1) +
                         " rejected this call (its color is below Communicator::kNoColor)");
    }
    MPI_Comm part = MPI_COMM_NULL;
    if (const int rc = MPI_Comm_split(c, color < 0 ? MPI_UNDEFINED : color, key, &part);
        rc != MPI_SUCCESS) {
      return internal::MpiError("split: MPI_Comm_split", rc);
    }
    std::optional<Communicator> made;
    Status mine;
    if (part != MPI_COMM_NULL) {
      auto created = CreateMpiCommunicator(part, options);
      MPI_Comm_free(&part);
      if (created.ok()) {
        made = std::move(created).value();
      } else {
        mine = created.status();
      }
    }
    const int failed = mine.ok() ? 0 : rank + 1;
    int first = 0;
    if (const int rc = MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MAX, c); rc != MPI_SUCCESS) {
      return internal::MpiError("split: MPI_Allreduce", rc);
    }
    if (!mine.ok()) {
      return Status(mine.code() == StatusCode::kInvalidArgument ? StatusCode::kFailedPrecondition
                                                                : mine.code(),
                    "split: rank " + std::to_string(rank) +
                        " could not make its communicator: " + mine.message());
    }
    if (first != 0) {
      return FailedPrecondition("split: rank " + std::to_string(first - 1) +
                                " could not make its communicator (its own error says why)");
    }
    return made;
  });
  // Communicator::Shrink: the ranks kept (and they alone) make their MPI communicator.
  state->SetShrink([splits, options](std::span<const int> keep) -> Result<Communicator> {
    MPI_Group all = MPI_GROUP_NULL;
    MPI_Group kept = MPI_GROUP_NULL;
    MPI_Comm part = MPI_COMM_NULL;
    int rc = MPI_Comm_group(*splits, &all);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Group_incl(all, static_cast<int>(keep.size()), keep.data(), &kept);
    }
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(*splits, kept, kShrinkTag, &part);
    if (kept != MPI_GROUP_NULL) MPI_Group_free(&kept);
    if (all != MPI_GROUP_NULL) MPI_Group_free(&all);
    if (rc != MPI_SUCCESS) return internal::MpiError("MPI_Comm_create_group", rc);
    auto made = CreateMpiCommunicator(part, options);
    MPI_Comm_free(&part);
    return made;
  });
  return Communicator(std::move(state));
}

}  // namespace chorus
