#include "server/default_model.h"

#include <filesystem>
#include <system_error>
#include <vector>

namespace deltaserve::server {

std::string find_default_model() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  candidates.push_back(fs::path("models") / kDefaultModelFile);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path dir = exe.parent_path();
    for (int up = 0; up < 5 && !dir.empty(); ++up, dir = dir.parent_path()) {
      candidates.push_back(dir / "models" / kDefaultModelFile);
      candidates.push_back(dir / "share" / "deltaserve" / "models" / kDefaultModelFile);
      if (dir == dir.root_path()) break;
    }
  }
#ifdef DELTASERVE_SOURCE_DIR
  candidates.push_back(fs::path(DELTASERVE_SOURCE_DIR) / "models" / kDefaultModelFile);
#endif
  for (const fs::path& p : candidates)
    if (fs::is_regular_file(p, ec)) return p.string();
  return {};
}

}  // namespace deltaserve::server
