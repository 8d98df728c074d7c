#include "worker/autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include "worker/tensor/factories.h"

namespace trainyard::autograd {

std::string FunctionNodeName(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string name = (status == 0 && demangled) ? demangled.get() : mangled;
  size_t colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  return name + "Backward";
}

std::vector<Tensor> FunctionContext::saved_tensors() const {
  if (node_ == nullptr) return to_save_;
  std::vector<Tensor> out;
  for (size_t i = 0; i < num_saved_; ++i) out.push_back(node_->saved(i));
  return out;
}

GradList CustomFunctionNode::Apply(GradList&& grads) {
  std::vector<Tensor> g(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    g[i] = grads[i].defined() ? grads[i] : Zeros(output_meta[i].first, output_meta[i].second);
  }
  std::vector<Tensor> result = backward_(ctx_, g);
  GradList out;
  if (result.size() != next_edges().size()) {
    SetBackwardError(InvalidArgumentError(
        std::string(name()) + " returned " + std::to_string(result.size()) +
        " gradients; it must return one per input (" + std::to_string(next_edges().size()) + ")"));
    return out;
  }
  for (size_t i = 0; i < result.size(); ++i) {
    if (result[i].defined() &&
        (result[i].shape() != input_shapes[i] || result[i].dtype() != input_dtypes[i])) {
      SetBackwardError(InvalidArgumentError(
          std::string(name()) + " returned a gradient of shape " + result[i].shape().ToString() +
          " for input " + std::to_string(i) + " of shape " + input_shapes[i].ToString()));
      return GradList();
    }
    out.push_back(result[i]);
  }
  return out;
}

std::vector<Tensor> FinishCustomFunction(const std::vector<Tensor>& inputs,
                                         std::vector<Tensor> outputs,
                                         std::shared_ptr<CustomFunctionNode> node) {
  for (const Tensor& in : inputs) {
    node->add_edge(GradientEdge(in));
    node->input_shapes.push_back(in.defined() ? in.shape() : Shape{});
    node->input_dtypes.push_back(in.defined() ? in.dtype() : DType::kFloat32);
  }
  FunctionContext& ctx = node->ctx();
  for (const Tensor& t : ctx.to_save_) node->Save(t);
  ctx.num_saved_ = ctx.to_save_.size();
  ctx.to_save_.clear();
  ctx.node_ = node.get();
  node->set_num_outputs(static_cast<uint32_t>(outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    TY_CHECK(outputs[i].defined())
        << node->name() << ": Forward returned an undefined output " << i;
    // Fresh handles over the same data, so an output that aliases an input gets its own
    // history without touching the input's.
    outputs[i] = outputs[i].detach();
    node->output_meta.emplace_back(outputs[i].shape(), outputs[i].options());
    if (IsFloating(outputs[i].dtype())) SetHistory(outputs[i], node, static_cast<uint32_t>(i));
  }
  return outputs;
}

}  // namespace trainyard::autograd
