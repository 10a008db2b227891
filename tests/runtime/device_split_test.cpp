// runtime/device_split.h: --devices, --split and --split-layers parse into typed values or
// fail with a line naming the option; ranges balance by bytes and capacity, each device
// keeping at least one layer.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/device_split.h"

namespace deltaserve::runtime {
namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceList, ParsesEveryKind) {
  const std::vector<DeviceId> cpu = parse_device_list("cpu:0,cpu:1");
  ASSERT_EQ(cpu.size(), 2u);
  EXPECT_EQ(cpu[1], (DeviceId{DeviceKind::kCpu, 1}));
  EXPECT_EQ(parse_device_list("cpu"), (std::vector<DeviceId>{{DeviceKind::kCpu, 0}}));
  EXPECT_EQ(parse_device_list("cuda:1, cuda:0"),
            (std::vector<DeviceId>{{DeviceKind::kCuda, 1}, {DeviceKind::kCuda, 0}}));
  EXPECT_EQ(parse_device_list("hip:3")[0], (DeviceId{DeviceKind::kHip, 3}));
  EXPECT_EQ(device_name({DeviceKind::kCuda, 7}), "cuda:7");
}

TEST(DeviceList, RefusesWhatIsNotAList) {
  EXPECT_NE(error_of([] { parse_device_list("gpu:0,gpu:1"); }).find("--devices: 'gpu:0' is not a device"), std::string::npos);
  EXPECT_NE(error_of([] { parse_device_list("cpu:0,cpu:0"); }).find("cpu:0 is listed twice"), std::string::npos);
  EXPECT_NE(error_of([] { parse_device_list("cpu:0,cuda:0"); }).find("all devices must be of one kind"), std::string::npos);
  EXPECT_NE(error_of([] { parse_device_list("cuda"); }).find("needs a device index"), std::string::npos);
  EXPECT_NE(error_of([] { parse_device_list("cuda:x"); }).find("no valid device index"), std::string::npos);
  EXPECT_NE(error_of([] { parse_device_list("cpu:0,,cpu:1"); }).find("empty entry"), std::string::npos);
  EXPECT_NE(error_of([] { parse_device_list(""); }).find("empty entry"), std::string::npos);
}

TEST(SplitMode, NamesRoundTrip) {
  EXPECT_EQ(parse_split_mode("layers"), SplitMode::kLayers);
  EXPECT_EQ(parse_split_mode("replicas"), SplitMode::kReplicas);
  EXPECT_EQ(parse_split_mode(split_mode_name(SplitMode::kReplicas)), SplitMode::kReplicas);
  EXPECT_FALSE(parse_split_mode("tensor").has_value());
}

TEST(LayerSplitOverride, RangesAndCountsGiveTheSameRanges) {
  const std::vector<LayerRange> expected{{0, 1}, {1, 6}};
  EXPECT_EQ(resolve_layer_ranges(parse_layer_split("0-0,1-5", 2), 6), expected);
  EXPECT_EQ(resolve_layer_ranges(parse_layer_split("1,5", 2), 6), expected);
  EXPECT_TRUE(parse_layer_split("", 2).counts.empty());
}

TEST(LayerSplitOverride, RefusesBadRangesWithAReadableLine) {
  EXPECT_NE(error_of([] { parse_layer_split("0-2,3-5", 3); }).find("gives 2 entries for 3 devices"), std::string::npos);
  EXPECT_NE(error_of([] { parse_layer_split("0-2,4-5", 2); }).find("must start at layer 3"), std::string::npos);
  EXPECT_NE(error_of([] { parse_layer_split("1-2,3-5", 2); }).find("must start at layer 0"), std::string::npos);
  EXPECT_NE(error_of([] { parse_layer_split("0-2,3-1", 2); }).find("range '3-1' is empty"), std::string::npos);
  EXPECT_NE(error_of([] { parse_layer_split("0-2,3", 2); }).find("'3' is not a range FIRST-LAST"), std::string::npos);
  EXPECT_NE(error_of([] { parse_layer_split("0,6", 2); }).find("'0' is not a layer count >= 1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_layer_split("a,b", 2); }).find("is not a layer count"), std::string::npos);
  EXPECT_NE(error_of([] { resolve_layer_ranges(parse_layer_split("0-2,3-4", 2), 6); })
                .find("covers 5 layers but the model has 6 (layers 0-5)"),
            std::string::npos);
  EXPECT_NE(error_of([] { resolve_layer_ranges(parse_layer_split("3,4", 2), 6); }).find("covers 7 layers"),
            std::string::npos);
}

TEST(BalanceLayerRanges, EqualLayersSplitEvenlyAndHeadAndTailCount) {
  const std::vector<int64_t> layers(8, 100);
  const std::vector<double> two{1, 1};
  EXPECT_EQ(balance_layer_ranges(layers, 0, 0, two), (std::vector<LayerRange>{{0, 4}, {4, 8}}));
  // A big embedding on the first device moves layers to the second, a big LM head the other way.
  EXPECT_EQ(balance_layer_ranges(layers, 400, 0, two), (std::vector<LayerRange>{{0, 2}, {2, 8}}));
  EXPECT_EQ(balance_layer_ranges(layers, 0, 400, two), (std::vector<LayerRange>{{0, 6}, {6, 8}}));
  // Capacity 3:1 gives the first device three quarters.
  EXPECT_EQ(balance_layer_ranges(layers, 0, 0, std::vector<double>{3, 1}), (std::vector<LayerRange>{{0, 6}, {6, 8}}));
  // Every device keeps a layer, however lopsided the bytes.
  EXPECT_EQ(balance_layer_ranges(layers, 100000, 0, std::vector<double>{1, 1, 1}),
            (std::vector<LayerRange>{{0, 1}, {1, 2}, {2, 8}}));
  EXPECT_NE(error_of([&] { balance_layer_ranges(std::vector<int64_t>(2, 1), 0, 0, std::vector<double>{1, 1, 1}); })
                .find("needs at least as many layers"),
            std::string::npos);
  EXPECT_EQ(describe_layer_split(std::vector<DeviceId>{{DeviceKind::kCpu, 0}, {DeviceKind::kCpu, 1}},
                                 std::vector<LayerRange>{{0, 3}, {3, 6}}),
            "cpu:0[0-2],cpu:1[3-5]");
}

}  // namespace
}  // namespace deltaserve::runtime
