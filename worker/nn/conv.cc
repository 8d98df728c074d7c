#include "worker/nn/conv.h"

#include <cmath>

#include "worker/nn/init.h"
#include "worker/tensor/factories.h"

namespace trainyard::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
               int64_t padding, int64_t dilation, int64_t groups, bool bias, Generator* gen)
    : Module("Conv2d") {
  TY_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && stride > 0 && padding >= 0 &&
           dilation > 0 && groups > 0)
      << "Conv2d: in_channels " << in_channels << ", out_channels " << out_channels
      << ", kernel_size " << kernel_size << ", stride " << stride << ", dilation " << dilation
      << " and groups " << groups << " must be positive and padding " << padding << " not negative";
  TY_CHECK(in_channels % groups == 0 && out_channels % groups == 0)
      << "Conv2d: groups " << groups << " must divide in_channels " << in_channels
      << " and out_channels " << out_channels;
  options_.set_stride(stride).set_padding(padding).set_dilation(dilation).set_groups(groups);
  weight_ = RegisterParameter(
      "weight", Empty({out_channels, in_channels / groups, kernel_size, kernel_size}));
  init::KaimingUniform(weight_, std::sqrt(5.0), gen);
  if (bias) {
    bias_ = RegisterParameter("bias", Empty({out_channels}));
    const double bound = 1 / std::sqrt(static_cast<double>(init::ComputeFans(weight_).in));
    init::Uniform(bias_, -bound, bound, gen);
  }
}

Tensor Conv2d::Forward(const Tensor& x) { return ops::Conv2d(x, weight_, bias_, options_); }

}  // namespace trainyard::nn
