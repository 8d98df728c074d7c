#include "worker/trainer/pipeline_stage.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "worker/autograd/grad_mode.h"
#include "worker/dist/reducer.h"
#include "worker/ops/elementwise.h"
#include "worker/optim/clip_grad.h"
#include "worker/tensor/factories.h"
#include "worker/trainer/live_state.h"

namespace trainyard::trainer {
namespace {

constexpr const char* kBlockPrefix = "transformer.h.";

// The block of parameter `name` ("transformer.h.<i>. ..."), or -1.
int64_t BlockOf(const std::string& name) {
  if (name.rfind(kBlockPrefix, 0) != 0) return -1;
  return std::stoll(name.substr(std::string(kBlockPrefix).size()));
}

// `params` in a tree of ModuleDicts that names each as the model does.
std::shared_ptr<nn::ModuleDict> TreeOf(const nn::NamedTensors& params) {
  auto root = std::make_shared<nn::ModuleDict>();
  std::map<std::string, std::shared_ptr<nn::ModuleDict>> dicts{{"", root}};
  for (const auto& [name, t] : params) {
    std::string path;
    size_t from = 0;
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', from)) {
      const std::string parent = path;
      path = name.substr(0, dot);
      if (!dicts.count(path)) {
        dicts[path] = dicts[parent]->Insert(name.substr(from, dot - from),
                                            std::make_shared<nn::ModuleDict>());
      }
      from = dot + 1;
    }
    dicts[path]->RegisterParameter(name.substr(from), t);
  }
  return root;
}

// `t` on the CPU, for packing (a copy only from a device).
Tensor OnCpu(const Tensor& t) { return t.device().is_cpu() ? t : CopyToDevice(t, Device()); }

// The parameter a state dict entry "<param>.<state>" belongs to ("" for a hyperparameter).
std::string ParamOf(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

}  // namespace

std::vector<int64_t> BalanceStages(const std::vector<int64_t>& block_params, int64_t first_extra,
                                   int64_t last_extra, int stages) {
  // best[s][b]: the least possible heaviest stage when stages 0..s-1 take blocks 0..b-1.
  const int n = static_cast<int>(block_params.size());
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int b = s; b <= n - (stages - s); ++b) {
      int64_t load = (s == stages ? last_extra : 0) + (s == 1 ? first_extra : 0);
      for (int a = b - 1; a >= s - 1; --a) {  // stage s-1 takes blocks a..b-1
        load += block_params[a];
        if (best[s - 1][a] == kInf) continue;
        const int64_t heaviest = std::max(best[s - 1][a], load);
        if (heaviest < best[s][b]) best[s][b] = heaviest, cut[s][b] = a;
      }
    }
  }
  std::vector<int64_t> blocks(stages);
  for (int s = stages, b = n; s > 0; b = cut[s][b], --s) blocks[s - 1] = b - cut[s][b];
  return blocks;
}

