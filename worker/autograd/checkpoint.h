// Activation checkpointing, as torch.utils.checkpoint (the re-entrant variant): trade compute
// for memory by not keeping the activations of `fn` for backward.
//
//   std::vector<Tensor> y = Checkpoint([&](const std::vector<Tensor>& in) {
//     return std::vector<Tensor>{block->Forward(in[0])};
//   }, {x});
//
// Forward runs fn with grad mode off, so fn records no graph and its intermediate tensors die
// with it; only the inputs are saved. The outputs get one CheckpointBackward node. When that
// node runs, it calls fn again with grad mode on, on detached copies of the inputs (requiring
// grad as the originals do), and runs Backward through the recomputed graph with the incoming
// gradients: parameters captured by fn accumulate into .grad there (their hooks, including
// post-accumulate hooks, fire as usual), and the detached inputs' gradients are what the node
// passes down. So fn runs twice per step: once in forward, once in backward.
//
// Contracts:
//  - fn must be a pure function of its inputs, captured parameters and the generators below:
//    the recompute must produce the same outputs (same shapes) as the forward did.
//  - Randomness (preserve_rng_state): the node records the (seed, offset) of every generator
//    in `generators` before the forward call; the recompute replays from those states and
//    then puts each generator back where it was, so dropout draws the same masks and the
//    generators end as if no recompute had happened. While a recompute runs, no other thread
//    may draw from those generators.
//  - Autocast: the recompute runs under the autocast dtype the forward call ran with
//    (worker/autograd/autocast.h), so it computes what the forward did although the engine
//    runs backward with autocast off.
//  - Only inputs that require grad make a checkpoint: when grad mode is off, or no input
//    requires grad, Checkpoint just calls fn (with grad mode as it is: captured parameters
//    then get an ordinary graph and correct gradients, but no memory is saved).
//  - Like PyTorch's re-entrant checkpoint, Grad() through a checkpoint cannot differentiate
//    with respect to fn's captured parameters, and accumulates into their .grad.
//  - Nesting works: inside the forward fn runs with grad off, so an inner Checkpoint just
//    calls its fn; in the recompute the inner one checkpoints in turn.
#pragma once

#include <functional>
#include <vector>

#include "worker/tensor/generator.h"
#include "worker/tensor/tensor.h"

namespace trainyard::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct CheckpointOptions {
  // Generators whose state the recompute replays and restores; empty means the default
  // generator only. Each must outlive the graph. Null entries are ignored.
  std::vector<Generator*> generators;
  // False skips the replay: the recompute then draws fresh numbers (and advances the
  // generators), which is only right for a fn without randomness.
  bool preserve_rng_state = true;
};

std::vector<Tensor> Checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options = {});

// One input, one output.
Tensor Checkpoint(std::function<Tensor(const Tensor&)> fn, const Tensor& input,
                  const CheckpointOptions& options = {});

}  // namespace trainyard::autograd
