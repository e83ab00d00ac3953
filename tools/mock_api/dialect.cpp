#include "mock_api/dialect.hpp"

namespace laneq::mock {

std::size_t content_text_bytes(const nlohmann::json& content, std::string* text_out) {
  if (content.is_null()) return 0;
  if (content.is_string()) {
    const auto& s = content.get_ref<const std::string&>();
    if (text_out) *text_out = s;
    return s.size();
  }
  if (!content.is_array()) throw BadRequest("message content must be a string or an array of content blocks");
  std::size_t bytes = 0;
  if (text_out) text_out->clear();
  for (const auto& block : content) {
    if (!block.is_object()) throw BadRequest("each content block must be an object");
    const auto text = block.find("text");
    if (text == block.end()) continue;
    if (!text->is_string()) throw BadRequest("content block text must be a string");
    const auto& s = text->get_ref<const std::string&>();
    bytes += s.size();
    if (text_out) *text_out += s;
  }
  return bytes;
}

}  // namespace laneq::mock
