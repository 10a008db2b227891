#include "server/request_json.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/json_nesting_scanner.h"

namespace deltaserve::server {
namespace {

// Objects with this many keys get a hash index; smaller ones are searched in place.
constexpr size_t kIndexFromKeys = 16;

// nlohmann's SAX interface, building a RequestJson. Invariant: each frame's value is the
// last element of its parent, and a parent only grows once that frame is closed, so the
// pointers held in frames_ stay valid (the same scheme as nlohmann's own DOM builder).
class OrderedBuilder {
 public:
  using Json = RequestJson;

  explicit OrderedBuilder(const JsonLimits& limits) : limits_(limits) {}

  bool null() { return counted() && put(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return counted() && put(Json(v)) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return counted() && put(Json(v)) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return counted() && put(Json(v)) != nullptr; }
  bool number_float(Json::number_float_t v, const Json::string_t&) {
    return counted() && put(Json(v)) != nullptr;
  }
  bool string(Json::string_t& v) { return counted() && put(Json(std::move(v))) != nullptr; }
  bool binary(Json::binary_t& v) { return counted() && put(Json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool key(Json::string_t& k) {
    frames_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_array() { return close(); }
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& e) {
    error_ = e.what();
    return false;
  }

  Json& root() { return root_; }
  const std::string& error() const { return error_; }
  const std::optional<ApiError>& limit_error() const { return limit_error_; }

 private:
  using Members = Json::object_t::Container;  // the ordered map's (key, value) vector

  struct Frame {
    Json* value = nullptr;
    std::string key;                                // the pending key (objects)
    std::unordered_map<std::string, size_t> index;  // key -> member (large objects)
  };

  // Counts one more value; false (the parse stops) once there are more than allowed.
  bool counted() {
    if (++num_elements_ <= limits_.max_elements) return true;
    ApiError e = invalid_value("body", "the JSON body has more than " + std::to_string(limits_.max_elements) +
                                           " values (limit --max-json-elements).");
    e.code = "json_too_large";
    limit_error_ = std::move(e);
    return false;
  }

  // Checked before anything is allocated for the new level.
  bool open(Json&& empty) {
    if (static_cast<int64_t>(frames_.size()) >= limits_.max_depth) {
      limit_error_ = JsonNestingScanner(limits_.max_depth).too_deep();
      return false;
    }
    if (!counted()) return false;
    Json* slot = put(std::move(empty));
    frames_.push_back(Frame{slot, {}, {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  // Stores a value where the parser is (root, array element, or the pending key's member).
  Json* put(Json&& value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Frame& frame = frames_.back();
    if (frame.value->is_array()) {
      Json::array_t& items = frame.value->get_ref<Json::array_t&>();
      items.push_back(std::move(value));
      return &items.back();
    }
    Members& members = frame.value->get_ref<Json::object_t&>();
    const size_t at = find(frame, members);
    if (at < members.size()) {  // a duplicate key: the last value wins, in the first's place
      members[at].second = std::move(value);
      return &members[at].second;
    }
    members.emplace_back(std::move(frame.key), std::move(value));
    if (!frame.index.empty()) frame.index.emplace(members.back().first, members.size() - 1);
    return &members.back().second;
  }

  // Index of the pending key among the members, or members.size().
  static size_t find(Frame& frame, const Members& members) {
    if (members.size() < kIndexFromKeys) {
      for (size_t i = 0; i < members.size(); ++i) {
        if (members[i].first == frame.key) return i;
      }
      return members.size();
    }
    if (frame.index.empty()) {
      for (size_t i = 0; i < members.size(); ++i) frame.index.emplace(members[i].first, i);
    }
    const auto it = frame.index.find(frame.key);
    return it == frame.index.end() ? members.size() : it->second;
  }

  JsonLimits limits_;
  int64_t num_elements_ = 0;
  Json root_;
  std::vector<Frame> frames_;
  std::string error_;
  std::optional<ApiError> limit_error_;
};

}  // namespace

RequestJson parse_request_json(std::string_view text, const JsonLimits& limits) {
  OrderedBuilder builder(limits);
  bool ok = false;
  try {
    ok = RequestJson::sax_parse(text.begin(), text.end(), &builder);
  } catch (const nlohmann::json::exception& e) {
    throw ApiException{invalid_json(e.what())};
  }
  if (builder.limit_error()) throw ApiException{*builder.limit_error()};
  if (!ok) throw ApiException{invalid_json(builder.error())};
  return std::move(builder.root());
}

}  // namespace deltaserve::server
