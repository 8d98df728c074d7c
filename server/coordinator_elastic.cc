// Coordinator, elastic jobs (parallelism.min_world_size/max_world_size; coordinator.h): the
// ranks of a running job regroup into a new attempt instead of restarting from a checkpoint
// when one of them is lost, and grow into free slots at a step boundary.
//
// Note [Regroups]: a regroup ends the running attempt n and begins attempt n + 1 (regrouped,
// a new rendezvous secret and store scope, the fence epoch n + 1) with its members renumbered
// 0..m-1 in their old order, and new ranks after them when it grows. The job stays RUNNING
// (a StateChange RUNNING -> RUNNING says why), Job.regroups counts it, no restart is spent.
// Members hear a Regroup on their workers; ranks left out are stopped (SIGKILL). Triggers:
//   - a lost worker, a rank's exit (but code 2: the job is wrong, it fails as before) or a
//     hang verdict: the other ranks that are alive continue, at once (at_step_boundary false);
//   - a rank's `regrouping` report (its group broke: the survivors of a kill -9 see a reset
//     connection within milliseconds, long before the heartbeat timeout): a quorum window of
//     max(1 s, 2 heartbeat intervals) opens, closing early once every rank has reported or is
//     known gone; the ranks that reported are the members, the silent ones (a SIGSTOP) are
//     left out;
//   - free slots while the job runs below max_world_size, has completed a step in this
//     attempt, no regroup is pending and no other job waits in the queue: the new ranks
//     start with an Assignment, the members regroup at their next step boundary.
// Fewer than min_world_size members: the attempt is aborted as for any job (a restart from
// the latest checkpoint while restarts remain).
#include <algorithm>
#include <map>
#include <set>

#include "common/logging.h"
#include "common/random_id.h"
#include "server/coordinator.h"
#include "server/scheduler.h"

