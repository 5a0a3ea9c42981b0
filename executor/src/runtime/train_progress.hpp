// Collects the last stage's per-microbatch losses into step losses, in a fixed order, and prints a
// progress line and a JSONL record when a step's losses are all in. Private to the trainer.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/optimizer.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

class TrainProgress final : public LossSink {
 public:
  TrainProgress(int64_t per_step, int64_t tokens_per_step, int64_t first_step, int64_t total_steps,
                const LrSchedule& lr, std::FILE* out, std::FILE* log)
      : per_step_(per_step), tokens_(tokens_per_step), first_(first_step), total_(total_steps), lr_(lr), out_(out),
        log_(log), start_(std::chrono::steady_clock::now()) {}

  void on_loss(int64_t step, int64_t replica, int64_t microbatch, double loss) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto& parts = pending_[step];
    parts[{replica, microbatch}] = loss;
    if (static_cast<int64_t>(parts.size()) < per_step_) return;
    double sum = 0;
    for (const auto& [key, l] : parts) sum += l;  // (replica, microbatch) order
    pending_.erase(step);
    finish_step(step, sum / static_cast<double>(per_step_));
  }

  // Adds "MFU x%" to each line: model FLOPs per token (6 x parameters + 12 x layers x width x sequence)
  // times tokens per second over the device's peak FLOP/s. Off (the cpu's line) while peak_flops is 0.
  void set_mfu(double flops_per_token, double peak_flops) {
    flops_per_token_ = flops_per_token;
    peak_flops_ = peak_flops;
  }

  const std::vector<double>& losses() const { return losses_; }
  bool diverged() const { return diverged_; }  // a step's mean loss was not finite
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  void finish_step(int64_t step, double loss) {
    losses_.push_back(loss);
    const double elapsed = seconds();
    const auto done = static_cast<double>(losses_.size());
    const double tps = static_cast<double>(tokens_) * done / elapsed;
    const double eta = elapsed / done * static_cast<double>(total_ - first_ - static_cast<int64_t>(losses_.size()));
    const double mfu = peak_flops_ > 0 ? flops_per_token_ * tps / peak_flops_ : 0.0;
    const std::string mfu_text = peak_flops_ > 0 ? fmt::format(" | MFU {:4.1f}%", 100.0 * mfu) : std::string();
    if (out_)
      fmt::print(out_, "step {:>5}/{} | loss {:.4f} | lr {:.2e} | {:>8.0f} tok/s{} | {:>7.1f} s elapsed | ETA {:.0f} s\n",
                 step + 1, total_, loss, lr_.at(step), tps, mfu_text, elapsed, eta);
    if (log_)
      fmt::print(log_, "{{\"step\": {}, \"loss\": {:.17g}, \"lr\": {:.17g}, \"tokens\": {}, \"tokens_per_s\": {:.1f}, "
                       "\"elapsed_s\": {:.3f}{}}}\n",
                 step + 1, loss, lr_.at(step), tokens_ * (step + 1), tps, elapsed,
                 peak_flops_ > 0 ? fmt::format(", \"mfu\": {:.4f}", mfu) : std::string());
    if (log_) std::fflush(log_);
    if (!std::isfinite(loss)) diverged_ = true;
  }

 private:
  std::mutex mutex_;
  int64_t per_step_, tokens_, first_, total_;
  LrSchedule lr_;
  std::FILE* out_;
  std::FILE* log_;
  std::chrono::steady_clock::time_point start_;
  std::map<int64_t, std::map<std::pair<int64_t, int64_t>, double>> pending_;
  std::vector<double> losses_;
  bool diverged_ = false;
  double flops_per_token_ = 0, peak_flops_ = 0;
};

}  // namespace pd2bw::executor
