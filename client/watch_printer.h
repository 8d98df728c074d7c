// How the CLI shows a job's events (trainyard watch, submit --watch, local): state changes,
// evaluations, checkpoints and diagnoses on their own lines, and a progress bar (step of
// total, loss, throughput, ETA) rewritten in place on a terminal, else printed every 5 s.
// With json, every event is one JSON object per line on stdout instead. With steps, every step
// is also a line on stdout (metrics.jsonl's numbers, as text), not only the bar.
#pragma once

#include <chrono>
#include <string>

#include "client/format.h"
#include "client/service_client.h"

namespace trainyard::client {

class WatchPrinter {
 public:
  WatchPrinter(bool json, bool quiet, bool steps = false);
  void Print(const v1::JobEvent& e);
  void Close();  // ends an in-place line
  v1::JobState state() const { return state_; }

 private:
  void Line(const std::string& text);
  void Bar(const v1::StepMetrics& m);

  void StepLine(const v1::StepMetrics& m);

  bool json_, quiet_, tty_, steps_;
  bool open_ = false;
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
  std::chrono::steady_clock::time_point last_bar_{};
};

// A message as JSON with the .proto's field names, every field written out.
std::string ToJsonText(const google::protobuf::Message& m);

// The exit code for a final state: 0 SUCCEEDED, 1 FAILED, 3 CANCELLED.
int ExitCodeOf(v1::JobState state);

}  // namespace trainyard::client
