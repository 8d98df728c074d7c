// How a rank's flight recorder (worker/dist/flight_recorder.h) reaches the coordinator (Note
// [Collective flight recorder] in server/collective_report.h). The rank adds its last
// kReportedCollectives records to its status line as "collectives" while one of them has been
// unfinished for kStuckAfter or failed, and leaves them out otherwise, so healthy heartbeats
// stay small; the daemon copies them into RankStatus.collectives.
#pragma once

#include <chrono>
#include <vector>

#include "common/json.h"
#include "trainyard/v1/service.pb.h"
#include "worker/dist/flight_recorder.h"
#include "worker/dist/process_group.h"
#include "worker/trainer/trainer.h"

namespace trainyard::daemon {

inline constexpr size_t kReportedCollectives = 16;
inline constexpr std::chrono::milliseconds kStuckAfter{1000};

// The "collectives" array of a status line written at `now`: ages in milliseconds before it.
//   [{"seq":57,"op":"all_reduce","numel":262144,"dtype":"float32","bytes":1048576,
//     "state":"running","phase":"backward","issued_ms":4100,"started_ms":4090,"ended_ms":-1}]
Json FlightRecordsJson(const std::vector<dist::CollectiveRecord>& records,
                       dist::CollectiveRecord::TimePoint now);

// Adds "collectives" to `line`, a status line written at `now`, when `group` (null: none) has
// a collective stuck for kStuckAfter or a failed one among its last kReportedCollectives.
void AddFlightRecords(const dist::ProcessGroup* group, dist::CollectiveRecord::TimePoint now,
                      Json* line);

// Makes `group`'s flight records carry the trainer's phase at issue, read from `progress`
// (which must outlive the group). Call for every group the rank joins (the first, and each
// elastic regroup's), before its first collective.
void RecordPhases(dist::ProcessGroup& group, const trainer::Progress& progress);

// Replaces status->collectives with the line's "collectives" (none when it has none). Entries
// that are not objects with an integer "seq" are skipped.
void ParseFlightRecords(const Json& line, trainyard::v1::RankStatus* status);

}  // namespace trainyard::daemon
