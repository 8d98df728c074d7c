#include "worker/daemon/flight_report.h"

namespace trainyard::daemon {
namespace {

// Milliseconds from `at` to `now`; -1 for a time that has not come (a default TimePoint).
int64_t AgeMs(dist::CollectiveRecord::TimePoint at, dist::CollectiveRecord::TimePoint now) {
  if (at == dist::CollectiveRecord::TimePoint{}) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - at).count();
}

}  // namespace

Json FlightRecordsJson(const std::vector<dist::CollectiveRecord>& records,
                       dist::CollectiveRecord::TimePoint now) {
  Json::Items out;
  for (const dist::CollectiveRecord& r : records) {
    out.push_back(Json::Object({{"seq", r.seq},
                                {"op", r.op},
                                {"numel", r.size.numel},
                                {"dtype", r.size.dtype},
                                {"bytes", r.size.bytes},
                                {"state", dist::CollectiveStateName(r.state)},
                                {"phase", r.phase},
                                {"issued_ms", AgeMs(r.issued, now)},
                                {"started_ms", AgeMs(r.started, now)},
                                {"ended_ms", AgeMs(r.ended, now)}}));
  }
  return Json::Array(std::move(out));
}

void AddFlightRecords(const dist::ProcessGroup* group, dist::CollectiveRecord::TimePoint now,
                      Json* line) {
  if (group == nullptr) return;
  const std::vector<dist::CollectiveRecord> records =
      group->flight_recorder().Last(kReportedCollectives);
  if (dist::NeedsReport(records, now, kStuckAfter)) {
    line->Set("collectives", FlightRecordsJson(records, now));
  }
}

void RecordPhases(dist::ProcessGroup& group, const trainer::Progress& progress) {
  group.flight_recorder().SetPhaseSource([&progress] {
    return trainer::PhaseName(static_cast<trainer::Phase>(progress.phase.load()));
  });
}

void ParseFlightRecords(const Json& line, trainyard::v1::RankStatus* status) {
  status->clear_collectives();
  const Json* records = line.Find("collectives");
  if (records == nullptr || !records->is_array()) return;
  for (const Json& r : records->items()) {
    const Json* seq = r.is_object() ? r.Find("seq") : nullptr;
    if (seq == nullptr || !seq->is_integer()) continue;
    auto num = [&](const char* key, int64_t otherwise) {
      const Json* v = r.Find(key);
      return v && v->is_integer() ? v->int_value() : otherwise;
    };
    auto text = [&](const char* key) {
      const Json* v = r.Find(key);
      return v && v->is_string() ? v->string_value() : std::string();
    };
    trainyard::v1::CollectiveRecord* out = status->add_collectives();
    out->set_seq(seq->int_value());
    out->set_op(text("op"));
    out->set_numel(num("numel", 0));
    out->set_dtype(text("dtype"));
    out->set_bytes(num("bytes", 0));
    out->set_state(text("state"));
    out->set_phase(text("phase"));
    out->set_issued_age_ms(num("issued_ms", -1));
    out->set_started_age_ms(num("started_ms", -1));
    out->set_ended_age_ms(num("ended_ms", -1));
  }
}

}  // namespace trainyard::daemon