StatusOr<std::unique_ptr<PipelineStage>> PipelineStage::Create(
    const spec::JobSpec& spec, dist::PipelineGroups groups,
    std::shared_ptr<dist::ProcessGroup> world, nn::Module& model) {
  const spec::ParallelismSpec& p = spec.parallelism;
  auto* gpt = dynamic_cast<nn::Gpt*>(&model);
  if (gpt == nullptr) {
    return InvalidArgumentError(
        "parallelism.pipeline_stages = " + std::to_string(p.pipeline_stages) + ": needs model.gpt");
  }
  if (!world || groups.stages != p.pipeline_stages ||
      groups.stages * groups.replicas != world->size()) {
    return InvalidArgumentError(
        "parallelism.pipeline_stages = " + std::to_string(p.pipeline_stages) +
        ": this rank has no pipeline groups of that many stages (launch it with trainyard train "
        "--nproc or through the service)");
  }
  std::unique_ptr<PipelineStage> stage(new PipelineStage());
  stage->groups_ = std::move(groups);
  stage->world_ = std::move(world);
  stage->gpt_ = gpt;
  stage->model_params_ = model.NamedParameters();
  stage->tied_ = stage->model_params_.front().first;  // transformer.wte.weight, listed first
  const int64_t n_layer = gpt->config().n_layer;
  std::vector<int64_t> blocks = p.pipeline_balance;
  if (blocks.empty()) {
    std::vector<int64_t> block_params(n_layer, 0);
    int64_t first_extra = 0, last_extra = 0;
    for (const auto& [name, t] : stage->model_params_) {
      const int64_t b = BlockOf(name);
      if (b >= 0)
        block_params[b] += t.numel();
      else if (name.find("ln_f") != std::string::npos)
        last_extra += t.numel();
      else
        first_extra += t.numel();
    }
    last_extra += stage->model_params_.front().second.numel();  // the head's tied weight
    blocks = BalanceStages(block_params, first_extra, last_extra, p.pipeline_stages);
  }
  for (int s = 0; s < p.pipeline_stages; ++s) {
    stage->stage_of_block_.insert(stage->stage_of_block_.end(), blocks[s], s);
  }
  const int s = stage->groups_.stage;
  while (stage->end_ < n_layer && stage->stage_of_block_[stage->end_] <= s) {
    if (stage->stage_of_block_[stage->end_] < s) ++stage->begin_;
    ++stage->end_;
  }
  nn::NamedTensors own;
  for (const auto& [name, t] : stage->model_params_) {
    if (stage->StageOf(name) == s || (name == stage->tied_ && stage->last()))
      own.emplace_back(name, t);
  }
  stage->parameters_ = TreeOf(own);
  return stage;
}

int PipelineStage::StageOf(const std::string& name) const {
  const int64_t b = BlockOf(name);
  if (b >= 0) return stage_of_block_[b];
  if (name.find("transformer.ln_f.") == 0 || name.find("lm_head.") == 0) return groups_.stages - 1;
  return 0;  // the embeddings
}

Tensor PipelineStage::Forward(const Tensor& idx, const Tensor& input) {
  Tensor x = first() ? gpt_->Embed(idx) : input;
  x = gpt_->Blocks(begin_, end_, x);
  return last() ? gpt_->Head(x) : x;
}

Status PipelineStage::SumTiedGradients() {
  if (!groups_.tied || !(first() || last())) return OkStatus();
  Tensor grad;
  for (const auto& [name, t] : model_params_) {
    if (name == tied_) grad = t.grad();
  }
  if (!grad.defined()) {
    return InternalError("pipeline stage " + std::to_string(groups_.stage) +
                         ": the tied embedding " + tied_ + " got no gradient");
  }
  auto work = groups_.tied->AllReduce(grad, dist::ReduceOp::kSum);
  return dist::WaitFor(*groups_.tied, *work);
}

StatusOr<double> PipelineStage::ClipGradients(double max_norm) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> counted, all;  // the tied embedding counts on the first stage only
  for (const auto& [name, t] : parameters_->NamedParameters()) {
    all.push_back(t);
    if (name != tied_ || first()) counted.push_back(t);
  }
  // Summed over every rank: each of a stage's D replicas holds the same gradients.
  Tensor total = Zeros(Shape{1}, Options(DType::kFloat64));
  total.data<double>()[0] = optim::GradSquaredSum(counted).item();
  RETURN_IF_ERROR(dist::AllReduceHost(*world_, total, dist::ReduceOp::kSum, all.front().device()));
  const double norm = std::sqrt(total.data<double>()[0] / groups_.replicas);
  const double coef = max_norm / (norm + 1e-6);
  if (max_norm > 0 && coef < 1) {
    for (const Tensor& t : all) {
      if (t.grad().defined()) ops::MulScalarInPlace(t.grad(), coef);
    }
  }
  return norm;
}

StatusOr<PipelineStage::Agreement> PipelineStage::AgreeOnStep(double loss, bool stop) {
  Tensor t = Zeros(Shape{2}, Options(DType::kFloat64));
  t.data<double>()[0] = last() ? loss : 0;
  t.data<double>()[1] = stop ? 1 : 0;
  RETURN_IF_ERROR(dist::AllReduceHost(*world_, t, dist::ReduceOp::kSum, device()));
  return Agreement{t.data<double>()[0] / groups_.replicas, t.data<double>()[1] > 0};
}

