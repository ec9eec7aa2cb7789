// `pylon train --device cuda --nproc-per-node N` where it cannot run (CI: no GPU, or a build
// without CUDA): one clear line from the launcher before any rank starts, nothing hangs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/token_file.h"
#include "support/run_command.h"
#include "support/temp_dir.h"
#ifdef PYLON_HAVE_CUDA
#include "ops/cuda/runtime.h"
#endif

namespace pylon {
namespace {

bool have_gpu() {
#ifdef PYLON_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

TEST(FsdpGpuCli, TwoRanksWithoutAGpuFailCleanly) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is present: the GPU tests cover this";
  testing::TempDir tmp;
  std::vector<uint32_t> ids(5000, 7);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  const auto r = testing::run_pylon("train --device cuda --nproc-per-node 2 --vocab 64 --dim 32 --layers 1"
                                    " --heads 2 --batch 2 --seq 16 --steps 2 --dist-timeout 10 --data " +
                                    tmp.file("data.bin"));
  // The launcher checks before starting any rank: one line.
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
#ifdef PYLON_HAVE_CUDA
  EXPECT_NE(r.err.find("no CUDA device is visible"), std::string::npos) << r.err;
#else
  EXPECT_NE(r.err.find("this build has no CUDA backend"), std::string::npos) << r.err;
#endif
}

}  // namespace
}  // namespace pylon
