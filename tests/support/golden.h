// The seed_small golden set (tests/golden/seed_small, made by tests/golden/make_golden.py: its tokens,
// initial weights, PyTorch's first-step gradients and updated weights, and expected.json) and the
// flags of the small seed model it was made with, for the tests that run `pylon` on them.
#pragma once

#include <string>

namespace pylon::testing {

inline const std::string kGolden = std::string(PYLON_GOLDEN_DIR) + "/seed_small";
inline const std::string kSeedModel = "--preset seed --vocab 97 --dim 32 --layers 2 --heads 4";

}  // namespace pylon::testing
