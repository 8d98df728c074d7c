// Custom differentiable functions written by a user in C++:
//
//   struct Cube {
//     static std::vector<Tensor> Forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
//       ctx.SaveForBackward({in[0]});
//       return {Mul(Mul(in[0], in[0]), in[0])};
//     }
//     static std::vector<Tensor> Backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
//       Tensor x = ctx.saved_tensors()[0];
//       return {Mul(g[0], MulScalar(Mul(x, x), 3))};
//     }
//   };
//   std::vector<Tensor> y = ApplyFunction<Cube>({x});
//
// Forward runs with grad mode off. Backward gets one gradient per output (zeros for outputs
// that received none) and returns one per input (undefined for inputs without a gradient).
// Saved tensors get the same version checks as built-in ops.
#pragma once

#include <map>
#include <string>
#include <typeinfo>
#include <vector>

#include "worker/autograd/grad_mode.h"
#include "worker/autograd/node.h"

namespace trainyard::autograd {

class FunctionContext {
 public:
  void SaveForBackward(std::vector<Tensor> tensors) { to_save_ = std::move(tensors); }
  // Valid in Backward.
  std::vector<Tensor> saved_tensors() const;
  // Non-tensor values to keep for backward.
  std::map<std::string, double> data;

 private:
  friend std::vector<Tensor> FinishCustomFunction(const std::vector<Tensor>& inputs,
                                                  std::vector<Tensor> outputs,
                                                  std::shared_ptr<class CustomFunctionNode> node);
  std::vector<Tensor> to_save_;
  Node* node_ = nullptr;
  size_t num_saved_ = 0;
};

using CustomBackwardFn = std::vector<Tensor> (*)(FunctionContext&, const std::vector<Tensor>&);

class CustomFunctionNode final : public Node {
 public:
  CustomFunctionNode(std::string name, uint32_t num_outputs, CustomBackwardFn backward)
      : Node(num_outputs), name_(std::move(name)), backward_(backward) {}
  const char* name() const override { return name_.c_str(); }
  GradList Apply(GradList&& grads) override;
  FunctionContext& ctx() { return ctx_; }
  // Output shapes and options, to make zero gradients for outputs that got none.
  std::vector<std::pair<Shape, TensorOptions>> output_meta;
  std::vector<Shape> input_shapes;
  std::vector<DType> input_dtypes;

 private:
  std::string name_;
  CustomBackwardFn backward_;
  FunctionContext ctx_;
};

// "CubeBackward" for a function type named Cube (from its mangled name).
std::string FunctionNodeName(const char* mangled);

// Wraps Forward's outputs into the graph; see the top of this file.
std::vector<Tensor> FinishCustomFunction(const std::vector<Tensor>& inputs,
                                         std::vector<Tensor> outputs,
                                         std::shared_ptr<CustomFunctionNode> node);

template <typename F>
std::vector<Tensor> ApplyFunction(const std::vector<Tensor>& inputs) {
  const bool record = ShouldRecord(inputs);
  std::shared_ptr<CustomFunctionNode> node;
  FunctionContext local;
  FunctionContext* ctx = &local;
  if (record) {
    node =
        std::make_shared<CustomFunctionNode>(FunctionNodeName(typeid(F).name()), 0, &F::Backward);
    ctx = &node->ctx();
  }
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = F::Forward(*ctx, inputs);
  }
  if (!record) return outputs;
  return FinishCustomFunction(inputs, std::move(outputs), std::move(node));
}

}  // namespace trainyard::autograd
