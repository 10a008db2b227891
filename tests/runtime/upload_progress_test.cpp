#include "runtime/upload_progress.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deltaserve::runtime {
namespace {

TEST(UploadProgress, OneLinePerStepCrossedAndTheLastWithTheRate) {
  std::vector<std::string> lines;
  UploadProgress p("weights", 4'000'000'000ull, 4, [&](const std::string& l) { lines.push_back(l); });
  p.add(500'000'000);  // 12.5%: nothing yet
  EXPECT_TRUE(lines.empty());
  p.add(1'600'000'000);  // 52.5%: crosses 25% and 50%
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "weights:  25% (1.00 of 4.00 GB)");
  EXPECT_EQ(lines[1], "weights:  50% (2.00 of 4.00 GB)");
  p.add(10'000'000'000ull);  // past the end: clamped, 75% and 100%
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2], "weights:  75% (3.00 of 4.00 GB)");
  EXPECT_EQ(lines[3].rfind("weights: 100% (4.00 GB) in ", 0), 0u) << lines[3];
  EXPECT_EQ(p.done_bytes(), 4'000'000'000ull);
  p.add(1);
  EXPECT_EQ(lines.size(), 4u);  // nothing after 100%
}

TEST(UploadProgress, NothingForAnEmptyCopyOrWithoutASink) {
  std::vector<std::string> lines;
  UploadProgress empty("weights", 0, 10, [&](const std::string& l) { lines.push_back(l); });
  empty.add(100);
  EXPECT_TRUE(lines.empty());
  UploadProgress silent("weights", 100, 10, nullptr);
  silent.add(100);
  EXPECT_EQ(silent.done_bytes(), 100u);
}

}  // namespace
}  // namespace deltaserve::runtime
