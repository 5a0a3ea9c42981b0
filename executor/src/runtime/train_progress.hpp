// Collects the last stage's per-microbatch losses into step losses, in a fixed order, and prints a
// progress line and a JSONL record once a step's losses are all in and rank 0 has applied (or skipped)
// its update. Private to the trainer.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fault.hpp"
#include "metrics_log.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/optimizer.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

class TrainProgress final : public LossSink {
 public:
  TrainProgress(int64_t per_step, int64_t tokens_per_step, int64_t first_step, int64_t total_steps,
                const LrSchedule& lr, std::FILE* out, MetricsLog* log)
      : per_step_(per_step), tokens_(tokens_per_step), first_(first_step), total_(total_steps), lr_(lr), out_(out),
        log_(log), start_(std::chrono::steady_clock::now()) {}

  void on_loss(int64_t step, int64_t replica, int64_t microbatch, double loss) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    pending_[step][{replica, microbatch}] = loss;
  }
  void on_skip(int64_t step, const std::string& why) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    skipped_[step] = why;
  }
  // After rank 0's update of `step` (every loss of the step is in by then).
  void on_update(int64_t step) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto& parts = pending_[step];
    if (static_cast<int64_t>(parts.size()) < per_step_)
      throw Error(fmt::format("rank 0 has {} of the {} losses of step {} at its update", parts.size(), per_step_, step + 1));
    double sum = 0;
    for (const auto& [key, l] : parts) sum += l;  // (replica, microbatch) order
    pending_.erase(step);
    finish_step(step, sum / static_cast<double>(per_step_));
  }

  // Stops training (throws Error) when a step's loss passes kDivergenceFactor x the first step's.
  void set_divergence_guard(bool on) { guard_ = on; }

  // Adds "MFU x%" to each line: model FLOPs per token (6 x parameters + 12 x layers x width x sequence)
  // times tokens per second over the device's peak FLOP/s. Off (the cpu's line) while peak_flops is 0.
  void set_mfu(double flops_per_token, double peak_flops) {
    flops_per_token_ = flops_per_token;
    peak_flops_ = peak_flops;
  }

  // Adds "masked N" to each line and "masked_tokens" to each record: the positions the step's loss
  // counted (bert's masked-LM); off while empty.
  void set_counted(std::function<int64_t(int64_t)> counted) { counted_ = std::move(counted); }

  const std::vector<double>& losses() const { return losses_; }
  // Steps skipped for a non-finite loss or gradient (1-based, as the progress lines count).
  const std::vector<int64_t>& skipped_steps() const { return skipped_list_; }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  void finish_step(int64_t step, double loss) {
    losses_.push_back(loss);
    const auto skip = skipped_.find(step);
    const bool skipped = skip != skipped_.end();
    if (guard_ && !skipped) check_divergence(step, loss);
    if (skipped) skipped_list_.push_back(step + 1);
    const double elapsed = seconds();
    const auto done = static_cast<double>(losses_.size());
    const double tps = static_cast<double>(tokens_) * done / elapsed;
    const double eta = elapsed / done * static_cast<double>(total_ - first_ - static_cast<int64_t>(losses_.size()));
    const double mfu = peak_flops_ > 0 ? flops_per_token_ * tps / peak_flops_ : 0.0;
    const std::string mfu_text = peak_flops_ > 0 ? fmt::format(" | MFU {:4.1f}%", 100.0 * mfu) : std::string();
    const int64_t counted = counted_ ? counted_(step) : -1;
    const std::string counted_text = counted >= 0 ? fmt::format(" (masked {})", counted) : std::string();
    if (out_)
      fmt::print(out_, "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | {:>8.0f} tok/s{} | {:>7.1f} s elapsed | ETA {:.0f} s{}\n",
                 step + 1, total_, std::isnan(loss) ? std::fabs(loss) : loss, counted_text, lr_.at(step), tps, mfu_text,
                 elapsed, eta,
                 skipped ? fmt::format(" | skipped, not finite: {}", skip->second) : std::string());
    if (log_)
      log_->append(fmt::format("{{\"step\": {}, \"loss\": {}, \"lr\": {}, \"tokens\": {}, \"tokens_per_s\": {}, "
                               "\"elapsed_s\": {}, \"skipped\": {}{}{}}}",
                               step + 1, json_number(loss), json_number(lr_.at(step)), tokens_ * (step + 1),
                               json_number(tps, 1), json_number(elapsed, 3), skipped ? "true" : "false",
                               peak_flops_ > 0 ? fmt::format(", \"mfu\": {}", json_number(mfu, 4)) : std::string(),
                               counted >= 0 ? fmt::format(", \"masked_tokens\": {}", counted) : std::string()));
    if (log_) fault_point("log", 0, step);
    if (skipped) skipped_.erase(skip);
  }

 private:
  // The first finite loss sets the bound; a later one past it (a finite divergence: non-finite losses
  // stop the step earlier, or are skipped by --skip-nonfinite) stops the run before its line is printed.
  void check_divergence(int64_t step, double loss) {
    if (!std::isfinite(loss)) return;
    if (!first_loss_) {
      first_loss_ = loss;
      return;
    }
    const double bound = kDivergenceFactor * std::max(*first_loss_, 1e-6);
    if (loss <= bound) return;
    throw Error(fmt::format("step {}: the loss {:.4g} is over {:g} x the first step's ({:.4g}): training diverged and "
                            "was stopped; no checkpoint holds this step",
                            step + 1, loss, kDivergenceFactor, *first_loss_),
                "lower --lr (or keep --clip on), then --resume from the last checkpoint; pass --no-divergence-guard "
                "to train on regardless");
  }

  bool guard_ = true;
  std::optional<double> first_loss_;
  std::mutex mutex_;
  int64_t per_step_, tokens_, first_, total_;
  LrSchedule lr_;
  std::FILE* out_;
  MetricsLog* log_;
  std::chrono::steady_clock::time_point start_;
  std::map<int64_t, std::map<std::pair<int64_t, int64_t>, double>> pending_;
  std::map<int64_t, std::string> skipped_;
  std::vector<double> losses_;
  std::vector<int64_t> skipped_list_;
  double flops_per_token_ = 0, peak_flops_ = 0;
  std::function<int64_t(int64_t)> counted_;
};

}  // namespace pd2bw::executor
