// One rank of the training job and its reports to rank 0 over Comm.
#include "train_rank.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>

#include "checkpoint_store.hpp"
#include "fault.hpp"
#include "metrics_log.hpp"
#include "pd2bw/error.hpp"
#include "train_progress.hpp"

namespace pd2bw::executor {

namespace {

// The job's report tags, above the pipeline's (stage_state.hpp, below 3072) and within kMaxUserTag.
// Each kind goes from one rank to another in a fixed order, so FIFO per (source, tag) pairs them up.
constexpr int64_t kLossTag = 8192;     // last stage -> 0: a step's losses of one replica
constexpr int64_t kMetricsTag = 8193;  // every rank -> 0 after a segment: RankMetrics
constexpr int64_t kEndsTag = 8194;     // every rank -> 0 after a segment: update end times of its steps
constexpr int64_t kShardTag = 8195;    // stage's replica 0 -> 0: its shard is durable, with its sha256
constexpr int64_t kStatusTag = 8196;   // 0 -> every rank: go on (1) or stop (0); on resume, the step too
constexpr int64_t kLoadedTag = 8197;   // every rank -> 0: its shard is loaded

// A shard writer's report: durable (with its sha256), refused (its state is not finite) or failed.
enum ShardStatus : int64_t { kShardDurable = 0, kShardNotFinite = 1, kShardFailed = 2 };
struct ShardReport {
  int64_t stage = 0;
  int64_t status = kShardDurable;
  std::array<char, 64> sha256{};
  std::array<char, 448> why{};  // what went wrong, NUL-terminated (cut to fit)
};

struct Status {
  int64_t go = 0;
  int64_t step = 0;
  int64_t legacy = 0;  // on resume: the checkpoint is in the flat layout of earlier releases
};

template <size_t N>
void put_text(std::array<char, N>& out, std::string_view text) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(out.data(), text.data(), n);
  out[n] = '\0';
}

template <typename V>
std::span<const V> one(const V& v) { return std::span<const V>(&v, 1); }
template <typename V>
std::span<V> one_mut(V& v) { return std::span<V>(&v, 1); }

void broadcast_status(Comm& comm, Status s) {
  for (int64_t r = 1; r < comm.size(); ++r) comm.send(r, kStatusTag, one(s));
}

// Rank 0's view of the losses: those of its own last chunk go straight into the progress; the other last-stage
// ranks send each step's losses, which rank 0 collects after its own update of that step (when they
// have all been sent: see LossSink::on_update). Other ranks only send.
class RankLosses final : public LossSink {
 public:
  RankLosses(Comm& comm, const PipelineConfig& c, TrainProgress* progress) : comm_(comm), c_(c), progress_(progress) {
    const auto last = static_cast<size_t>(c.position_of(c.chunks_total() - 1));  // zb-v: position 0
    for (int64_t r = 0; r < c.width; ++r) last_ranks_.push_back(c.ranks[last][static_cast<size_t>(r)]);
  }
  void on_loss(int64_t step, int64_t replica, int64_t microbatch, double loss) override {
    if (progress_) {
      progress_->on_loss(step, replica, microbatch, loss);
      return;
    }
    auto& record = pending_[step];
    if (record.empty()) record.assign(static_cast<size_t>(c_.microbatches + 1), 0.0);
    record[0] = static_cast<double>(step);
    record[static_cast<size_t>(microbatch + 1)] = loss;
    if (++counts_[step] < c_.microbatches) return;
    comm_.send(0, kLossTag, std::span<const double>(record));
    pending_.erase(step);
    counts_.erase(step);
  }
  void on_update(int64_t step) override {
    if (!progress_) return;
    std::vector<double> record(static_cast<size_t>(c_.microbatches + 1));
    for (int64_t replica = 0; replica < c_.width; ++replica) {
      const int64_t from = last_ranks_[static_cast<size_t>(replica)];
      if (from == comm_.rank()) continue;
      comm_.recv(from, kLossTag, std::span<double>(record));
      if (record[0] != static_cast<double>(step))
        throw Error(fmt::format("rank 0 expected the losses of step {} from rank {}, got step {}", step, from, record[0]));
      for (int64_t k = 0; k < c_.microbatches; ++k) progress_->on_loss(step, replica, k, record[static_cast<size_t>(k + 1)]);
    }
    progress_->on_update(step);
  }
  void on_skip(int64_t step, const std::string& why) override {
    if (progress_) progress_->on_skip(step, why);
  }

