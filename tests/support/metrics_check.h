// Checks a run's --metrics rows against the one schema (train/metrics.h).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/metrics.h"

namespace pylon::testing {

inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// Every row has the fields of every step (and of several ranks when world > 1, of GPUs when cuda:
// the GPU machines have NVML, so its fields too),
// val_loss only on the steps in `validated`, and nothing outside the schema.
inline void expect_rows_follow_schema(const std::vector<nlohmann::json>& rows, int world, bool cuda,
                                      const std::set<int64_t>& validated) {
  ASSERT_FALSE(rows.empty());
  for (const nlohmann::json& row : rows) {
    const int64_t step = row.at("step").get<int64_t>();
    std::set<std::string> expected;
    for (const MetricField& f : metrics_schema()) {
      const std::string when = f.when;
      if (when == "always" || (when == "world > 1" && world > 1) || ((when == "cuda" || when == "nvml") && cuda) ||
          (when == "validation" && validated.count(step)))
        expected.insert(f.name);
    }
    std::set<std::string> got;
    for (auto it = row.begin(); it != row.end(); ++it) got.insert(it.key());
    EXPECT_EQ(got, expected) << "step " << step << ": " << row.dump();
    EXPECT_EQ(row.at("world").get<int>(), world);
    EXPECT_GT(row.at("step_ms").get<double>(), 0.0);
    EXPECT_GT(row.at("tokens_per_s").get<double>(), 0.0);
    EXPECT_GT(row.at("peak_mem_bytes").get<int64_t>(), 0);
    if (world > 1) {
      const auto per_rank = row.at("peak_mem_bytes_per_rank").get<std::vector<int64_t>>();
      ASSERT_EQ(per_rank.size(), static_cast<size_t>(world));
      EXPECT_EQ(*std::max_element(per_rank.begin(), per_rank.end()), row.at("peak_mem_bytes").get<int64_t>());
    }
    if (cuda) {
      EXPECT_GT(row.at("energy_j").get<double>(), 0.0) << row.dump();
      EXPECT_GT(row.at("power_w").get<double>(), 0.0) << row.dump();
      EXPECT_GT(row.at("sm_clock_mhz").get<double>(), 0.0) << row.dump();
      const double capped = row.at("power_capped_frac").get<double>();
      EXPECT_TRUE(capped >= 0 && capped <= 1) << row.dump();
    }
  }
}

}  // namespace pylon::testing
