// pylon roofline on the Nsight Compute exports users make (tests/profile/data/ncu_exports, made on
// the H200 by bench/ncu_exports_device.sh: the same four kernels exported with Pylon's --metrics
// list, the default sections, --set full, --section SpeedOfLight, --page details, and a .ncu-rep
// read back with ncu --import). Each gives the same verdicts as Pylon's own list, its SM% and DRAM%
// within 3 points (each export is its own replay of the kernels), and says what it lacks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "profile/ncu_csv.h"
#include "profile/roofline.h"
#include "support/run_command.h"

namespace pylon::profile {
namespace {

const std::string kDir = std::string(PYLON_GOLDEN_DIR) + "/../profile/data/ncu_exports/";

std::map<std::string, KernelVerdict> verdicts(const std::string& file) {
  const auto kernels = read_ncu_csv(kDir + file);
  std::map<std::string, KernelVerdict> out;
  for (const KernelVerdict& v : judge_all(kernels, datasheet_ceilings("NVIDIA H200"))) out[v.k.name] = v;
  return out;
}

TEST(NcuExports, EveryKindGivesTheVerdictsOfPylonsOwnList) {
  const auto reference = verdicts("pylon_metrics.csv");
  ASSERT_EQ(reference.size(), 4u);
  for (const char* file : {"default_raw.csv", "sol_raw.csv", "full_raw.csv", "import_raw.csv", "default_details.csv",
                           "import_details.csv"}) {
    SCOPED_TRACE(file);
    const auto got = verdicts(file);
    ASSERT_EQ(got.size(), reference.size());
    for (const auto& [name, ref] : reference) {
      ASSERT_TRUE(got.count(name)) << name;
      const KernelVerdict& v = got.at(name);
      EXPECT_EQ(v.bound, ref.bound) << name;
      EXPECT_NEAR(v.k.sm_pct, ref.k.sm_pct, 3) << name;
      EXPECT_NEAR(v.k.dram_pct, ref.k.dram_pct, 3) << name;
      EXPECT_NEAR(v.k.seconds, ref.k.seconds, 0.25 * ref.k.seconds) << name;  // replays differ in time a little
      EXPECT_EQ(v.k.launches, ref.k.launches) << name;
    }
  }
}

// --set full carries the FP32 counters as rates per cycle; times the cycles they are the counts.
TEST(NcuExports, FullSetFp32FlopsFromRatesMatchTheCounts) {
  const auto reference = verdicts("pylon_metrics.csv");
  for (const char* file : {"full_raw.csv", "import_raw.csv"}) {
    const auto got = verdicts(file);
    for (const auto& [name, ref] : reference) {
      const double want = ref.k.fp32_flop, have = got.at(name).k.fp32_flop;
      ASSERT_GE(want, 0) << name;
      EXPECT_NEAR(have, want, 0.01 * want + 1e3) << file << " " << name;
      EXPECT_NEAR(got.at(name).k.tensor_flop, ref.k.tensor_flop, 0.01 * ref.k.tensor_flop + 1e3) << file << " " << name;
      EXPECT_NEAR(got.at(name).k.dram_bytes, ref.k.dram_bytes, 0.1 * ref.k.dram_bytes) << file << " " << name;
    }
  }
}

TEST(NcuExports, ExportsWithoutCountersSaySoAndHowToAddThem) {
  for (const char* file : {"pylon_metrics.csv", "full_raw.csv", "import_raw.csv"})
    EXPECT_EQ(missing_counters_note(read_ncu_csv(kDir + file)), "") << file;
  for (const char* file : {"default_raw.csv", "sol_raw.csv", "default_details.csv"}) {
    const std::string note = missing_counters_note(read_ncu_csv(kDir + file));
    EXPECT_NE(note.find("FLOP counters"), std::string::npos) << file << ": " << note;
    EXPECT_NE(note.find("--set full"), std::string::npos) << file << ": " << note;
  }
  const auto r = pylon::testing::run_pylon("roofline --ncu-csv " + kDir + "default_details.csv --device 'NVIDIA H200'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("note: this export has no FLOP counters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flash_attention_forward_wgmma"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace pylon::profile
