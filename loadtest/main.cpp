// deltaserve-load: the load generator and soak tool. See load_driver.h for the run's
// phases and load_options.h for the command line.
#include <iostream>

#include "loadtest/load_driver.h"
#include "loadtest/soak_mix.h"

int main(int argc, char** argv) {
  using namespace deltaserve::loadtest;
  const ParsedOptions parsed = parse_load_options(argc, argv);
  if (parsed.exit_now) return parsed.exit_code;
  std::string error;
  const std::optional<ServerUrl> url = parse_server_url(parsed.options.url, error);
  if (!url) {
    std::cerr << "deltaserve-load: --url: " << error << "\n";
    return 2;
  }
  try {
    // Bad input files and strings fail here, before the run (not inside a coroutine).
    if (parsed.options.soak) (void)parse_mix_weights(parsed.options.mix);
    const PromptSource prompts_check(parsed.options, "");
    LoadDriver driver(parsed.options, *url);
    return driver.run();
  } catch (const std::exception& e) {  // bad --prompts file or --mix string
    std::cerr << "deltaserve-load: " << e.what() << "\n";
    return 2;
  }
}
