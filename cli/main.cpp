// deltaserve: one binary, three commands (serve, bench, inspect).
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace {

void print_usage() {
  std::fprintf(stderr,
               "usage: deltaserve <command> [options]\n"
               "  serve     run the OpenAI-compatible daemon\n"
               "  run       generate from a prompt once on the CPU engine (no server)\n"
               "  bench     print benchmark tables\n"
               "  inspect   print a model file's architecture, hyperparameters and tensors\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "inspect") return deltaserve::cli::inspect_main(argc - 1, argv + 1);
  if (command == "run") return deltaserve::cli::run_main(argc - 1, argv + 1);
#ifdef DELTASERVE_WITH_SERVER
  if (command == "serve") return deltaserve::cli::serve_main(argc - 1, argv + 1);
#else
  if (command == "serve") {
    std::fprintf(stderr, "deltaserve: this build has no server (configure with -DDELTASERVE_SERVER=ON)\n");
    return 2;
  }
#endif
  if (command == "bench") return deltaserve::cli::bench_main(argc - 1, argv + 1);
  std::fprintf(stderr, "deltaserve: unknown command '%s'\n", command.c_str());
  print_usage();
  return 2;
}
