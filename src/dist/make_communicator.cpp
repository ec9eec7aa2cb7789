// Picks the communicator for a job: none needed for one rank, Gloo for several CPU ranks.
#include <memory>

#include "core/error.h"
#include "dist/gloo_communicator.h"

namespace pylon {

std::unique_ptr<Communicator> make_communicator(const DistEnv& env, std::chrono::milliseconds timeout) {
  if (env.world == 1) return make_single_rank_communicator();
#ifdef PYLON_HAVE_GLOO
  return std::make_unique<GlooCommunicator>(env, timeout);
#else
  (void)timeout;
  throw Error("several CPU ranks need Gloo: apt install libgloo-dev and rebuild");
#endif
}

}  // namespace pylon
