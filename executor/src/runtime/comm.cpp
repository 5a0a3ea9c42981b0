// The transport-independent part of Comm: argument checks, groups, the fixed-order default allreduce,
// and the launcher that runs a job's ranks as threads.
#include "pd2bw/executor/comm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "pd2bw/error.hpp"

namespace pd2bw::executor {

struct Group::State {
  std::vector<int64_t> members;
  int64_t position = 0, id = 0;
  const Comm* owner = nullptr;
  std::shared_ptr<void> native;
};

namespace {

const std::vector<int64_t> kNoMembers;
constexpr int64_t kGroupCreationTag = kMaxTag;
const std::shared_ptr<void> kNoNative;

void check_tag(int64_t tag, int64_t max) {
  if (tag < 0 || tag > max) throw UsageError(fmt::format("message tag {} is outside [0, {}]", tag, max));
}

size_t scalar_bytes(ScalarType t) { return t == ScalarType::f32 ? sizeof(float) : sizeof(double); }

template <typename T>
void add_into(void* acc, const std::vector<std::byte>& other, size_t n) {
  T* a = static_cast<T*>(acc);
  const T* b = reinterpret_cast<const T*>(other.data());
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace

const std::vector<int64_t>& Group::members() const { return state_ ? state_->members : kNoMembers; }
int64_t Group::position() const { return state_ ? state_->position : -1; }
int64_t Group::id() const { return state_ ? state_->id : -1; }
const std::shared_ptr<void>& Group::native() const { return state_ ? state_->native : kNoNative; }

Comm::Comm() {
  static std::atomic<uint64_t> made{0};
  serial_ = ++made;
}

void Comm::check_peer(int64_t peer) const {
  if (peer < 0 || peer >= size() || peer == rank())
    throw UsageError(fmt::format("rank {}: bad peer rank {} (job of {} ranks)", rank(), peer, size()));
}

void Comm::send(int64_t dst, int64_t tag, ConstMessageBuffer data, Stream stream) {
  check_peer(dst);
  check_tag(tag, kMaxUserTag);
  do_send(dst, tag, data, stream);
}

void Comm::recv(int64_t src, int64_t tag, MessageBuffer data, Stream stream) {
  check_peer(src);
  check_tag(tag, kMaxUserTag);
  do_recv(src, tag, data, stream);
}

Group Comm::group(std::vector<int64_t> members) {
  std::vector<int64_t> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (members.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 ||
      sorted.back() >= size())
    throw UsageError(fmt::format("rank {}: a group needs distinct ranks in [0, {})", rank(), size()));
  const auto at = std::find(members.begin(), members.end(), rank());
  if (at == members.end()) throw UsageError(fmt::format("rank {} is not a member of the group it makes", rank()));
  auto state = std::make_shared<Group::State>();
  state->position = at - members.begin();
  state->id = agree_on_group_id(members, state->position);
  if (kMaxUserTag + 1 + state->id >= kGroupCreationTag)
    throw UsageError(fmt::format("rank {}: more than {} groups", rank(), kGroupCreationTag - kMaxUserTag - 1));
  state->owner = this;
  state->native = make_native_group(members);
  state->members = std::move(members);
  Group g;
  g.state_ = std::move(state);
  return g;
}

// Like an MPI context id: the members take the largest of their next free ids, so all of them hold the
// same id and no rank holds two groups with one id; a collective's tag between two members then belongs
// to one group only. Members that share several groups make them in the same order, so these exchanges
// (all under one tag) pair up.
int64_t Comm::agree_on_group_id(const std::vector<int64_t>& members, int64_t position) {
  int64_t id = next_group_id_;
  const ConstMessageBuffer mine{&id, sizeof id, MemoryKind::host};
  if (position != 0) {
    do_send(members[0], kGroupCreationTag, mine, {});
    do_recv(members[0], kGroupCreationTag, {&id, sizeof id, MemoryKind::host}, {});
  } else {
    for (size_t g = 1; g < members.size(); ++g) {
      int64_t theirs = 0;
      do_recv(members[g], kGroupCreationTag, {&theirs, sizeof theirs, MemoryKind::host}, {});
      id = std::max(id, theirs);
    }
    for (size_t g = 1; g < members.size(); ++g) do_send(members[g], kGroupCreationTag, mine, {});
  }
  next_group_id_ = id + 1;
  return id;
}

std::shared_ptr<void> Comm::make_native_group(const std::vector<int64_t>&) { return nullptr; }

void Comm::allreduce_sum(const Group& group, ScalarType type, MessageBuffer values, Stream stream) {
  if (!group.state_ || group.state_->owner != this)
    throw UsageError(fmt::format("rank {}: allreduce over a group this rank's Comm did not make", rank()));
  if (values.bytes % scalar_bytes(type) != 0)
    throw UsageError(fmt::format("allreduce of {} bytes: not a whole number of elements", values.bytes));
  if (group.size() > 1) do_allreduce_sum(group, type, values, stream);
}

// One tag per group suffices: members call the group's collectives in the same order and messages
// between a pair under one tag stay in order, so the k-th message from a member belongs to the k-th
// collective.
void Comm::do_allreduce_sum(const Group& group, ScalarType type, MessageBuffer values, Stream stream) {
  if (values.memory != MemoryKind::host)
    throw UsageError("the fixed-order allreduce sums host memory only; this transport has no device allreduce");
  const int64_t tag = kMaxUserTag + 1 + group.id();
  check_tag(tag, kMaxTag);
  const auto& members = group.members();
  const ConstMessageBuffer mine{values.data, values.bytes, values.memory};
  if (group.position() != 0) {
    do_send(members[0], tag, mine, stream);
    do_recv(members[0], tag, values, stream);
    return;
  }
  std::vector<std::byte> other(values.bytes);
  const size_t n = values.bytes / scalar_bytes(type);
  for (size_t g = 1; g < members.size(); ++g) {
    do_recv(members[g], tag, {other.data(), other.size(), MemoryKind::host}, stream);
    if (type == ScalarType::f32)
      add_into<float>(values.data, other, n);
    else
      add_into<double>(values.data, other, n);
  }
  for (size_t g = 1; g < members.size(); ++g) do_send(members[g], tag, mine, stream);
}

void run_on_threads(std::span<const std::unique_ptr<Comm>> comms, const std::function<void(Comm&)>& body) {
  std::mutex mutex;
  std::exception_ptr failure;
  auto one = [&](size_t r) {
    try {
      body(*comms[r]);
    } catch (...) {
      {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();  // the first failure is the cause
      }
      comms[r]->abort(fmt::format("rank {} failed", r));
    }
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < comms.size(); ++r) threads.emplace_back(one, r);
  if (!comms.empty()) one(0);
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace pd2bw::executor
