// --split replicas: one engine per device in --devices, each built as the one-device daemon
// builds its engine (load_engine_model, or load_fake_model with --fake-engine), behind a
// ReplicaEngine. The first replica's codec serves all (the same model gives the same
// tokenizer and template); each replica keeps its own resources. The weights are read once
// per replica: a GGUF file is mapped, so CPU replicas share its pages; each GPU uploads its own copy.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "server/model_loader.h"
#include "server/replica_engine.h"

namespace deltaserve::server {
namespace {

// "cpu:1" -> "cpu" (the CPU backend has no index: the replicas are its separate instances);
// "cuda:1" and "hip:1" stay.
std::string backend_device(const std::string& device) {
  return device.rfind("cpu", 0) == 0 ? "cpu" : device;
}

struct Replicas {
  std::vector<LoadedModel> models;  // destroyed after the router (LoadedModel::engine first)
};

}  // namespace

LoadedModel load_replicas(const ServerConfig& config, const std::function<scheduler::EngineObserver*(int32_t)>& observer_of,
                          RouteObserver* routes) {
  const std::vector<runtime::DeviceId> devices = configured_devices(config);
  const auto num_engines = static_cast<int32_t>(devices.size());
  auto replicas = std::make_shared<Replicas>();
  std::vector<ReplicaEngine::Replica> members;
  LoadedModel loaded;
  for (int32_t i = 0; i < num_engines; ++i) {
    const std::string device = runtime::device_name(devices[static_cast<size_t>(i)]);
    ServerConfig one = config;
    one.devices.clear();
    one.device = backend_device(device);
    // CPU replicas share the cores: each gets its part unless --cpu-threads says otherwise.
    if (one.device == "cpu" && config.cpu_threads == 0)
      one.cpu_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / num_engines);
    LoadedModel model = config.fake_engine ? load_fake_model(one, observer_of(i)) : load_engine_model(one, observer_of(i));
    model.limits.device = device;
    spdlog::info("engine {} on {}: {} streams, {} KV blocks", i, device, model.limits.max_streams, model.limits.num_kv_blocks);
    members.push_back({model.engine.get(), model.limits.max_streams});
    loaded.replica_limits.push_back(model.limits);
    if (i == 0) {
      loaded.limits = model.limits;
      loaded.codec = std::move(model.codec);
    } else {
      EngineLimits& sum = loaded.limits;
      sum.max_streams += model.limits.max_streams;
      sum.max_waiting += model.limits.max_waiting;
      sum.num_kv_blocks += model.limits.num_kv_blocks;
      sum.kv_bytes += model.limits.kv_bytes;
      sum.state_bytes += model.limits.state_bytes;
      sum.device += "," + device;
    }
    replicas->models.push_back(std::move(model));
  }
  loaded.limits.num_engines = num_engines;
  RoutePolicy policy;
  // A prefix shorter than one KV block is not worth a detour; the gap scales with the engines'
  // size so a busy daemon still keeps conversations where their cache is.
  policy.min_prefix_tokens = loaded.limits.kv_block_tokens;
  policy.max_load_gap = std::max(2, loaded.replica_limits.front().max_streams / 4);
  loaded.engine = std::make_unique<ReplicaEngine>(std::move(members), policy, routes);
  loaded.resources = replicas;
  return loaded;
}

}  // namespace deltaserve::server
