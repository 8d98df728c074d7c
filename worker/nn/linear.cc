#include "worker/nn/linear.h"

#include <cmath>

#include "worker/nn/init.h"
#include "worker/ops/indexing.h"
#include "worker/ops/linalg.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator* gen)
    : Module("Linear") {
  TY_CHECK(in_features >= 0 && out_features >= 0)
      << "Linear: in_features " << in_features << " and out_features " << out_features
      << " must not be negative";
  weight_ = RegisterParameter("weight", Empty({out_features, in_features}));
  init::KaimingUniform(weight_, std::sqrt(5.0), gen);
  if (bias) {
    bias_ = RegisterParameter("bias", Empty({out_features}));
    const double bound = in_features > 0 ? 1 / std::sqrt(static_cast<double>(in_features)) : 0;
    init::Uniform(bias_, -bound, bound, gen);
  }
}

Linear::Linear(Tensor weight, Tensor bias) : Module("Linear") {
  TY_CHECK(weight.defined() && weight.dim() == 2)
      << "Linear: weight must be (out_features, in_features)";
  TY_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)})
      << "Linear: bias " << bias.shape() << " must be (out_features) = (" << weight.size(0) << ")";
  weight_ = RegisterParameter("weight", weight);
  if (bias.defined()) bias_ = RegisterParameter("bias", bias);
}

Tensor Linear::Forward(const Tensor& x) { return ops::Linear(x, weight_, bias_); }

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* gen)
    : Module("Embedding") {
  TY_CHECK(num_embeddings >= 0 && embedding_dim >= 0)
      << "Embedding: num_embeddings " << num_embeddings << " and embedding_dim " << embedding_dim
      << " must not be negative";
  weight_ = RegisterParameter("weight", Empty({num_embeddings, embedding_dim}));
  init::Normal(weight_, 0, 1, gen);
}

Tensor Embedding::Forward(const Tensor& indices) { return ops::Embedding(weight_, indices); }

}  // namespace trainyard::nn
