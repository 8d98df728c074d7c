#include "server/collective_report.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace trainyard::server {
namespace {

using trainyard::v1::CollectiveRecord;
using trainyard::v1::CollectiveReport;
using trainyard::v1::CollectiveRow;

bool Silent(const RankView& r, int64_t silent_after_ms) {
  return !r.reported || r.status.report_age_ms() >= silent_after_ms;
}

// The rank's record of collective `seq` in its last report; null when it sent none.
const CollectiveRecord* RecordOf(const trainyard::v1::RankStatus& s, int64_t seq) {
  for (const CollectiveRecord& c : s.collectives()) {
    if (c.seq() == seq) return &c;
  }
  return nullptr;
}

// The last collective the rank completed successfully, as far as its report says: a failed one
// (a timeout) counts as not completed, so its rank shows with those still waiting in it.
int64_t DoneOf(const trainyard::v1::RankStatus& s) {
  int64_t done = s.collectives_done();
  for (const CollectiveRecord& c : s.collectives()) {
    if (c.state() == "failed") done = std::min(done, c.seq() - 1);
  }
  return done;
}

// The lowest collective a reporting rank has issued and not completed; 0 when there is none.
int64_t StuckSeq(const std::vector<RankView>& ranks, int64_t silent_after_ms) {
  int64_t seq = 0;
  for (const RankView& r : ranks) {
    const trainyard::v1::RankStatus& s = r.status;
    if (s.exited() || Silent(r, silent_after_ms)) continue;
    if (s.collectives_issued() <= DoneOf(s)) continue;
    const int64_t first = DoneOf(s) + 1;
    if (seq == 0 || first < seq) seq = first;
  }
  return seq;
}

// The row's state, seq, phase and seconds against collective `seq` (Note [Collective flight
// recorder]).
void Classify(const RankView& r, int64_t seq, int64_t silent_after_ms, CollectiveRow* row) {
  const trainyard::v1::RankStatus& s = r.status;
  const int64_t done = DoneOf(s);
  row->set_seq(s.collectives_issued() > done ? done + 1 : s.collectives_issued());
  if (s.exited()) {
    row->set_state("exited");
  } else if (Silent(r, silent_after_ms)) {
    row->set_state("silent");
    row->set_seconds(r.reported ? s.report_age_ms() / 1000.0 : 0);
  } else if (done >= seq) {
    row->set_state("ahead");
    row->set_seconds((s.collectives_issued() > done ? s.collective_age_ms() : s.phase_age_ms()) /
                     1000.0);
  } else if (s.collectives_issued() >= seq) {
    row->set_state("waiting");
    row->set_seq(seq);
    const CollectiveRecord* c = RecordOf(s, seq);
    if (c != nullptr && !c->phase().empty()) row->set_phase(c->phase());
    // Its record dates the wait from the issue; else the last completed collective does.
    const int64_t waited_ms = c != nullptr && c->issued_age_ms() >= 0
                                  ? c->issued_age_ms() + s.report_age_ms()
                                  : s.collective_age_ms();
    row->set_seconds(waited_ms / 1000.0);
  } else {
    row->set_state("missing");
    row->set_seconds(s.phase_age_ms() / 1000.0);
  }
}

CollectiveRow RowOf(const RankView& r, int64_t seq, int64_t silent_after_ms) {
  const trainyard::v1::RankStatus& s = r.status;
  CollectiveRow row;
  row.set_rank(r.placement.rank());
  row.set_worker(r.placement.worker());
  row.set_host(r.placement.host());
  row.set_step(s.step());
  row.set_issued(s.collectives_issued());
  row.set_done(s.collectives_done());
  row.set_phase(r.reported ? s.phase() : "starting");
  Classify(r, seq, silent_after_ms, &row);
  if (const CollectiveRecord* c = RecordOf(s, row.seq())) {
    row.set_op(c->op());
    row.set_numel(c->numel());
    row.set_dtype(c->dtype());
  }
  return row;
}

// "rank 2" or "ranks 0, 1".
std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// "rank 2 on w3 (10.0.0.3) is missing from all_reduce #57 (262144 float32): it is in phase
// forward at step 12 for 4.1 s, its last collective issued #56".
std::string Culprit(const RankView& r, const CollectiveRow& row, const std::string& what) {
  std::string out = RankName(r.placement) + " is missing from " + what + ": ";
  const std::string at = " at step " + std::to_string(row.step());
  if (row.state() == "silent") {
    out += "no report for " + FormatSeconds(row.seconds()) + " (stopped or dead?), last in phase " +
           row.phase() + at;
  } else {
    out += "it is in phase " + row.phase() + at + " for " + FormatSeconds(row.seconds());
  }
  if (row.issued() > 0) {
    out += ", its last collective issued " +
           CollectiveName(row.issued(), row.seq() == row.issued() ? row.op() : "", row.numel(),
                          row.dtype());
  }
  return out;
}

// "; the ranks disagree on #57: rank 0 all_reduce 10 float32, rank 1 broadcast 4 int64 (...)",
// or "" when the waiting ranks' records of the collective agree (or are unknown).
std::string Disagreement(const CollectiveReport& report) {
  std::map<std::tuple<std::string, int64_t, std::string>, int> seen;
  std::string listed;
  for (const CollectiveRow& row : report.rows()) {
    if (row.state() != "waiting" || row.op().empty()) continue;
    seen.emplace(std::make_tuple(row.op(), row.numel(), row.dtype()), row.rank());
    listed += (listed.empty() ? "" : ", ") + std::string("rank ") + std::to_string(row.rank()) +
              " " + row.op() + " " + std::to_string(row.numel()) + " " + row.dtype();
  }
  if (seen.size() < 2) return "";
  return "; the ranks disagree on #" + std::to_string(report.seq()) + ": " + listed +
         " (do all ranks issue the same collectives in the same order?)";
}

// "; rank 2 completed it and waits in all_reduce #58 (2 float64) for 2.6 s" for each rank that
// got through the collective (its peers' data arrived before the culprit stopped) and is inside
// a later one.
std::string AheadAndWaiting(const CollectiveReport& report) {
  std::string out;
  for (const CollectiveRow& row : report.rows()) {
    if (row.state() != "ahead" || row.issued() <= row.done()) continue;
    out += "; rank " + std::to_string(row.rank()) + " completed it and waits in " +
           CollectiveName(row.seq(), row.op(), row.numel(), row.dtype()) + " for " +
           FormatSeconds(row.seconds());
  }
  return out;
}

std::string Verdict(const std::vector<RankView>& ranks, const CollectiveReport& report) {
  const std::string what =
      CollectiveName(report.seq(), report.op(), report.numel(), report.dtype());
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const CollectiveRow& row = report.rows(static_cast<int>(i));
    if (row.state() != "missing" && row.state() != "silent") continue;
    out += (out.empty() ? "" : "; ") + Culprit(ranks[i], row, what);
  }
  if (out.empty()) {
    out = "every running rank issued " + what +
          ", so none is missing from it: a network fault, or a rank stuck inside it";
  }
  const std::vector<int> waiting(report.waiting().begin(), report.waiting().end());
  if (!waiting.empty()) {
    out += "; " + RankList(waiting) + (waiting.size() == 1 ? " waits" : " wait") + " in it for " +
           FormatSeconds(LongestWait(report));
  }
  return out + AheadAndWaiting(report) + Disagreement(report);
}

}  // namespace

