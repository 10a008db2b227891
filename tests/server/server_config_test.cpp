// Configuration: JSON file < flags, validation messages that name the option, and the
// shipped config/deltaserve.json holding every option.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "server/server_config.h"

namespace deltaserve::server {
namespace {

ServeInvocation load(std::vector<std::string> args) {
  args.insert(args.begin(), "serve");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return load_server_config(static_cast<int>(argv.size()), argv.data());
}

std::string config_error(std::vector<std::string> args) {
  try {
    load(std::move(args));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string write_temp(const std::string& text) {
  char path[] = "/tmp/deltaserve_config_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(ServerConfig, FlagsOverrideTheFile) {
  const std::string file = write_temp(R"({"port": 9000, "max_streams": 4, "vllm_metrics": true,
                                          "api_key": ["a", "b"], "model": "m.gguf"})");
  const ServeInvocation inv = load({"--config", file, "--port", "9100"});
  EXPECT_EQ(inv.config.port, 9100);
  EXPECT_EQ(inv.config.max_streams, 4);
  EXPECT_TRUE(inv.config.vllm_metrics);
  EXPECT_EQ(inv.config.api_keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(load({"--config", file, "--vllm-metrics=false"}).config.vllm_metrics, false);
  EXPECT_EQ(load({"--config", file, "--no-vllm-metrics"}).config.vllm_metrics, false);
  EXPECT_EQ(load({"--fake-engine", "--no-prefix-cache"}).config.prefix_cache, false);
  EXPECT_EQ(load({"--fake-engine"}).config.prefix_cache, true);
  EXPECT_EQ(load({"--config", file, "--api-key", "x,y"}).config.api_keys,
            (std::vector<std::string>{"x", "y"}));
  std::remove(file.c_str());
}

TEST(ServerConfig, ErrorsNameTheOption) {
  EXPECT_NE(config_error({"--fake-engine", "--port", "70000"}).find("--port"), std::string::npos);
  try {
    validate_config(ServerConfig{});  // no model, no fake engine
    ADD_FAILURE() << "no error without a model";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--model"), std::string::npos);
  }
  EXPECT_NE(config_error({"--fake-engine", "--reasoning-field", "x"}).find("--reasoning-field"), std::string::npos);
  EXPECT_NE(config_error({"--fake-engine", "--default-chat-template-kwargs", "[1]"})
                .find("--default-chat-template-kwargs"), std::string::npos);
  const std::string unknown = write_temp(R"({"prot": 1})");
  EXPECT_NE(config_error({"--fake-engine", "--config", unknown}).find("unknown option 'prot'"), std::string::npos);
  const std::string typed = write_temp(R"({"port": "80"})");
  EXPECT_NE(config_error({"--fake-engine", "--config", typed}).find("'port' must be an integer"), std::string::npos);
  const std::string broken = write_temp("{");
  EXPECT_NE(config_error({"--fake-engine", "--config", broken}).find("not valid JSON"), std::string::npos);
  for (const std::string& f : {unknown, typed, broken}) std::remove(f.c_str());
}

TEST(ServerConfig, StatePrecisionIsF32OrBf16) {
  EXPECT_EQ(load({"--fake-engine"}).config.state_precision, "f32");
  EXPECT_EQ(load({"--fake-engine", "--state-precision", "bf16"}).config.state_precision, "bf16");
  const std::string file = write_temp(R"({"state_precision": "bf16"})");
  EXPECT_EQ(load({"--fake-engine", "--config", file}).config.state_precision, "bf16");
  EXPECT_EQ(load({"--fake-engine", "--config", file, "--state-precision", "f32"}).config.state_precision, "f32");
  const std::string error = config_error({"--fake-engine", "--state-precision", "fp16"});
  EXPECT_NE(error.find("--state-precision"), std::string::npos) << error;
  EXPECT_NE(error.find("bf16, f32"), std::string::npos) << error;
  EXPECT_NE(error.find("'fp16'"), std::string::npos) << error;
  std::remove(file.c_str());
}

TEST(ServerConfig, MatvecIsAutoFmaTensorOrStaged) {
  EXPECT_EQ(load({"--fake-engine"}).config.matvec, "auto");
  EXPECT_EQ(load({"--fake-engine", "--matvec", "tensor"}).config.matvec, "tensor");
  EXPECT_EQ(load({"--fake-engine", "--matvec", "staged"}).config.matvec, "staged");
  const std::string file = write_temp(R"({"matvec": "fma"})");
  EXPECT_EQ(load({"--fake-engine", "--config", file}).config.matvec, "fma");
  EXPECT_EQ(load({"--fake-engine", "--config", file, "--matvec", "auto"}).config.matvec, "auto");
  const std::string error = config_error({"--fake-engine", "--matvec", "cuda"});
  EXPECT_NE(error.find("--matvec"), std::string::npos) << error;
  EXPECT_NE(error.find("'cuda'"), std::string::npos) << error;
  std::remove(file.c_str());
}

TEST(ServerConfig, GdnPrefillIsAutoRecurrentOrChunked) {
  EXPECT_EQ(load({"--fake-engine"}).config.gdn_prefill, "auto");
  EXPECT_EQ(load({"--fake-engine", "--gdn-prefill", "recurrent"}).config.gdn_prefill, "recurrent");
  const std::string file = write_temp(R"({"gdn_prefill": "chunked"})");
  EXPECT_EQ(load({"--fake-engine", "--config", file}).config.gdn_prefill, "chunked");
  EXPECT_EQ(load({"--fake-engine", "--config", file, "--gdn-prefill", "auto"}).config.gdn_prefill, "auto");
  EXPECT_EQ(load({"--fake-engine", "--config", file}).config.to_json().at("gdn_prefill"), "chunked");
  const std::string error = config_error({"--fake-engine", "--gdn-prefill", "wy"});
  EXPECT_NE(error.find("--gdn-prefill"), std::string::npos) << error;
  EXPECT_NE(error.find("'wy'"), std::string::npos) << error;
  std::remove(file.c_str());
}

TEST(ServerConfig, GpuStepGraphsIsAutoOnOrOff) {
  EXPECT_EQ(load({"--fake-engine"}).config.gpu_step_graphs, "auto");
  EXPECT_EQ(load({"--fake-engine", "--gpu-step-graphs", "off"}).config.gpu_step_graphs, "off");
  const std::string file = write_temp(R"({"gpu_step_graphs": "on"})");
  EXPECT_EQ(load({"--fake-engine", "--config", file}).config.gpu_step_graphs, "on");
  EXPECT_EQ(load({"--fake-engine", "--config", file, "--gpu-step-graphs", "auto"}).config.gpu_step_graphs, "auto");
  EXPECT_EQ(load({"--fake-engine", "--config", file}).config.to_json().at("gpu_step_graphs"), "on");
  const std::string error = config_error({"--fake-engine", "--gpu-step-graphs", "eager"});
  EXPECT_NE(error.find("--gpu-step-graphs"), std::string::npos) << error;
  EXPECT_NE(error.find("'eager'"), std::string::npos) << error;
  std::remove(file.c_str());
}

TEST(ServerConfig, BadFlagExitsWithUsage) {
  const ServeInvocation inv = load({"--no-such-flag"});
  EXPECT_TRUE(inv.exit_now);
  EXPECT_NE(inv.exit_code, 0);
}

TEST(ServerConfig, BadFlagExitsWithTheConfigStatus) {
  EXPECT_EQ(load({"--no-such-flag"}).exit_code, kExitConfig);
  EXPECT_EQ(load({"--port", "notanumber"}).exit_code, kExitConfig);
}

TEST(ServerConfig, DumpedConfigRedactsApiKeys) {
  ServerConfig c;
  c.api_keys = {"sk-secret-one", "sk-secret-two"};
  const std::string dump = c.to_json().dump();
  EXPECT_EQ(dump.find("sk-secret"), std::string::npos) << dump;
  EXPECT_EQ(c.to_json()["api_key"], nlohmann::ordered_json::array({kRedacted, kRedacted}));
}

// A dump fed back as the config carries the placeholder, never a key: refused, so that
// 'Bearer <redacted>' cannot become an accepted key.
TEST(ServerConfig, RedactedPlaceholderIsNoApiKey) {
  ServerConfig c;
  c.fake_engine = true;
  c.api_keys = {"sk-one"};
  const std::string dump = write_temp(c.to_json().dump());
  EXPECT_NE(config_error({"--fake-engine", "--config", dump}).find("placeholder"), std::string::npos);
  EXPECT_NE(config_error({"--fake-engine", "--api-key", kRedacted}).find("placeholder"), std::string::npos);
  std::remove(dump.c_str());
}

// A key file that yields no key (empty, blank lines, a directory) would serve every route
// without authentication: a config error, not an open server.
TEST(ServerConfig, ApiKeyFileWithoutKeysIsAnError) {
  const std::string empty = write_temp("");
  const std::string blank = write_temp("\n  \n\r\n");
  for (const std::string& f : {empty, blank, std::string("/tmp")}) {
    EXPECT_NE(config_error({"--fake-engine", "--api-key-file", f}).find("--api-key-file"), std::string::npos) << f;
  }
  const std::string keys = write_temp("sk-a\n\nsk-b \n");
  EXPECT_EQ(load({"--fake-engine", "--api-key-file", keys}).config.api_keys, (std::vector<std::string>{"sk-a", "sk-b"}));
  for (const std::string& f : {empty, blank, keys}) std::remove(f.c_str());
}

// A directory given as a file aborted the process (the JSON parser read the stream buffer,
// whose underflow throws on EISDIR); it is the option's error.
TEST(ServerConfig, DirectoryGivenAsAFileIsAnError) {
  EXPECT_NE(config_error({"--fake-engine", "--config", "/tmp"}).find("--config: cannot read '/tmp'"), std::string::npos);
  EXPECT_NE(config_error({"--fake-engine", "--api-key-file", "/tmp"}).find("--api-key-file"), std::string::npos);
}

// Values the engine refuses at load (after the port opened, exit status 1) are refused here.
TEST(ServerConfig, EngineLimitsTheSchedulerRefusesAreConfigErrors) {
  EXPECT_NE(config_error({"--fake-engine", "--max-waiting", "0"}).find("--max-waiting"), std::string::npos);
  EXPECT_EQ(load({"--fake-engine", "--max-waiting", "1"}).config.max_waiting, 1);
  EXPECT_NE(config_error({"--fake-engine", "--context-tokens", "1"}).find("--context-tokens"), std::string::npos);
  EXPECT_EQ(load({"--fake-engine", "--context-tokens", "2"}).config.context_tokens, 2);
  EXPECT_NE(config_error({"--fake-engine", "--max-streams", "16", "--max-batched-tokens", "8"}).find("--max-batched-tokens"),
            std::string::npos);
  EXPECT_EQ(load({"--fake-engine", "--max-streams", "8", "--max-batched-tokens", "8"}).config.max_streams, 8);
  EXPECT_EQ(load({"--fake-engine", "--max-batched-tokens", "8"}).config.max_streams, 0);  // auto: sized to fit
}

TEST(ServerConfig, HelpListsTheExitStatuses) {
  const std::string help = kExitCodesHelp;
  for (const char* needle : {"0 stopped", "1 the model", "2 invalid", "3 the address", "128+N"}) {
    EXPECT_NE(help.find(needle), std::string::npos) << needle;
  }
}

TEST(ServerConfig, ShippedConfigHoldsEveryOption) {
  std::ifstream in("config/deltaserve.json");
  ASSERT_TRUE(in) << "run from the repository root";
  const nlohmann::json shipped = nlohmann::json::parse(in);
  const nlohmann::ordered_json all = ServerConfig().to_json();
  for (auto it = all.begin(); it != all.end(); ++it) {
    EXPECT_TRUE(shipped.contains(it.key())) << "config/deltaserve.json lacks " << it.key();
  }
  ServerConfig config;
  EXPECT_NO_THROW(apply_config_json(config, shipped, "config/deltaserve.json"));
  config.fake_engine = true;
  EXPECT_NO_THROW(validate_config(config));
}

TEST(ServerConfig, DevicesAndSplit) {
  const ServeInvocation inv = load({"--fake-engine", "--split", "replicas", "--devices", "cpu:0,cpu:1"});
  EXPECT_EQ(inv.config.devices, (std::vector<std::string>{"cpu:0", "cpu:1"}));
  EXPECT_EQ(inv.config.split, "replicas");
  const nlohmann::ordered_json dumped = inv.config.to_json();
  EXPECT_EQ(dumped["devices"], nlohmann::json::array({"cpu:0", "cpu:1"}));
  EXPECT_EQ(dumped["split"], "replicas");
  EXPECT_EQ(load({"--fake-engine", "--split", "replicas", "--devices", "cuda:0", "--devices", "cuda:3"}).config.devices.size(), 2u);
  EXPECT_TRUE(load({"--fake-engine"}).config.devices.empty());
  // The list's own errors are BadDevicesAndRangesAreConfigErrors' cases; these hold for replicas too.
  for (const auto& [args, flag] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--split", "replicas", "--devices", "cpu:0,cuda:1"}, "all devices must be of one kind"},
           {{"--split", "replicas", "--devices", "cpu:0,cpu:0"}, "twice"},
           {{"--split", "replicas", "--devices", "gpu0,gpu1"}, "is not a device"},
           {{"--device", "cpu", "--split", "replicas", "--devices", "cpu:0,cpu:1"}, "give one of them"},
           {{"--split", "rows", "--devices", "cpu:0,cpu:1"}, "--split"}}) {
    std::vector<std::string> all{"--fake-engine"};
    all.insert(all.end(), args.begin(), args.end());
    EXPECT_NE(config_error(all).find(flag), std::string::npos) << args.back() << ": " << config_error(all);
  }
}

}  // namespace
}  // namespace deltaserve::server

namespace deltaserve::server {
namespace {

TEST(ServerConfig, DevicesSplitAndLayerRangesAreTyped) {
  const ServeInvocation inv = load({"--model", "m.gguf", "--devices", "cpu:0,cpu:1", "--split", "layers", "--split-layers", "0-0,1-7"});
  const std::vector<runtime::DeviceId> devices = configured_devices(inv.config);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1], (runtime::DeviceId{runtime::DeviceKind::kCpu, 1}));
  EXPECT_EQ(inv.config.split_layers, "0-0,1-7");
  const nlohmann::ordered_json dumped = inv.config.to_json();
  EXPECT_EQ(dumped["devices"], nlohmann::json::array({"cpu:0", "cpu:1"}));
  EXPECT_EQ(dumped["split"], "layers");
  EXPECT_EQ(dumped["split_layers"], "0-0,1-7");
  // The JSON file may give the list as one string.
  const std::string file = write_temp(R"({"model": "m.gguf", "devices": "cpu:0,cpu:1", "split_layers": "3,5"})");
  EXPECT_EQ(configured_devices(load({"--config", file}).config).size(), 2u);
  std::remove(file.c_str());
  // Default: one device, --device decides.
  EXPECT_TRUE(configured_devices(load({"--model", "m.gguf"}).config).empty());
}

TEST(ServerConfig, BadDevicesAndRangesAreConfigErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--devices", "cpu:0,cpu:0"}, "cpu:0 is listed twice"},
      {{"--devices", "cpu:0,npu:1"}, "'npu:1' is not a device"},
      {{"--devices", "cuda:0,hip:1"}, "all devices must be of one kind"},
      {{"--devices", "cpu:0,cpu:1", "--split", "pipeline"}, "--split must be one of layers, replicas"},
      {{"--devices", "cuda:0,cuda:1"}, "waits for a host with two GPUs"},
      {{"--devices", "cpu:0,cpu:1", "--split-layers", "0-3,5-7"}, "must start at layer 4"},
      {{"--devices", "cpu:0,cpu:1", "--split-layers", "1,2,3"}, "gives 3 entries for 2 devices"},
      {{"--devices", "cpu:0,cpu:1", "--split-layers", "4,0"}, "'0' is not a layer count >= 1"},
      {{"--split-layers", "4,4"}, "--split-layers needs --devices"},
      {{"--devices", "cpu:0,cpu:1", "--split", "replicas", "--split-layers", "4,4"}, "--split-layers needs --split layers"},
      {{"--device", "cuda:0", "--devices", "cuda:0"}, "give one of them"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> full{"--model", "m.gguf"};
    full.insert(full.end(), args.begin(), args.end());
    EXPECT_NE(config_error(full).find(message), std::string::npos) << args[1] << ": " << config_error(full);
  }
}

}  // namespace
}  // namespace deltaserve::server
