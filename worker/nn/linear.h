// Fully connected layers: nn.Linear and nn.Embedding.
#pragma once

#include <cstdint>

#include "worker/nn/module.h"
#include "worker/tensor/generator.h"

namespace trainyard::nn {

// nn.Linear: y = x weight^T + bias, x: (*, in) -> (*, out). Parameters "weight" (out, in) and
// "bias" (out). Initialised as PyTorch: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)), drawn
// from gen (the default generator when null).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  // Wraps existing tensors, e.g. a weight tied to an embedding: weight (out, in), bias (out)
  // or undefined for none.
  Linear(Tensor weight, Tensor bias);

  Tensor Forward(const Tensor& x) override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias
  int64_t in_features() const { return weight_.size(1); }
  int64_t out_features() const { return weight_.size(0); }

 private:
  Tensor weight_;
  Tensor bias_;
};

// nn.Embedding: rows of "weight" (num_embeddings, embedding_dim), initialised N(0, 1).
// Forward takes int64 indices of any shape and returns (*indices.shape, embedding_dim).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* gen = nullptr);

  Tensor Forward(const Tensor& indices) override;

  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
};

}  // namespace trainyard::nn
