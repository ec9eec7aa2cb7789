// The world-of-one communicator: collectives reduce to copies.
#include "dist/communicator.h"

#include <cstring>

#include "core/error.h"

namespace pylon {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_gather(const float* in, float* out, size_t n) override { copy("all_gather", in, out, n); }
  void reduce_scatter_sum(const float* in, float* out, size_t n) override {
    copy("reduce_scatter", in, out, n);
  }
  void all_reduce_sum(float*, size_t) override { check("all_reduce"); }
  void all_reduce_sum(double*, size_t) override { check("all_reduce"); }
  void broadcast(void*, size_t, int root) override {
    check("broadcast");
    PYLON_ASSERT(root == 0, "broadcast root ", root, " in a world of 1");
  }
  void barrier() override { check("barrier"); }
  void abort() override { aborted_ = true; }

 private:
  void check(const char* op) const {
    PYLON_CHECK(!aborted_, "rank 0: collective ", op, " after abort()");
  }
  void copy(const char* op, const float* in, float* out, size_t n) const {
    check(op);
    if (n && in != out) std::memmove(out, in, n * sizeof(float));
  }
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator() {
  return std::make_unique<SingleRankCommunicator>();
}

}  // namespace pylon
