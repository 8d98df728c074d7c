#include "client/service_client.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace trainyard::client {

using namespace std::chrono_literals;

StatusOr<std::unique_ptr<ServiceClient>> ServiceClient::Connect(const ConnectOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   rpc::MakeChannel(options.coordinator, options.channel));
  return std::unique_ptr<ServiceClient>(new ServiceClient(options, std::move(channel)));
}

ServiceClient::ServiceClient(ConnectOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::Coordinator::NewStub(channel_)) {}

void ServiceClient::Prepare(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + options_.deadline);
  rpc::AddToken(ctx, options_.token);
}

Status ServiceClient::Named(const grpc::Status& s) const {
  if (s.ok()) return OkStatus();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return UnavailableError("cannot reach the coordinator at " + options_.coordinator + ": " +
                            s.error_message() +
                            " (is trainyard-coordinator running? --coordinator or "
                            "TRAINYARD_COORDINATOR say where)");
  }
  return rpc::FromGrpc(s);
}

StatusOr<v1::Job> ServiceClient::Submit(const std::string& spec_json) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::SubmitJobRequest req;
  req.set_spec_json(spec_json);
  v1::SubmitJobResponse resp;
  RETURN_IF_ERROR(Named(stub_->SubmitJob(&ctx, req, &resp)));
  return resp.job();
}

StatusOr<v1::Job> ServiceClient::GetJob(const std::string& id) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetJobRequest req;
  req.set_id(id);
  v1::GetJobResponse resp;
  RETURN_IF_ERROR(Named(stub_->GetJob(&ctx, req, &resp)));
  return resp.job();
}

StatusOr<v1::ListJobsResponse> ServiceClient::ListJobs(const std::vector<v1::JobState>& states,
                                                       int page_size,
                                                       const std::string& page_token) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::ListJobsRequest req;
  for (v1::JobState s : states) req.add_states(s);
  req.set_page_size(page_size);
  req.set_page_token(page_token);
  v1::ListJobsResponse resp;
  RETURN_IF_ERROR(Named(stub_->ListJobs(&ctx, req, &resp)));
  return resp;
}

StatusOr<v1::Job> ServiceClient::Cancel(const std::string& id, bool checkpoint) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::CancelJobRequest req;
  req.set_id(id);
  req.set_checkpoint(checkpoint);
  v1::CancelJobResponse resp;
  RETURN_IF_ERROR(Named(stub_->CancelJob(&ctx, req, &resp)));
  return resp.job();
}

StatusOr<std::vector<v1::WorkerInfo>> ServiceClient::ListWorkers() {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::ListWorkersResponse resp;
  RETURN_IF_ERROR(Named(stub_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp)));
  return std::vector<v1::WorkerInfo>(resp.workers().begin(), resp.workers().end());
}

void WatchStop::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  if (call_ != nullptr) call_->TryCancel();
  cv_.notify_all();
}

bool WatchStop::Begin(grpc::ClientContext* call) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return false;  // and keeps no pointer to a call that will not be made
  call_ = call;
  return true;
}

void WatchStop::End() {
  std::lock_guard<std::mutex> lock(mu_);
  call_ = nullptr;
}

bool WatchStop::stopped() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

bool WatchStop::WaitFor(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, d, [&] { return stopped_; });
}

Status ServiceClient::Watch(const std::string& id,
                            const std::function<bool(const v1::JobEvent&)>& on_event,
                            std::chrono::milliseconds unavailable_for, WatchStop* stop) {
  WatchStop no_stop;
  if (stop == nullptr) stop = &no_stop;
  auto unreachable_since = std::chrono::steady_clock::now();
  int64_t last_seq = 0;  // of the newest stored event seen; a reconnect goes on after it
  while (true) {
    grpc::ClientContext ctx;
    rpc::AddToken(&ctx, options_.token);
    v1::WatchJobRequest req;
    req.set_id(id);
    req.set_from_seq(last_seq > 0 ? last_seq + 1 : 0);
    // Stop() may cancel ctx from now on; End() below, before ctx goes, ends that.
    if (!stop->Begin(&ctx)) return CancelledError("watch stopped");
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobEvent event;
    bool got_any = false, ended_by_caller = false;
    while (reader->Read(&event)) {
      got_any = true;
      last_seq = std::max(last_seq, event.seq());
      if (!on_event(event)) {
        ctx.TryCancel();
        ended_by_caller = true;
        break;
      }
    }
    const grpc::Status s = reader->Finish();
    stop->End();
    if (ended_by_caller || stop->stopped()) return CancelledError("watch stopped");
    if (s.ok()) return OkStatus();
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return Named(s);
    const auto now = std::chrono::steady_clock::now();
    if (got_any) unreachable_since = now;
    if (now - unreachable_since >= unavailable_for) return Named(s);
    if (stop->WaitFor(options_.watch_retry)) {
      return CancelledError("watch stopped while waiting to reconnect");
    }
  }
}

std::string StateName(v1::JobState state) {
  if (state == v1::JOB_STATE_UNSPECIFIED) return "UNSPECIFIED";
  return v1::JobState_Name(state);
}

StatusOr<v1::JobState> ParseState(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  v1::JobState s;
  if (upper != "JOB_STATE_UNSPECIFIED" && v1::JobState_Parse(upper, &s)) return s;
  return InvalidArgumentError("unknown job state \"" + name +
                              "\"; states: pending, scheduled, running, restarting, succeeded, "
                              "failed, cancelled");
}

}  // namespace trainyard::client
