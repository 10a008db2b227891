// TODO(lead): temporary; delete when `deltaserve bench` is implemented. (`run` lives in
// run_command.cpp and `serve` in server/serve_command.cpp.)
#include <cstdio>

#include "cli/commands.h"

namespace deltaserve::cli {

int bench_main(int, char**) {
  std::fprintf(stderr, "deltaserve bench: not yet available\n");
  return 2;
}

}  // namespace deltaserve::cli