namespace trainyard::server {

using trainyard::v1::RankPlacement;
using trainyard::v1::WorkerCommand;

namespace {

std::string Plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// The Regroup of one worker's members from attempt `from` to from + 1: (old rank, new rank).
WorkerCommand RegroupCommand(const std::string& job, int from, const std::string& secret,
                             int world_size, bool at_step_boundary,
                             const std::vector<std::pair<int, int>>& remaps) {
  WorkerCommand c;
  trainyard::v1::Regroup& g = *c.mutable_regroup();
  g.set_job_id(job);
  g.set_from_attempt(from);
  g.set_attempt(from + 1);
  g.set_secret(secret);
  g.set_world_size(world_size);
  g.set_at_step_boundary(at_step_boundary);
  for (const auto& [old, rank] : remaps) {
    trainyard::v1::RankRemap* remap = g.add_ranks();
    remap->set_from_rank(old);
    remap->set_rank(rank);
  }
  return c;
}

}  // namespace

bool Coordinator::Elastic(const Entry& e) const {
  return spec::IsElastic(e.spec.parallelism) && e.job.state() == trainyard::v1::RUNNING &&
         !e.job.cancel_requested() && !e.stopping;
}

std::vector<int> Coordinator::LiveRanks(const Entry& e, int except) const {
  std::vector<int> out;
  for (const auto& [rank, r] : e.ranks) {
    if (rank == except || r.status.exited() || !registry_.IsAlive(r.placement.worker())) continue;
    out.push_back(rank);
  }
  return out;
}

bool Coordinator::RegroupWithout(Entry& e, int rank, const std::string& why) {
  return Elastic(e) && Regroup(e, LiveRanks(e, rank), {}, why);
}

bool Coordinator::Regroup(Entry& e, const std::vector<int>& members,
                          std::vector<RankPlacement> added, const std::string& why) {
  const size_t m = members.size() + added.size();
  if (m < static_cast<size_t>(spec::MinWorldSize(e.spec.parallelism))) return false;
  const int from = e.job.attempts_size();
  const bool at_step_boundary = !added.empty();
  std::vector<RankPlacement> ranks;
  std::map<std::string, std::vector<std::pair<int, int>>> remaps;  // worker: (from, to)
  for (int old : members) {
    RankPlacement p = e.ranks.at(old).placement;
    p.set_rank(static_cast<int>(ranks.size()));
    remaps[p.worker()].push_back({old, p.rank()});
    ranks.push_back(std::move(p));
  }
  std::set<std::string> new_workers;
  for (RankPlacement& p : added) {
    p.set_rank(static_cast<int>(ranks.size()));
    new_workers.insert(p.worker());
    ranks.push_back(std::move(p));
  }
  // Ranks left out on workers without a member: a Regroup stops them on the others.
  std::set<std::string> stop;
  for (const auto& [rank, r] : e.ranks) {
    const bool member = std::find(members.begin(), members.end(), rank) != members.end();
    if (member) continue;
    suspect_[r.placement.worker()] = clock_->Now() + options_.heartbeat_timeout;
    if (!r.status.exited() && !remaps.count(r.placement.worker()))
      stop.insert(r.placement.worker());
  }
  const std::string reason = "regrouped into attempt " + std::to_string(from + 1) + " with " +
                             Plural(m, "rank") + ": " + why;
  EndAttempt(e, reason);
  trainyard::v1::Attempt& a = BeginAttempt(e, std::move(ranks));
  a.set_regrouped(true);
  const std::string secret = a.secret();
  e.job.set_regroups(e.job.regroups() + 1);
  // Committed before any worker hears of the new attempt (as StartAttempt).
  (void)Transition(e, trainyard::v1::RUNNING, reason);
  for (const auto& [worker, pairs] : remaps) {
    Send(worker,
         RegroupCommand(e.job.id(), from, secret, static_cast<int>(m), at_step_boundary, pairs));
  }
  for (const std::string& worker : new_workers) ResendAssignment(e, worker);
  for (const std::string& worker : stop) Send(worker, AbortCommand(e.job.id(), from, reason));
  return true;
}

int Coordinator::LateStepOfRegroup(const Entry& e,
                                   const trainyard::v1::MetricsReport& report) const {
  const int current = e.job.attempts_size();
  if (!report.has_step() || report.attempt() != current - 1 || current < 2 || !Elastic(e) ||
      !e.job.attempts(current - 1).regrouped() ||
      report.step().step() <= e.job.last_step().step()) {
    return -1;
  }
  for (const RankPlacement& old : e.job.attempts(current - 2).ranks()) {
    if (old.rank() != report.step().rank() || old.worker() != report.worker()) continue;
    for (const auto& [rank, r] : e.ranks) {
      if (r.placement.worker() == old.worker() && r.placement.slot() == old.slot()) return rank;
    }
  }
  return -1;
}

bool Coordinator::RegroupForming(const Entry& e) const {
  if (e.job.attempts_size() == 0 || !e.job.attempts(e.job.attempts_size() - 1).regrouped()) {
    return false;
  }
  return std::any_of(e.ranks.begin(), e.ranks.end(),
                     [](const auto& kv) { return !kv.second.reported; });
}

void Coordinator::OnRegroupingReport(Entry& e) {
  if (!Elastic(e) || e.regroup_deadline != Clock::TimePoint{}) return;
  const std::chrono::milliseconds window =
      std::max<std::chrono::milliseconds>(std::chrono::seconds(1), 2 * options_.heartbeat_interval);
  e.regroup_deadline = clock_->Now() + window;
  TY_LOG(INFO) << "job " << e.job.id() << ": a rank left its group; the ranks that report "
               << "within " << FormatSeconds(SecondsOf(window)) << " regroup";
}

void Coordinator::CheckRegroup(Entry& e) {
  if (e.regroup_deadline == Clock::TimePoint{}) return;
  if (!Elastic(e)) {
    e.regroup_deadline = {};
    return;
  }
  std::vector<int> members;
  std::string error, silent;
  for (const auto& [rank, r] : e.ranks) {
    const bool gone = r.status.exited() || !registry_.IsAlive(r.placement.worker());
    if (!gone && r.status.regrouping()) {
      members.push_back(rank);
      if (error.empty()) error = r.status.group_error();
    } else if (!gone) {
      silent += (silent.empty() ? "" : ", ") + RankName(r.placement);
    }
  }
  if (!silent.empty() && clock_->Now() < e.regroup_deadline) return;
  e.regroup_deadline = {};
  std::string why = "a rank's group broke (" + (error.empty() ? "asked to leave" : error) + ")";
  if (!silent.empty()) why += "; left out, silent: " + silent;
  if (Regroup(e, members, {}, why)) return;
  AbortAttempt(e, why + "; " + Plural(members.size(), "rank") + " left, under " +
                      "parallelism.min_world_size = " +
                      std::to_string(spec::MinWorldSize(e.spec.parallelism)));
}

void Coordinator::MaybeGrow(Entry& e) {
  if (!Elastic(e) || !e.stepped || e.regroup_deadline != Clock::TimePoint{}) return;
  const int m = static_cast<int>(e.ranks.size());
  const int most = spec::MaxWorldSize(e.spec.parallelism);
  if (m >= most) return;
  const bool settled = std::all_of(e.ranks.begin(), e.ranks.end(), [&](const auto& kv) {
    return kv.second.reported && !kv.second.status.exited() && !kv.second.status.regrouping();
  });
  if (!settled || LiveRanks(e).size() != static_cast<size_t>(m)) return;
  GangRequest more = e.gang;
  more.world_size = most - m;
  more.min_world_size = 1;
  std::vector<WorkerCapacity> free = FreeCapacity(e.gang.gpu);
  free.erase(std::remove_if(free.begin(), free.end(),
                            [&](const WorkerCapacity& w) {
                              auto it = suspect_.find(w.name);
                              return it != suspect_.end() && clock_->Now() < it->second;
                            }),
             free.end());
  std::optional<std::vector<RankPlacement>> added = PlaceGang(more, free);
  if (!added) return;
  std::set<std::string> workers;
  for (const RankPlacement& p : *added) workers.insert(p.worker());
  std::string names;
  for (const std::string& w : workers) names += (names.empty() ? "" : ", ") + w;
  const std::string why = "grew by " + Plural(added->size(), "rank") + " on " + names;
  Regroup(e, LiveRanks(e), *std::move(added), why);
}

}  // namespace trainyard::server
