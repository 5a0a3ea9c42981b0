// The JSONL metrics log of `pd2bw train --log` (private to the trainer; rank 0 writes it): one record
// per step, every write checked, valid JSON only (a non-finite number is written as null), and a resumed
// run continues the file without repeating a step.
#pragma once

#include <cstdint>
#include <string>

namespace pd2bw::executor {

// A JSON number: `value` with `digits` after the point ("fixed") or 17 significant digits ("general"),
// or null when it is not finite.
std::string json_number(double value, int digits = -1);

class MetricsLog {
 public:
  // Opens `path` before the first step. A fresh run (resume false) starts the file empty. A resumed run
  // keeps the records of steps 1 .. resume_step and drops later ones (written by a run that went on
  // past its last checkpoint) and a torn last line, so every step appears once. A device or pipe is
  // written as it is. Throws UsageError naming the path when it cannot be opened, or when a resumed
  // regular file holds a line that is not a record of this log (it is then left untouched).
  MetricsLog(const std::string& path, bool resume, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends `line` (without its newline). Throws Error naming the path when the write fails.
  void append(const std::string& line);
  // Makes what was appended durable (a regular file only), so a checkpoint never outlives its records.
  // Throws Error on failure.
  void sync();

 private:
  std::string path_;
  int fd_ = -1;
  bool regular_ = false;
};

}  // namespace pd2bw::executor
