// The SSE splitter of deltaserve-load: events split anywhere, CRLF and LF, comments, the
// line bound.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loadtest/sse_parser.h"

namespace deltaserve::loadtest {
namespace {

std::vector<std::string> feed_in_pieces(const std::string& text, size_t piece) {
  SseParser parser;
  std::vector<std::string> events;
  for (size_t i = 0; i < text.size(); i += piece) {
    EXPECT_TRUE(parser.feed(std::string_view(text).substr(i, piece), events));
  }
  EXPECT_EQ(parser.num_pending_bytes(), 0u);
  return events;
}

TEST(SseParser, SplitsEventsWhereverTheBytesBreak) {
  const std::string text = "data: {\"a\":1}\n\n: ping\n\ndata: [DONE]\r\n\r\n";
  for (size_t piece : {1u, 2u, 3u, 7u, 100u}) {
    const auto events = feed_in_pieces(text, piece);
    ASSERT_EQ(events.size(), 2u) << "piece " << piece;
    EXPECT_EQ(events[0], "{\"a\":1}");
    EXPECT_EQ(events[1], "[DONE]");
  }
}

TEST(SseParser, JoinsDataLinesAndSkipsOtherFields) {
  const auto events = feed_in_pieces("event: x\nid: 3\ndata: one\ndata:two\nretry: 5\n\n", 4);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "one\ntwo");
}

TEST(SseParser, LoneCarriageReturnsEndLines) {
  const auto events = feed_in_pieces("data: a\r\rdata: b\r\r", 1);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1], "b");
}

TEST(SseParser, ReportsAnUnfinishedEvent) {
  SseParser parser;
  std::vector<std::string> events;
  ASSERT_TRUE(parser.feed("data: {\"half\"", events));
  EXPECT_TRUE(events.empty());
  EXPECT_GT(parser.num_pending_bytes(), 0u);
}

TEST(SseParser, RejectsALineOverTheBound) {
  SseParser parser(16);
  std::vector<std::string> events;
  EXPECT_FALSE(parser.feed("data: " + std::string(64, 'x'), events));
}

}  // namespace
}  // namespace deltaserve::loadtest