 private:
  Comm& comm_;
  const PipelineConfig& c_;
  TrainProgress* progress_;
  std::vector<int64_t> last_ranks_;
  std::map<int64_t, std::vector<double>> pending_;
  std::map<int64_t, int64_t> counts_;
};

// What rank 0 gathers: per stage the metrics of its replica 0, per step the last update end over ranks.
struct Gathered {
  std::vector<RankMetrics> stages;
  std::vector<double> step_end;  // by step (ms, steady clock)
};

template <typename T>
void report_metrics(Comm& comm, StageWorker<T>& w, const PipelineConfig& c, int64_t first, int64_t n, Gathered* g) {
  const RankMetrics mine{w.stage(), w.replica(), w.peak_bytes(), w.versions_allocated(), w.compute_ms_per_microbatch()};
  const auto& all_ends = w.update_end_ms();
  const std::vector<double> ends(all_ends.begin() + first, all_ends.begin() + first + n);
  if (!g) {
    comm.send(0, kMetricsTag, one(mine));
    comm.send(0, kEndsTag, std::span<const double>(ends));
    return;
  }
  g->stages.resize(static_cast<size_t>(c.depth));
  if (g->step_end.size() < static_cast<size_t>(first + n)) g->step_end.resize(static_cast<size_t>(first + n), 0.0);
  for (int64_t r = 0; r < comm.size(); ++r) {
    RankMetrics m = mine;
    std::vector<double> e = ends;
    if (r != comm.rank()) {
      comm.recv(r, kMetricsTag, one_mut(m));
      comm.recv(r, kEndsTag, std::span<double>(e));
    }
    if (m.replica == 0) g->stages[static_cast<size_t>(m.stage)] = m;
    for (int64_t j = 0; j < n; ++j) {
      double& end = g->step_end[static_cast<size_t>(first + j)];
      end = std::max(end, e[static_cast<size_t>(j)]);
    }
  }
}

// A stage's replica-0 rank writes its shard into the step's directory unless its state is not finite;
// failures become the report, so rank 0 can name them and stop every rank in order.
template <typename T>
ShardReport write_shard(StageWorker<T>& w, const PipelineConfig& c, const std::string& at, int64_t rank, int64_t step) {
  ShardReport rep;
  rep.stage = w.stage();
  try {
    fault_point("shard-begin", rank, step);
    if (const std::string bad = nonfinite_state(w, c, step); !bad.empty()) {
      rep.status = kShardNotFinite;
      put_text(rep.why, bad);
      return rep;
    }
    const CheckpointStage st = save_stage_shard(w, c, at, step);
    std::memcpy(rep.sha256.data(), st.sha256.data(), rep.sha256.size());
    fault_point("shard", rank, step);
  } catch (const std::exception& e) {
    rep.status = kShardFailed;
    put_text(rep.why, e.what());
  }
  return rep;
}

// Rank 0: the shards' reports in stage order, or throws Error naming the first stage that did not write.
std::vector<CheckpointStage> collect_shards(Comm& comm, const PipelineConfig& c, const std::optional<ShardReport>& mine,
                                            int64_t step) {
  std::vector<CheckpointStage> stages;
  std::string problem, hint;
  for (int64_t i = 0; i < c.depth; ++i) {
    const int64_t owner = c.ranks[static_cast<size_t>(i)][0];
    ShardReport rep = owner == 0 ? *mine : ShardReport{};
    if (owner != 0) comm.recv(owner, kShardTag, one_mut(rep));
    if (rep.stage != i) throw Error(fmt::format("rank {} reported the shard of stage {}, not {}", owner, rep.stage, i));
    if (rep.status != kShardDurable && problem.empty()) {
      problem = rep.status == kShardNotFinite ? fmt::format("stage {}'s {} not finite", i, rep.why.data())
                                               : fmt::format("stage {} (rank {}): {}", i, owner, rep.why.data());
      hint = rep.status == kShardNotFinite ? "lower --lr and --resume from the last checkpoint"
                                           : "fix the cause (free space, permissions), then --resume";
    }
    stages.push_back({i, stage_file_name(i), std::string(rep.sha256.data(), rep.sha256.size())});
  }
  if (!problem.empty())
    throw Error(fmt::format("the checkpoint of step {} was not written: {}; the earlier checkpoints are intact", step,
                            problem),
                hint);
  return stages;
}

// Every stage's replica-0 rank writes its shard; rank 0 commits the checkpoint once all are durable and
// then tells every rank to go on or stop. Returns false on a rank told to stop (rank 0 throws JobStopped
// instead).
template <typename T>
bool save_checkpoint(Comm& comm, StageWorker<T>& w, const TrainSetup& s, int64_t step, CheckpointStore* store,
                     MetricsLog* log) {
  const std::string at = step_directory(s.options.checkpoint_dir, step);
  std::optional<ShardReport> mine;
  if (w.replica() == 0) mine = write_shard(w, s.config, at, comm.rank(), step);
  if (comm.rank() != 0) {
    if (mine) comm.send(0, kShardTag, one(*mine));
    Status st;
    comm.recv(0, kStatusTag, one_mut(st));
    return st.go != 0;
  }
  // On any failure every rank is told to stop, and what the save wrote is removed.
  const auto stop_all = [&] {
    store->abandon(step);
    broadcast_status(comm, {0, step, 0});
  };
  std::vector<CheckpointStage> stages;
  try {
    stages = collect_shards(comm, s.config, mine, step);
  } catch (const Error& e) {
    stop_all();
    throw JobStopped(e);
  }
  try {
    if (log) log->sync();
    store->commit(step, std::move(stages));
  } catch (const Error& e) {
    stop_all();
    throw JobStopped(Error(fmt::format("the checkpoint of step {} was not written: {}; the earlier checkpoints are "
                                       "intact",
                                       step, e.what()),
                           e.hint()));
  } catch (const std::exception& e) {
    stop_all();
    throw JobStopped(Error(fmt::format("the checkpoint of step {} was not written: internal error: {}", step, e.what())));
  }
  broadcast_status(comm, {1, step, 0});
  if (s.progress) fmt::print(s.progress, "checkpoint: step {} written to {}\n", step, at);
  return true;
}

// Rank 0 alone owns the checkpoint directory (its lock) and the metrics log: it opens both before any
// rank allocates its stage (the store checks the directory and finds the step to resume), then tells
// every rank to go on, with that step, or to stop (and throws JobStopped with the reason).
Status start_job(Comm& comm, const TrainSetup& s, std::unique_ptr<CheckpointStore>& store,
                 std::unique_ptr<MetricsLog>& log) {
  const TrainOptions& o = s.options;
  Status st{1, 0, 0};
  if (comm.rank() != 0) {
    comm.recv(0, kStatusTag, one_mut(st));
    return st;
  }
  try {
    if (!o.checkpoint_dir.empty())
      store = std::make_unique<CheckpointStore>(o.checkpoint_dir, s.id, o.resume, o.keep, s.checkpoint_bytes);
    if (o.resume) {
      const ResumePoint& p = store->resume_point();
      if (p.step == o.steps) {  // a finished run: resuming it again (a job script's retry) has nothing to do
        if (s.progress && !o.quiet)
          fmt::print(s.progress, "the run is complete: the newest checkpoint in {} is at step {} = --steps\n",
                     o.checkpoint_dir, p.step);
        broadcast_status(comm, {0, 0, 0});
        return {0, p.step, 0};
      }
      if (p.step > o.steps)
        throw UsageError(fmt::format("the checkpoint is at step {}, past --steps {}", p.step, o.steps),
                         "raise --steps to train further");
      st = {1, p.step, p.legacy ? 1 : 0};
    }
    if (!o.log_path.empty()) log = std::make_unique<MetricsLog>(o.log_path, o.resume, st.step);
  } catch (const Error& e) {
    broadcast_status(comm, {0, 0, 0});
    throw JobStopped(e);
  } catch (const std::exception& e) {
    broadcast_status(comm, {0, 0, 0});
    throw JobStopped(Error(fmt::format("internal error: {}", e.what())));
  }
  broadcast_status(comm, st);
  if (o.resume && s.progress) fmt::print(s.progress, "{}\n", store->resume_point().note);
  return st;
}

// Every rank loads its own shard of the checkpoint rank 0 chose and tells rank 0, which starts nothing
// before all are loaded. Returns the steps done.
template <typename T>
int64_t load_checkpoint(Comm& comm, StageWorker<T>& w, const TrainSetup& s, const Status& st) {
  const std::string& dir = s.options.checkpoint_dir;
  load_stage_shard(w, s.config, st.legacy ? dir : step_directory(dir, st.step));
  fault_point("resume", comm.rank(), st.step);
  const int64_t loaded = 1;
  if (comm.rank() != 0)
    comm.send(0, kLoadedTag, one(loaded));
  else
    for (int64_t r = 1; r < comm.size(); ++r) {
      int64_t x = 0;
      comm.recv(r, kLoadedTag, one_mut(x));
    }
  return st.step;
}

void fill_result(const Gathered& g, TrainResult& result) {
  for (const RankMetrics& m : g.stages) {
    result.peak_bytes.push_back(m.peak_bytes);
    result.versions.push_back(m.versions);
    result.compute_ms.push_back(m.compute_ms);
  }
  const auto& ends = g.step_end;
  for (auto j = static_cast<size_t>(result.first_step) + 1; j < ends.size(); ++j) result.step_ms.push_back(ends[j] - ends[j - 1]);
  if (result.step_ms.empty()) return;
  std::vector<double> sorted = result.step_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  result.step_ms_median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

}  // namespace

template <typename T>
std::optional<TrainResult> train_rank(Comm& comm, const TrainSetup& s) {
  const auto& c = s.config;
  const TrainOptions& o = s.options;
  const bool root = comm.rank() == 0;
  std::unique_ptr<CheckpointStore> store;
  std::unique_ptr<MetricsLog> log;
  watch_job_peers(comm, c, o);
  const Status start = start_job(comm, s, store, log);
  if (!start.go) {  // rank 0 returns here only for a finished run (start_job throws on everything else)
    if (!root) return std::nullopt;
    TrainResult complete;
    complete.first_step = start.step;
    return complete;
  }
  StageWorker<T> worker(c, comm.rank(), comm);
  int64_t done = o.resume ? load_checkpoint(comm, worker, s, start) : 0;
  if (o.resume) comm.set_stop_note(stop_note(o, done));
  std::unique_ptr<TrainProgress> progress;
  if (root) {
    progress = std::make_unique<TrainProgress>(c.microbatches * c.width, s.tokens_per_step, done, o.steps, c.optimizer.lr,
                                               o.quiet ? nullptr : s.progress, log.get());
    progress->set_mfu(s.flops_per_token, s.peak_flops);
    progress->set_divergence_guard(o.divergence_guard);
    progress->set_counted(s.counted_per_step);
  }
  RankLosses losses(comm, c, progress.get());
  Gathered gathered;
  TrainResult result;
  result.first_step = done;
  const int64_t stop = o.stop_after > 0 ? std::min(o.steps, done + o.stop_after) : o.steps;
  while (done < stop) {
    const int64_t n = o.checkpoint_every > 0 ? std::min(o.checkpoint_every, stop - done) : stop - done;
    worker.run(comm, *s.source, done, n, &losses);
    report_metrics(comm, worker, c, done, n, root ? &gathered : nullptr);
    done += n;
    if (!o.checkpoint_dir.empty() && !save_checkpoint(comm, worker, s, done, store.get(), log.get()))
      return std::nullopt;
    if (!o.checkpoint_dir.empty()) comm.set_stop_note(stop_note(o, done));
  }
  if (!root) return std::nullopt;
  result.losses = progress->losses();
  result.skipped_steps = progress->skipped_steps();
  fill_result(gathered, result);
  result.seconds = progress->seconds();
  result.tokens_per_s = static_cast<double>(s.tokens_per_step) * static_cast<double>(result.losses.size()) / result.seconds;
  return result;
}

template std::optional<TrainResult> train_rank<float>(Comm&, const TrainSetup&);
template std::optional<TrainResult> train_rank<double>(Comm&, const TrainSetup&);

}  // namespace pd2bw::executor
