#define BOOST_TEST_MODULE cpu_plugin
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tandem/backend.hpp"
#include "tandem/config.hpp"
#include "tandem/logger.hpp"
#include "tandem/plugin_abi.hpp"

// backend.cpu.so loaded the way the host loads it: dlopen, the one exported symbol, the
// descriptor's factory, dynamic_cast to the interface.
using namespace tandem;

namespace {

const plugin_descriptor* load_descriptor() {
  const char* dir = std::getenv("TANDEM_PLUGIN_PATH");
  BOOST_TEST_REQUIRE(dir != nullptr);
  const std::string path = (std::filesystem::path(dir) / "cpu" / "backend.cpu.so").string();
  // Never unloaded: objects the plugin created may outlive this function.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  BOOST_TEST_REQUIRE(lib != nullptr, "dlopen " << path << ": " << dlerror());
  auto* entry = reinterpret_cast<const plugin_descriptor* (*)()>(
      dlsym(lib, TANDEM_PLUGIN_ENTRY_SYMBOL));
  BOOST_TEST_REQUIRE(entry != nullptr);
  return entry();
}

}  // namespace

BOOST_AUTO_TEST_CASE(descriptor_declares_backend_cpu) {
  const plugin_descriptor* d = load_descriptor();
  BOOST_TEST(d->api_version == plugin_api_version);
  BOOST_TEST(std::string(d->name) == "backend.cpu");
  BOOST_TEST((d->interface == plugin_interface::backend));
  std::vector<std::string> keys;
  for (const auto& k : d->keys()) keys.emplace_back(k.key);
  BOOST_TEST((keys == std::vector<std::string>{"threads", "memory_mb", "linear", "exl3"}));
  BOOST_TEST(d->keys()[0].max == 256.0);
}

BOOST_AUTO_TEST_CASE(factory_creates_a_working_backend) {
  const plugin_descriptor* d = load_descriptor();
  config cfg;
  cfg.set("threads", int64_t{2});
  cfg.set("memory_mb", int64_t{128});
  plugin_context ctx{&default_logger(), &cfg};
  std::unique_ptr<plugin_object> obj(d->create(ctx));
  auto* be = dynamic_cast<backend*>(obj.get());
  BOOST_TEST_REQUIRE(be != nullptr);
  BOOST_TEST(be->memory_budget() == size_t{128} << 20);
  BOOST_TEST((be->activation_type() == dtype::f32));
  BOOST_TEST(be->describe().find("2 threads") != std::string::npos);
  std::vector<float> a{1, 2, 3}, b{10, 20, 30}, out(3);
  auto buf = be->alloc(sizeof(float) * 3);
  be->copy_to_device(buf->data(), a.data(), sizeof(float) * 3);
  be->add(tensor_view::contiguous(buf->data(), dtype::f32, {1, 3}),
          tensor_view::contiguous(b.data(), dtype::f32, {1, 3}),
          tensor_view::contiguous(buf->data(), dtype::f32, {1, 3}));
  be->synchronize();
  be->copy_to_host(out.data(), buf->data(), sizeof(float) * 3);
  BOOST_TEST(out == (std::vector<float>{11, 22, 33}), boost::test_tools::per_element());
}