std::string CollectiveName(int64_t seq, const std::string& op, int64_t numel,
                           const std::string& dtype) {
  std::string out = (op.empty() ? "collective" : op) + " #" + std::to_string(seq);
  if (!op.empty() && numel > 0) out += " (" + std::to_string(numel) + " " + dtype + ")";
  return out;
}

double LongestWait(const CollectiveReport& report) {
  double longest = 0;
  for (const CollectiveRow& row : report.rows()) {
    if (row.state() == "waiting") longest = std::max(longest, row.seconds());
  }
  return longest;
}

std::optional<CollectiveReport> BuildCollectiveReport(const std::vector<RankView>& ranks,
                                                      int64_t silent_after_ms) {
  const int64_t seq = StuckSeq(ranks, silent_after_ms);
  if (seq == 0) return std::nullopt;
  CollectiveReport report;
  report.set_seq(seq);
  for (const RankView& r : ranks) {
    CollectiveRow row = RowOf(r, seq, silent_after_ms);
    if (row.state() == "waiting") {
      report.add_waiting(row.rank());
      if (report.op().empty() && !row.op().empty()) {
        report.set_op(row.op());
        report.set_numel(row.numel());
        report.set_dtype(row.dtype());
      }
    } else if (row.state() == "missing" || row.state() == "silent") {
      report.add_missing(row.rank());
    }
    *report.add_rows() = std::move(row);
  }
  report.set_verdict(Verdict(ranks, report));
  return report;
}

}  // namespace trainyard::server
