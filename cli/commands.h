// Entry points of the deltaserve subcommands; argv[0] is the command name.
#pragma once

namespace deltaserve::cli {

int inspect_main(int argc, char** argv);
int run_main(int argc, char** argv);
int serve_main(int argc, char** argv);
int bench_main(int argc, char** argv);

}  // namespace deltaserve::cli
