#include "worker/autograd/grad_mode.h"

namespace trainyard::autograd {
namespace {
thread_local bool tl_grad_enabled = true;
}

bool GradMode::IsEnabled() { return tl_grad_enabled; }
void GradMode::SetEnabled(bool enabled) { tl_grad_enabled = enabled; }

}  // namespace trainyard::autograd
