#include "kernels/cpu/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace trainyard::kernels::cpu {
namespace {

// Odd sizes: a single element, a vector tail, and several parallel chunks plus a tile tail.
const int64_t kSizes[] = {1, 37, 3 * 8192 + 517};

template <typename T>
std::vector<T> Random(int64_t n, std::mt19937* rng, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(*rng));
  return v;
}

// The update rules as documented in optim.h, one element at a time. The kernels must match them
// bit for bit: every operation is either correctly rounded or an explicit std::fma.
template <typename T>
void SgdReference(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& buf, bool first,
                  const SgdHyper& h) {
  const T momentum = static_cast<T>(h.momentum);
  for (size_t i = 0; i < p.size(); ++i) {
    T gi = h.weight_decay != 0 ? std::fma(static_cast<T>(h.weight_decay), p[i], g[i]) : g[i];
    if (h.momentum != 0) {
      buf[i] = first ? gi : std::fma(static_cast<T>(1 - h.dampening), gi, buf[i] * momentum);
      gi = h.nesterov ? std::fma(momentum, buf[i], gi) : buf[i];
    }
    p[i] = std::fma(static_cast<T>(-h.lr), gi, p[i]);
  }
}

// x rounded to T on its own, whatever the compiler's contraction setting.
template <typename T>
T Rounded(T x) {
  volatile T r = x;
  return r;
}

template <typename T>
void AdamReference(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& m, std::vector<T>& v,
                   int64_t step, const AdamHyper& h) {
  const double bc1 = 1 - std::pow(h.beta1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(h.beta2, static_cast<double>(step));
  const T w = static_cast<T>(1 - h.beta1);
  for (size_t i = 0; i < p.size(); ++i) {
    T gi = g[i];
    if (h.weight_decay != 0) {
      if (h.decoupled_weight_decay) {
        p[i] = Rounded(p[i] * static_cast<T>(1 - h.lr * h.weight_decay));
      } else {
        gi = std::fma(static_cast<T>(h.weight_decay), p[i], gi);
      }
    }
    m[i] = std::fabs(w) < T(0.5) ? std::fma(w, gi - m[i], m[i]) : std::fma(w - 1, gi - m[i], gi);
    v[i] = std::fma(static_cast<T>(1 - h.beta2) * gi, gi, v[i] * static_cast<T>(h.beta2));
    const T denom = std::sqrt(v[i]) / static_cast<T>(std::pow(bc2, 0.5)) + static_cast<T>(h.eps);
    p[i] = p[i] + static_cast<T>(-(h.lr / bc1)) * m[i] / denom;
  }
}

template <typename T>
void ExpectSameBits(const std::vector<T>& got, const std::vector<T>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

template <typename T>
void CheckSgdAgainstReference() {
  std::mt19937 rng(11);
  SgdHyper configs[3];
  configs[0].lr = 0.1;
  configs[1] = {0.05, 0.9, 0.1, 0.01, false};
  configs[2] = {0.05, 0.8, 0.0, 0.001, true};
  for (int64_t n : kSizes) {
    for (const SgdHyper& h : configs) {
      SCOPED_TRACE(testing::Message() << "n " << n << " momentum " << h.momentum);
      std::vector<T> p = Random<T>(n, &rng), buf(n), p_ref = p, buf_ref(n);
      for (int step = 0; step < 3; ++step) {
        const std::vector<T> g = Random<T>(n, &rng);
        SgdUpdate<T>(n, p.data(), g.data(), buf.data(), step == 0, h);
        SgdReference(p_ref, g, buf_ref, step == 0, h);
      }
      ExpectSameBits(p, p_ref);
      if (h.momentum != 0) ExpectSameBits(buf, buf_ref);
    }
  }
}

template <typename T>
void CheckAdamAgainstReference() {
  std::mt19937 rng(12);
  AdamHyper configs[3];
  configs[0] = {0.01, 0.85, 0.995, 1e-5, 0.05, false};
  configs[1] = {0.02, 0.9, 0.999, 1e-8, 0.1, true};
  configs[2] = {0.003, 0.3, 0.9, 1e-8, 0.0, true};  // lerp weight above one half
  for (int64_t n : kSizes) {
    for (const AdamHyper& h : configs) {
      SCOPED_TRACE(testing::Message() << "n " << n << " beta1 " << h.beta1);
      std::vector<T> p = Random<T>(n, &rng), m(n), v(n), p_ref = p, m_ref(n), v_ref(n);
      for (int64_t step = 1; step <= 3; ++step) {
        const std::vector<T> g = Random<T>(n, &rng);
        AdamUpdate<T>(n, p.data(), g.data(), m.data(), v.data(), step, h);
        AdamReference(p_ref, g, m_ref, v_ref, step, h);
      }
      ExpectSameBits(p, p_ref);
      ExpectSameBits(m, m_ref);
      ExpectSameBits(v, v_ref);
    }
  }
}

TEST(OptimKernelTest, SgdMatchesTheReferenceBitForBitInFloatAndDouble) {
  CheckSgdAgainstReference<float>();
  CheckSgdAgainstReference<double>();
}

TEST(OptimKernelTest, AdamMatchesTheReferenceBitForBitInFloatAndDouble) {
  CheckAdamAgainstReference<float>();
  CheckAdamAgainstReference<double>();
}

TEST(OptimKernelTest, UpdatesAndNormsDoNotDependOnTheThreadCount) {
  const int threads = GetNumThreads();
  std::mt19937 rng(13);
  const int64_t n = 5 * 8192 + 3;
  const std::vector<float> p0 = Random<float>(n, &rng), g = Random<float>(n, &rng);
  const AdamHyper h{0.01, 0.9, 0.999, 1e-8, 0.1, true};
  std::vector<float> results[2];
  double norms[2];
  for (int k = 0; k < 2; ++k) {
    SetNumThreads(k == 0 ? 1 : 3);
    std::vector<float> p = p0, m(n), v(n);
    AdamUpdate<float>(n, p.data(), g.data(), m.data(), v.data(), 1, h);
    results[k] = p;
    norms[k] = SumAbsPow(g.data(), n, 2);
  }
  SetNumThreads(threads);
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), n * sizeof(float)), 0);
  EXPECT_EQ(norms[0], norms[1]);
}

TEST(OptimKernelTest, SumAbsPowAndMaxAbsMatchTheDefinitions) {
  std::mt19937 rng(14);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{3 * 4096 + 11}}) {
    const std::vector<double> x = Random<double>(n, &rng);
    for (double p : {1.0, 2.0, 3.0, 0.5}) {
      double want = 0;
      for (double v : x) want += std::pow(std::fabs(v), p);
      EXPECT_NEAR(SumAbsPow(x.data(), n, p), want, 1e-12 * (1 + want)) << "n " << n << " p " << p;
    }
    double want_max = 0;
    for (double v : x) want_max = std::max(want_max, std::fabs(v));
    EXPECT_EQ(MaxAbs(x.data(), n), want_max);
  }
  std::vector<float> with_nan = {1, -7, std::nanf(""), 2};
  EXPECT_TRUE(std::isnan(MaxAbs(with_nan.data(), 4)));
  EXPECT_TRUE(std::isnan(SumAbsPow(with_nan.data(), 4, 2)));
  std::vector<float> f = {3, -4};
  EXPECT_EQ(SumAbsPow(f.data(), 2, 2), 25.0);
  EXPECT_EQ(MaxAbs(f.data(), 2), 4.0);
}

}  // namespace
}  // namespace trainyard::kernels::cpu
