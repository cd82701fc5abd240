#define BOOST_TEST_MODULE gguf_plugin
#include <boost/test/unit_test.hpp>

// weights.gguf.so loaded the way the host loads it: dlopen, the one exported entry,
// the descriptor, the factory, and errors crossing the .so boundary as model_error.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "gguf_sample.hpp"
#include "tandem/error.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/weight_format.hpp"

using namespace tandem;
using namespace tandem::test;

namespace {

const plugin_descriptor* load_descriptor() {
  const char* dir = std::getenv("TANDEM_PLUGIN_PATH");
  BOOST_TEST_REQUIRE(dir != nullptr);
  const auto path = std::filesystem::path(dir) / "gguf" / "weights.gguf.so";
  // Never closed: objects and typeinfo from the library must outlive every use.
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  BOOST_TEST_REQUIRE(lib != nullptr, ::dlerror());
  using entry_fn = const plugin_descriptor* (*)();
  auto entry = reinterpret_cast<entry_fn>(::dlsym(lib, TANDEM_PLUGIN_ENTRY_SYMBOL));
  BOOST_TEST_REQUIRE(entry != nullptr);
  return entry();
}

std::filesystem::path write_temp(const std::vector<std::byte>& bytes, const char* tag) {
  auto path = std::filesystem::temp_directory_path() /
              ("tandem_gguf_plugin_" + std::to_string(::getpid()) + tag + ".gguf");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

}  // namespace

BOOST_AUTO_TEST_CASE(descriptor) {
  const plugin_descriptor* d = load_descriptor();
  BOOST_TEST_REQUIRE(d != nullptr);
  BOOST_TEST(d->api_version == plugin_api_version);
  BOOST_TEST(std::string(d->name) == "weights.gguf");
  BOOST_TEST((d->interface == plugin_interface::weight_format));
  BOOST_TEST(d->probe == nullptr);
  BOOST_TEST_REQUIRE(d->keys().size() == 1u);
  BOOST_TEST(std::string(d->keys()[0].key) == "mmap");
  BOOST_TEST((d->keys()[0].type == config_type::boolean));
}

BOOST_AUTO_TEST_CASE(create_open_and_fail) {
  const plugin_descriptor* d = load_descriptor();
  gguf_writer w;
  const auto good = write_temp(sample_file(w), "good");
  const auto bad = write_temp(std::vector<std::byte>(64, std::byte{0x47}), "bad");
  for (bool use_mmap : {true, false}) {
    config cfg;
    cfg.set("mmap", use_mmap);
    plugin_context ctx{&default_logger(), &cfg};
    std::unique_ptr<plugin_object> obj(d->create(ctx));
    auto* wf = dynamic_cast<weight_format*>(obj.get());
    BOOST_TEST_REQUIRE(wf != nullptr);
    BOOST_CHECK_THROW(wf->meta(), tandem::error);  // nothing open yet
    wf->open(good);
    BOOST_TEST(*wf->meta().get_string("general.architecture") == "llama");
    BOOST_TEST(wf->tensors().size() == 7u);
    const tensor_info* t = wf->find("q8_0");
    BOOST_TEST_REQUIRE(t != nullptr);
    BOOST_TEST(t->nbytes == 102u);
    try {
      wf->open(bad);
      BOOST_ERROR("opened a corrupt file");
    } catch (const model_error& e) {  // typeinfo shared through libtandem_core.so
      BOOST_TEST(e.file() == bad.string());
    }
    BOOST_TEST(wf->find("q8_0") == t);  // a failed open leaves the old file in place
  }
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}
