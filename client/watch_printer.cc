#include "client/watch_printer.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace trainyard::client {

std::string ToJsonText(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

int ExitCodeOf(v1::JobState state) {
  switch (state) {
    case v1::SUCCEEDED:
      return 0;
    case v1::CANCELLED:
      return 3;
    default:
      return 1;
  }
}

WatchPrinter::WatchPrinter(bool json, bool quiet, bool steps)
    : json_(json), quiet_(quiet), tty_(::isatty(STDERR_FILENO)), steps_(steps) {}

void WatchPrinter::StepLine(const v1::StepMetrics& m) {
  Close();
  std::printf(
      "step %lld/%lld  loss %.6g  lr %.6g  grad_norm %.6g  %.1f samples/s  data %.4f  "
      "forward %.4f  backward %.4f  allreduce_wait %.4f  optimizer %.4f\n",
      static_cast<long long>(m.step()), static_cast<long long>(m.total_steps()), m.loss(), m.lr(),
      m.grad_norm(), m.samples_per_second(), m.data_seconds(), m.forward_seconds(),
      m.backward_seconds(), m.allreduce_wait_seconds(), m.optimizer_seconds());
  std::fflush(stdout);
}

void WatchPrinter::Line(const std::string& text) {
  if (quiet_) return;
  Close();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

void WatchPrinter::Close() {
  if (open_) std::fputs("\n", stderr);
  open_ = false;
}

void WatchPrinter::Bar(const v1::StepMetrics& m) {
  const auto now = std::chrono::steady_clock::now();
  const bool last = m.step() == m.total_steps();
  if (quiet_ || (!last && now - last_bar_ < (tty_ ? std::chrono::milliseconds(100)
                                                  : std::chrono::milliseconds(5000)))) {
    return;
  }
  last_bar_ = now;
  const double frac = m.total_steps() > 0 ? static_cast<double>(m.step()) / m.total_steps() : 0;
  const int filled = static_cast<int>(frac * 20);
  std::string bar = "[" + std::string(filled, '#') + std::string(20 - filled, '.') + "]";
  char buf[256];
  const bool tokens = m.tokens_per_second() > m.samples_per_second() * 1.5;
  std::snprintf(buf, sizeof(buf), "%s step %lld/%lld (%.1f%%)  loss %.4f  %.0f %s/s  ETA %s",
                bar.c_str(), static_cast<long long>(m.step()),
                static_cast<long long>(m.total_steps()), 100 * frac, m.loss(),
                tokens ? m.tokens_per_second() : m.samples_per_second(),
                tokens ? "tokens" : "samples", FormatDuration(m.eta_seconds()).c_str());
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", buf);
    open_ = true;
  } else {
    std::fprintf(stderr, "%s\n", buf);
  }
  std::fflush(stderr);
}

void WatchPrinter::Print(const v1::JobEvent& e) {
  if (e.has_state()) state_ = e.state().to();
  if (json_) {
    std::printf("%s\n", ToJsonText(e).c_str());
    std::fflush(stdout);
    return;
  }
  if (e.has_state()) {
    const auto& s = e.state();
    std::string text = StateName(s.to());
    if (s.from() != v1::JOB_STATE_UNSPECIFIED) text = StateName(s.from()) + " -> " + text;
    if (s.attempt() > 0) text += " (attempt " + std::to_string(s.attempt()) + ")";
    if (!s.reason().empty()) text += ": " + s.reason();
    Line(text);
  } else if (e.has_step()) {
    if (steps_) StepLine(e.step());
    Bar(e.step());
  } else if (e.has_eval()) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "eval at step %lld: loss %.4f, accuracy %.2f%% on %lld samples",
                  static_cast<long long>(e.eval().step()), e.eval().loss(),
                  100 * e.eval().accuracy(), static_cast<long long>(e.eval().samples()));
    Line(buf);
  } else if (e.has_diagnosis()) {
    Line((e.diagnosis().kind() == v1::Diagnosis::HANG ? "HANG: " : "") + e.diagnosis().message());
  } else if (e.has_collectives()) {
    Line("COLLECTIVES: " + e.collectives().verdict());
  } else if (!e.checkpoint().empty()) {
    Line("checkpoint " + e.checkpoint());
  }
}

}  // namespace trainyard::client
