#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/schedule.h"

namespace pylon {
namespace {

TEST(Schedule, WarmupThenConstant) {
  ScheduleConfig s{LrSchedule::constant, 1.0f, 4, 0.1f};
  EXPECT_FLOAT_EQ(lr_at(s, 0, 10), 0.25f);
  EXPECT_FLOAT_EQ(lr_at(s, 3, 10), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(s, 9, 10), 1.0f);
}

TEST(Schedule, CosineDecaysToFloor) {
  ScheduleConfig s{LrSchedule::cosine, 2.0f, 2, 0.1f};
  EXPECT_FLOAT_EQ(lr_at(s, 1, 12), 2.0f);   // end of warmup
  EXPECT_FLOAT_EQ(lr_at(s, 2, 12), 2.0f);   // progress 0
  EXPECT_NEAR(lr_at(s, 7, 12), 1.1f, 1e-6);  // progress ½: midway between 2 and 0.2
  EXPECT_NEAR(lr_at(s, 12, 12), 0.2f, 1e-6);
}

TEST(Schedule, UnknownNameIsAnError) { EXPECT_THROW(parse_lr_schedule("linear"), Error); }

}  // namespace
}  // namespace pylon