bool PipelineStage::Owns(const std::string& name) const {
  return StageOf(name) == groups_.stage || (name == tied_ && last());
}

Device PipelineStage::device() const { return parameters_->Parameters().front().device(); }

void PipelineStage::Release() {
  if (!whole_) return;
  for (const auto& [name, t] : model_params_) {
    if (Owns(name)) continue;
    if (!empty_) empty_ = std::make_shared<Storage>(0, t.device());
    t.impl()->storage = empty_;
    t.impl()->offset = 0;
  }
  whole_ = false;
}

Status PipelineStage::Gather() {
  autograd::NoGradGuard no_grad;
  std::map<std::string, Tensor> got;
  for (int s = 1; s < groups_.stages; ++s) {
    NamedTensorList part;
    if (groups_.stage == s && groups_.replica == 0) {
      for (const auto& [name, t] : model_params_) {
        if (StageOf(name) == s) part.emplace_back(name, OnCpu(t));
      }
    }
    // Only rank 0 unpacks what it is sent.
    const int root = s * groups_.replicas;
    const bool keep = world_->rank() == 0 || world_->rank() == root;
    RETURN_IF_ERROR(BroadcastTensors(*world_, root, keep ? &part : nullptr, device()));
    if (world_->rank() == 0) {
      for (auto& [name, t] : part) got[name] = std::move(t);
    }
  }
  if (world_->rank() != 0) return OkStatus();
  for (const auto& [name, t] : model_params_) {
    if (Owns(name) || StageOf(name) == 0) continue;  // rank 0 is stage 0
    auto it = got.find(name);
    if (it == got.end() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) {
      return InternalError("pipeline: gathering the weights, no " + name + " came from stage " +
                           std::to_string(StageOf(name)));
    }
    const Tensor here = t.device().is_cpu() ? it->second : CopyToDevice(it->second, t.device());
    t.impl()->storage = here.storage();
    t.impl()->offset = here.offset();
  }
  whole_ = true;
  return OkStatus();
}

int64_t PipelineStage::weight_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& t : parameters_->Parameters()) bytes += dist::BytesOf(t);
  return bytes;
}

StatusOr<std::vector<optim::NamedTensor>> PipelineStage::GatherOptimizerState(
    std::vector<optim::NamedTensor> own) {
  const Device via = device();
  std::vector<optim::NamedTensor> all;
  if (world_->rank() == 0) all = own;
  std::set<std::string> have;
  for (const auto& [key, t] : all) have.insert(key);
  for (int s = 1; s < groups_.stages; ++s) {
    NamedTensorList part;
    if (groups_.stage == s && groups_.replica == 0) {
      for (const auto& [key, t] : own) {
        const std::string param = ParamOf(key);
        if (!param.empty() && StageOf(param) == s) part.emplace_back(key, OnCpu(t));
      }
    }
    const int root = s * groups_.replicas;
    const bool keep = world_->rank() == 0 || world_->rank() == root;
    RETURN_IF_ERROR(BroadcastTensors(*world_, root, keep ? &part : nullptr, via));
    if (world_->rank() != 0) continue;
    for (auto& [key, t] : part) {
      if (have.insert(key).second) all.emplace_back(key, std::move(t));
    }
  }
  std::sort(all.begin(), all.end(), [](const optim::NamedTensor& a, const optim::NamedTensor& b) {
    return a.first < b.first;
  });
  return all;
}

std::vector<optim::NamedTensor> PipelineStage::OwnOptimizerState(
    std::vector<optim::NamedTensor> all) const {
  std::set<std::string> own;
  for (const auto& [name, t] : parameters_->NamedParameters()) own.insert(name);
  std::vector<optim::NamedTensor> kept;
  for (auto& [key, t] : all) {
    const std::string param = ParamOf(key);
    if (param.empty() || own.count(param)) kept.emplace_back(std::move(key), std::move(t));
  }
  return kept;
}

}  // namespace trainyard::trainer
